"""Torch wheels on wheel indexes: what a pip world's rows are read from, and releases no conda world has yet.

`faforge bump` reads a pip source's simple page (read_project_files: PEP 691 JSON, as PyPI serves it, or
PEP 503 HTML, as PyPI and PyTorch's per-CUDA indexes do) and, per new torch release and platform, one
wheel's torch/version.py (its CUDA) and torch/lib/libc10.so (its C++ ABI) by HTTP range requests
(read_torch_wheel). The `wheel_indexes` of torch-sources.yaml add no rows: they tell maintainers which
minor the conda channels will bring next, with which CUDA versions, pythons and platforms.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin

from faforge.abi.check import torch_facts
from faforge.abi.platforms import MACHINE_PLATFORM as PLATFORM
from faforge.datafile import load_yaml
from faforge.errors import DataError, FaforgeError, RemoteError
from faforge.matrix.releases import ReleaseTable
from faforge.release.package import cuda_of_tag
from faforge.versions import minor_of, vtuple
from faforge.wheelfetch import SIMPLE_JSON, FetchError, RemoteFile, fetch_member, http_get

# CUDA tags have 2-4 digits (cu92, cu118, cu130) and CPython tags 3 or 4 (cp39, cp312): anything else on a
# page (a hostile or broken index) is not a torch wheel name and is ignored.
WHEEL = re.compile(
    r"torch-(?P<torch>\d+\.\d+\.\d+)\+cu(?P<cuda>\d{2,4})-cp(?P<py>3\d{1,2})-cp3\d+t?-[^\s\"'<>]*?(?P<arch>x86_64|aarch64)\.whl"
)


@dataclass(frozen=True)
class WheelRelease:
    torch: str
    cuda: tuple[str, ...]
    python: tuple[str, ...]
    platforms: tuple[str, ...]


def load_wheel_indexes(path: Path) -> dict[str, str]:
    """name -> index URL from torch-sources.yaml's `wheel_indexes`."""
    raw = load_yaml(path).get("wheel_indexes") or {}
    out = {}
    for name, entry in raw.items():
        if (
            not isinstance(entry, dict)
            or set(entry) != {"url"}
            or not str(entry["url"]).startswith(("http://", "https://"))
        ):
            raise DataError(
                path, f"wheel_indexes.{name}", f"invalid value {entry!r}", hint="expected {url: https://...}"
            )
        out[name] = entry["url"]
    return out


def read_index(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise FaforgeError(
            "a wheel index is read over http(s)",
            input=url,
            hint="pass its URL, e.g. https://download.pytorch.org/whl/torch/",
        )
    try:
        return http_get(url, accept="text/html").decode("utf-8", errors="replace")
    except FetchError as exc:
        raise RemoteError(
            f"cannot read the wheel index {exc.message}",
            input=url,
            hint="check the URL (a PEP 503 simple page of PyTorch's wheel index) and your network, then retry",
        ) from None


def wheel_releases(page: str) -> list[WheelRelease]:
    """CUDA wheels on a simple page, grouped by torch version (Linux only; CPU wheels ignored)."""
    groups: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for match in WHEEL.finditer(unquote(unescape(page))):
        py = match["py"]
        groups[match["torch"]].add((cuda_of_tag(match["cuda"]), f"{py[0]}.{py[1:]}", PLATFORM[match["arch"]]))
    return [
        WheelRelease(
            torch=torch,
            cuda=tuple(sorted({c for c, _, _ in found}, key=vtuple)),
            python=tuple(sorted({p for _, p, _ in found}, key=vtuple)),
            platforms=tuple(p for p in PLATFORM.values() if any(f[2] == p for f in found)),
        )
        for torch, found in sorted(groups.items(), key=lambda kv: vtuple(kv[0]))
    ]


def ahead_of_table(table: ReleaseTable, releases: list[WheelRelease]) -> list[WheelRelease]:
    """Releases of a torch minor newer than every minor the table lists, in any conda world."""
    newest = max((vtuple(r.torch_minor) for r in table.releases), default=(0,))
    return [r for r in releases if vtuple(minor_of(r.torch)) > newest]


ANCHOR = re.compile(r"<a\s[^>]*?href\s*=\s*[\"']([^\"']+)[\"'][^>]*>", re.IGNORECASE)


def read_project_files(url: str) -> list[RemoteFile]:
    """The files of one project's simple page at `url`: PEP 691 JSON when the index serves it (PyPI), else
    the PEP 503 HTML links (PyTorch's per-CUDA indexes), with absolute URLs and the sha256 of their fragment."""
    try:
        body = http_get(url, accept=f"{SIMPLE_JSON}, text/html;q=0.1")
    except FetchError as exc:
        raise RemoteError(
            f"cannot read the wheel index {exc.message}",
            input=url,
            hint="check the URL (a project page of a PEP 503/691 index) and your network, then retry",
        ) from None
    text = body.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
            files = data["files"]
            return [
                RemoteFile(f["filename"], urljoin(url, f["url"]), (f.get("hashes") or {}).get("sha256"), f.get("size"))
                for f in files
            ]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise RemoteError(
                f"{url}: not a PEP 691 project page (no list of files)",
                input=url,
                hint="the index must serve a PEP 691 JSON or PEP 503 HTML project page",
            ) from None
    out = []
    for href in ANCHOR.findall(text):
        link, fragment = urldefrag(urljoin(url, unescape(href)))
        name = unquote(link.rsplit("/", 1)[-1])
        sha = fragment.partition("sha256=")[2] or None
        out.append(RemoteFile(name, link, sha if sha and re.fullmatch(r"[0-9a-f]{64}", sha) else None, None))
    return out


@dataclass(frozen=True)
class TorchWheelFacts:
    """What a torch wheel's build says of itself: torch/version.py's version and CUDA (None: a CPU build),
    and the C++ ABI of torch/lib/libc10.so's exports (faforge.abi.check.torch_facts), with its ELF machine."""

    wheel: str
    version: str | None
    cuda: str | None
    cxx11_abi: int | None
    machine: str | None


def read_torch_wheel(wheel: RemoteFile, cache: Path) -> TorchWheelFacts:
    """The facts of `wheel`, read by HTTP range requests (torch/version.py, then torch/lib/libc10.so only for a
    CUDA build) and cached under cache/<wheel file>/ (faforge.wheelfetch.fetch_member)."""
    version_py = fetch_member(wheel, "torch/version.py", cache)
    facts = torch_facts([version_py.parent / "lib"])
    if facts.cuda is None:
        return TorchWheelFacts(wheel.filename, facts.version, None, None, None)
    fetch_member(wheel, "torch/lib/libc10.so", cache)
    facts = torch_facts([version_py.parent / "lib"])
    if facts.cxx11_abi is None:
        raise FaforgeError(
            f"{wheel.filename}: torch/lib/libc10.so exports no torch API that tells its C++ ABI",
            input=wheel.url,
            hint="read the wheel's libraries with `faforge check-abi`; the row needs the ABI its build has",
        )
    return TorchWheelFacts(wheel.filename, facts.version, facts.cuda, facts.cxx11_abi, facts.machine)

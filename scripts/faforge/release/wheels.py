"""Torch releases that PyTorch's wheel index has and no conda world of the table has yet.

A wheel-only fact for `faforge bump`: such a release cannot become a row (every world here is a
conda channel), but it tells maintainers which minor the channels will bring next, and with which
CUDA versions, pythons and platforms.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from urllib.parse import unquote

from faforge.datafile import load_yaml
from faforge.errors import DataError, FaforgeError, RemoteError
from faforge.matrix.releases import ReleaseTable
from faforge.release.package import cuda_of_tag
from faforge.versions import minor_of, vtuple
from faforge.wheelfetch import FetchError, http_get

# CUDA tags have 2-4 digits (cu92, cu118, cu130) and CPython tags 3 or 4 (cp39, cp312): anything else on a
# page (a hostile or broken index) is not a torch wheel name and is ignored.
WHEEL = re.compile(
    r"torch-(?P<torch>\d+\.\d+\.\d+)\+cu(?P<cuda>\d{2,4})-cp(?P<py>3\d{1,2})-cp3\d+t?-[^\s\"'<>]*?(?P<arch>x86_64|aarch64)\.whl"
)
PLATFORM = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}


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
        if not isinstance(entry, dict) or set(entry) != {"url"} or not str(entry["url"]).startswith(("http://", "https://")):
            raise DataError(path, f"wheel_indexes.{name}", f"invalid value {entry!r}", hint="expected {url: https://...}")
        out[name] = entry["url"]
    return out


def read_index(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise FaforgeError("a wheel index is read over http(s)", input=url, hint="pass its URL, e.g. https://download.pytorch.org/whl/torch/")
    try:
        return http_get(url, accept="text/html").decode("utf-8", errors="replace")
    except FetchError as exc:
        raise RemoteError(f"cannot read the wheel index {exc.message}", input=url,
                          hint="check the URL (a PEP 503 simple page of PyTorch's wheel index) and your network, then retry") from None


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
    """Releases of a torch minor newer than every minor the table lists, in any world."""
    newest = max((vtuple(r.torch_minor) for r in table.releases), default=(0,))
    return [r for r in releases if vtuple(minor_of(r.torch)) > newest]

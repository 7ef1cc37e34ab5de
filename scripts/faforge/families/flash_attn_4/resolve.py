"""A new FA4 release's known-good set for one torch minor x CUDA, re-resolved with real uv against PyPI.

`uv pip compile` is run for every Python and platform the set serves, with the torch minor (uv takes its newest
patch), `flash-attn-4[cuXY]==V` and every package name the set already has (the undeclared imports, packaging
and triton, among them). A set holds one version per package for all of its Pythons (the data file's comment
says why), so when the Pythons disagree (cuda-bindings 13.5 needs Python >= 3.11) the set takes the oldest
version found, and every Python and platform is resolved again with the whole set as constraints: a held
version that one of them cannot take is an error, never a silent mix. uv is the one PyPI installs beside
faforge (a dependency); it reads its own settings (UV_INDEX_URL, UV_EXCLUDE_NEWER) from the environment."""

from __future__ import annotations

import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import Version
from uv import find_uv_bin  # the uv wheel's own way to its binary

from faforge.errors import FaforgeError, RemoteError
from faforge.family import FLASH_ATTN_4

# The set's platforms as uv's --python-platform: the manylinux baseline of the compiled dependencies' wheels.
UV_PLATFORMS = {"linux-64": "x86_64-manylinux_2_28", "linux-aarch64": "aarch64-manylinux_2_28"}
TIMEOUT_S = 600
WORKERS = 4  # uv waits on the network far more than on the CPU


@dataclass(frozen=True)
class Resolved:
    torch: str  # the torch release resolved against (the minor's newest patch)
    packages: dict[str, str]  # canonical name -> the one version held for every Python and platform


def extra(cuda: str) -> str:
    """FA4's extra for a CUDA: cutlass-dsl's own flavour libraries (`cu13`); CUDA 12 is its default."""
    major = cuda.split(".")[0]
    if major == "13":
        return "[cu13]"
    if major == "12":
        return ""
    raise FaforgeError(
        f"CUDA {cuda}: FA4's dependencies name no libraries for it (cutlass-dsl has cu12 and, as an extra, cu13)",
        hint="propose this set by hand, or drop the CUDA from the data file's sets",
    )


def compile_one(
    uv: str,
    version: str,
    torch_minor: str,
    cuda: str,
    names: list[str],
    python: str,
    platform: str,
    held: dict[str, str],
) -> dict[str, str]:
    """What uv resolves for one Python and platform: canonical name -> version (the whole closure)."""
    lines = [f"torch=={torch_minor}.*", f"{FLASH_ATTN_4.package}{extra(cuda)}=={version}", *names]
    command = [
        uv,
        "pip",
        "compile",
        "-",
        "--python-version",
        python,
        "--python-platform",
        UV_PLATFORMS[platform],
    ]
    command += ["--no-header", "--no-annotate", "--quiet"]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="fa4-held-", delete=False) as constraints:
        constraints.write("".join(f"{name}=={v}\n" for name, v in held.items()))
    try:
        if held:
            command += ["--constraints", constraints.name]
        done = subprocess.run(
            command, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise RemoteError(f"uv pip compile for Python {python} {platform}: no answer in {TIMEOUT_S} s") from None
    finally:
        os.unlink(constraints.name)
    where = f"{FLASH_ATTN_4.package} {version} with torch {torch_minor}, CUDA {cuda}, Python {python}, {platform}"
    if done.returncode != 0:
        raise RemoteError(
            f"uv cannot resolve {where}{' within the held set' if held else ''}: "
            + " ".join(done.stderr.split())[-600:],
            hint="read uv's reason: a dependency may not serve this Python or platform yet; propose the set by hand",
        )
    found = {}
    for line in done.stdout.splitlines():
        name, sep, pinned = line.split("#")[0].strip().partition("==")
        if sep:
            found[str(canonicalize_name(name.split("[")[0]))] = pinned.strip()
    if "torch" not in found:
        raise RemoteError(f"uv resolved no torch for {where}: {done.stdout[:300]!r}")
    return found


def resolve(
    version: str, torch_minor: str, cuda: str, names: list[str], pythons: tuple[str, ...], platforms: tuple[str, ...]
) -> Resolved:
    """The set of `names` for every Python x platform, one version each (network: PyPI through uv)."""
    combos = [(python, platform) for python in pythons for platform in platforms]
    try:
        uv = find_uv_bin()  # once, before the threads: it reads sysconfig, whose first read races
    except FileNotFoundError as exc:
        raise FaforgeError(f"uv: {exc}", hint="install faforge with its dependencies (uv is one)") from None

    def run(held: dict[str, str]) -> list[dict[str, str]]:
        with ThreadPoolExecutor(WORKERS) as pool:
            return list(
                pool.map(lambda c: compile_one(uv, version, torch_minor, cuda, names, c[0], c[1], held), combos)
            )

    first = run({})
    missing = sorted({n for n in names for found in first if n not in found})
    if missing:
        raise FaforgeError(f"uv's resolution of {FLASH_ATTN_4.package} {version} lacks {missing}")
    held = {n: min((found[n] for found in first), key=Version) for n in names}
    torch = min((found["torch"] for found in first), key=Version)
    if any(found[n] != held[n] for found in first for n in names) or any(f["torch"] != torch for f in first):
        again = run({**held, "torch": torch})  # uv refuses, with its reason, a held version one Python cannot take
        moved = [(c, n, found[n]) for c, found in zip(combos, again, strict=True) for n in names if found[n] != held[n]]
        if moved:
            (python, platform), name, got = moved[0]
            raise FaforgeError(f"{name}: held at {held[name]}, but uv takes {got} for Python {python} on {platform}")
    return Resolved(torch, held)

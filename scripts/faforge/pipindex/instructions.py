"""The exact lines a pip or uv user runs to install one pip cell's flash-attn from its wheel index.

`faforge page` shows them per cell, `faforge doctor` prints them for an environment (its interpreter, its
installed torch), and the tests run exactly these lines against a loopback index, so they cannot drift.
What each word is for:

- The index URL, BASE/torch2.11-cu130/: one index per (torch minor, CUDA), as PyTorch serves one per CUDA
  (download.pytorch.org/whl/cu130/). It holds only the glue wheels built for that torch minor and CUDA (one
  per CPython), their kernel wheel, and the torch-range wheels of that CUDA (faforge.pipindex.placement), so
  every `flash-attn` in it requires that torch minor. That alone holds nothing: pip and uv meet an unpinned
  `flash-attn` from the index of another minor by upgrading torch (a ~4 GB download), and pip, with torch held
  but no `--only-binary`, backtracks to PyPI's sdist and fails in its build
  (tests/pipindex/test_install_lines_hold_torch.py). Hence both pins below, on every line.
- `--extra-index-url INDEX`: ours beside the user's default index (PyPI, or the mirror they configured),
  which serves torch, einops and NVIDIA's CUDA wheels. uv ranks an extra index before the default one and,
  by its default index strategy (first-index), takes each package from the first index that has it at all:
  flash-attn and libflash-attn-kernels from ours only, torch from PyPI.
- `flash-attn==2.8.3.post2+torch2.11.cu130.abi1`: pip merges every index's candidates, so the pin is what
  keeps flash-attn ours there. Its local version label names the torch minor, CUDA and C++ ABI; PyPI refuses
  uploads with a local label (PEP 440), so no other index can offer a match, and the glue pins its kernel
  wheel the same way (libflash-attn-kernels==2.8.3.post2+cu130.sm80...).
- `--only-binary flash-attn`: never a source build of flash-attn, even from a misconfigured index.
- `torch==2.11.0`: what holds torch. The page pins its cell's torch (the glue's Requires-Dist is
  torch>=2.11,<2.12); doctor pins the installed torch's release. An installed torch of that release
  (`2.11.0`, or PyTorch's `2.11.0+cu130`) satisfies it and is kept (pip's and uv's default: upgrade only
  if needed); where none is installed this one comes from PyPI. With another torch pinned the resolver
  refuses instead of replacing torch or installing a glue that would fail to import.
"""

from __future__ import annotations

import re
import shlex

from faforge import config
from faforge.errors import FaforgeError, shorten
from faforge.family import FLASH_ATTN

GLUE = FLASH_ATTN.package
_BASE = re.compile(r"(https?|file)://\S{1,2000}")


def index_base() -> str:
    """The wheel indexes' base URL ($FAFORGE_PIP_INDEX or the default), without a trailing slash."""
    value, source = config.public_pip_index()
    if not _BASE.fullmatch(value):
        raise FaforgeError(
            f"{source} is not a wheel index URL: {shorten(repr(value))}",
            input=value,
            hint=f"set FAFORGE_PIP_INDEX to an http(s):// or file:// URL, the base of the per-(torch, CUDA) "
            f"indexes (e.g. {config.PUBLIC_PIP_INDEX}), or unset it",
        )
    return value.rstrip("/")


def index_url(index_name: str, base: str | None = None) -> str:
    """'torch2.11-cu130' -> BASE/torch2.11-cu130/ (the trailing slash: a PEP 503 root page is a folder)."""
    return f"{(base if base is not None else index_base()).rstrip('/')}/{index_name}/"


def requirements(glue_version: str, torch: str) -> tuple[str, str]:
    """The two pins: the torch release kept (or installed) and the exact glue wheel of its cell."""
    return f"torch=={torch}", f"{GLUE}=={glue_version}"


def pip_command(index: str, pins: tuple[str, ...], python: str = "python", *extra: str) -> str:
    return shlex.join(
        [python, "-m", "pip", "install", *extra, "--extra-index-url", index, "--only-binary", GLUE, *pins]
    )


def uv_command(index: str, pins: tuple[str, ...], python: str | None = None, *extra: str) -> str:
    where = ["--python", python] if python else []
    return shlex.join(
        ["uv", "pip", "install", *where, *extra, "--extra-index-url", index, "--only-binary", GLUE, *pins]
    )


def requirements_txt(index: str, pins: tuple[str, ...]) -> str:
    """The same pins as a requirements file (`pip install -r`, `uv pip install -r`), options included."""
    return "\n".join([f"--extra-index-url {index}", f"--only-binary {GLUE}", *pins]) + "\n"

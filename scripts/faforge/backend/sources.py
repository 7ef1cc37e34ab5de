"""What the build compiles: the sdist's version and kernel TUs, and the torch shim the kernel TUs
take torch's device-side definitions from."""

from __future__ import annotations

import re
from pathlib import Path

from faforge.backend.errors import BuildError
from faforge.family import FLASH_ATTN

# The torch shim inside the faforge package (the one place that names it): a local build's copy; the
# recipe copies it to torch_shim/ beside the build script.
SHIM_IN_PACKAGE = "kernels/torch_shim"


def kernel_sources(source_dir: Path) -> list[str]:
    kernels = sorted(
        str(p.relative_to(source_dir)) for p in (source_dir / FLASH_ATTN.kernel_source_dir).glob(FLASH_ATTN.kernel_glob)
    )
    if not kernels:
        raise BuildError(
            f"{source_dir}: no {FLASH_ATTN.kernel_source_dir}/{FLASH_ATTN.kernel_glob}; "
            f"is this a {FLASH_ATTN.package} sdist?"
        )
    return [FLASH_ATTN.host_source, *kernels]


def select_kernels(sources: list[str], only: str) -> list[str]:
    """The kernel sources named in `only` ('flash_bwd_hdim32_fp16_sm80.cu ...', by file name)."""
    by_name = {Path(s).name: s for s in sources if s.endswith(".cu")}
    wanted = [name for name in re.split(r"[,\s]+", only.strip()) if name]
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        raise BuildError(
            f"--only-tus: not a kernel TU of this source tree and feature set: {', '.join(unknown)}; "
            f"expected file names like {next(iter(sorted(by_name)), 'flash_fwd_hdim32_fp16_sm80.cu')}"
        )
    if not wanted:
        raise BuildError("--only-tus is empty: name kernel TUs, or leave it out to build everything")
    return [by_name[name] for name in dict.fromkeys(wanted)]


def sdist_version(source_dir: Path) -> str:
    pkg_info = source_dir / "PKG-INFO"
    if pkg_info.is_file():
        match = re.search(r"^Version: (\S+)$", pkg_info.read_text(), re.MULTILINE)
        if match:
            return match.group(1)
    init = source_dir / FLASH_ATTN.module / "__init__.py"
    match = re.search(r"__version__\s*=\s*[\"']([^\"']+)", init.read_text()) if init.is_file() else None
    if match is None:
        raise BuildError(
            f"{source_dir}: no version in PKG-INFO or {FLASH_ATTN.module}/__init__.py; "
            f"is this a {FLASH_ATTN.package} sdist? (--source-dir)"
        )
    return match.group(1)


def find_shim_dir(explicit: str | None, script_dir: Path) -> Path:
    """torch_shim/ beside the build script (the recipe copies it there), else the repo's copy."""
    candidates = (
        [Path(explicit)]
        if explicit
        else [script_dir / "torch_shim", Path(__file__).resolve().parents[1] / SHIM_IN_PACKAGE]
    )
    for candidate in candidates:
        if (candidate / "c10/cuda/CUDAException.h").is_file():
            return candidate.resolve()
    raise BuildError(
        f"no torch shim (c10/cuda/CUDAException.h) in {' or '.join(map(str, candidates))}; pass --shim-dir"
    )

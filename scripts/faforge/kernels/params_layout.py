"""The memory layout flash-attn's glue and its kernel library must agree on, measured with a compiler.

The glue (`flash_api.cpp`, compiled against each torch) fills `Flash_fwd_params` / `Flash_bwd_params`
(`csrc/flash_attn/src/flash.h`) and hands them by reference to the kernel library's `run_mha_*`
functions, which were compiled once against the torch shim (`faforge/kernels/torch_shim/`). The one
torch type inside those structs is `at::PhiloxCudaState` (the field `philox_args`), so the two sides
agree only if torch's definition of it lays out like the shim's. This module compiles a small host
probe against a set of include directories and returns sizes, alignments and every field's offset, so
two header sets can be compared field by field (`variants/kernel-abi.yaml` records the verdicts).
"""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN

FLASH_STRUCTS = ("Qkv_params", "Flash_fwd_params", "Flash_bwd_params")
PHILOX_FIELDS = ("seed_", "offset_", "offset_intragraph_", "captured_")
LAYOUT_SYMBOL = "faforge_params_layout"
# cuda_runtime_api.h defines __host__/__device__/__forceinline__ for a host compiler, so g++ compiles
# flash.h and torch's .cuh files as plain C++; flash.h's own includes do not declare cudaStream_t.
PRELUDE = """#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <cuda_runtime_api.h>
#include "flash.h"
#include <ATen/cuda/detail/UnpackRaw.cuh>
using namespace FLASH_NAMESPACE;
"""
# unpack() on a plain state and on a graph-captured one; the intragraph offset needs 34 bits, so a
# torch whose constructor takes it as uint32_t gives a different offset.
UNPACK_CASES = """  int64_t seed = 3, offset = 5;
  at::PhiloxCudaState plain(7, 11);
  at::PhiloxCudaState graph(&seed, &offset, (uint64_t(1) << 33) | 2);
  auto [s1, o1] = at::cuda::philox::unpack(plain);
  auto [s2, o2] = at::cuda::philox::unpack(graph);
  std::printf("unpack %llu,%llu,%llu,%llu\\n", (unsigned long long)s1, (unsigned long long)o1,
              (unsigned long long)s2, (unsigned long long)o2);
"""


class ProbeError(FaforgeError):
    """The layout probe did not compile or run against the given headers."""


@dataclass(frozen=True)
class Layout:
    """sizeof/alignof per type (key 'T') and offsetof per field (key 'T.field'), plus unpack's results
    (None when the probe was cross-compiled and not run)."""

    sizes: dict[str, tuple[int, int]]
    offsets: dict[str, int]
    unpack: tuple[int, ...] | None

    def differences(self, other: Layout) -> list[str]:
        """'key: self vs other' for every size, alignment, offset or unpack result that differs."""
        rows = []
        for kind, mine, theirs in (("size/align", self.sizes, other.sizes), ("offset", self.offsets, other.offsets)):
            for key in sorted(mine.keys() | theirs.keys()):
                if mine.get(key) != theirs.get(key):
                    rows.append(f"{kind} {key}: {mine.get(key)} vs {theirs.get(key)}")
        if self.unpack != other.unpack:
            rows.append(f"unpack: {self.unpack} vs {other.unpack}")
        return rows


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def struct_fields(header_text: str) -> dict[str, list[str]]:
    """Every data member of the structs in FLASH_STRUCTS, the base class's first, in declaration order.

    flash.h declares plain data members only (`int b, seqlen_q;`, `void *__restrict__ q_ptr;`), so a
    declaration is split at commas and each declarator's last identifier is the member's name.
    """
    text = _strip_comments(header_text)
    fields: dict[str, list[str]] = {}
    for match in re.finditer(r"struct\s+(\w+)\s*(?::\s*public\s+(\w+))?\s*\{(.*?)\n\};", text, flags=re.S):
        name, base, body = match.groups()
        if name not in FLASH_STRUCTS:
            continue
        own = []
        for statement in body.split(";"):
            statement = " ".join(statement.replace("__restrict__", " ").split())
            if not statement or statement.startswith("using "):
                continue
            for declarator in statement.split(","):
                own.append(re.findall(r"\w+", declarator.split("[")[0])[-1])
        fields[name] = (fields[base] if base else []) + own
    missing = [s for s in FLASH_STRUCTS if s not in fields]
    if missing:
        raise ProbeError(
            f"flash.h: no definition of {', '.join(missing)} found",
            hint=f"pass the flash.h of a {FLASH_ATTN.package} 2.x source tree ({FLASH_ATTN.source_dir}/src/flash.h)",
        )
    return fields


def _layout_keys(fields: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    """(key, C++ expression, 'size'|'align'|'offset') for every number the probe records, in table order."""
    keys = []
    for type_name, names in {"at::PhiloxCudaState": list(PHILOX_FIELDS), **fields}.items():
        keys += [(type_name, f"sizeof({type_name})", "size"), (type_name, f"alignof({type_name})", "align")]
        keys += [(f"{type_name}.{f}", f"offsetof({type_name}, {f})", "offset") for f in names]
    return keys


def probe_source(fields: dict[str, list[str]]) -> str:
    """A C++ program holding every size, alignment and offset in one constant table, LAYOUT_SYMBOL, and
    printing unpack's results when run.

    The table is read from the compiled file, not printed, so a cross compiler (aarch64) measures too.
    It includes flash.h exactly as the glue and the kernel TUs do, so at::PhiloxCudaState comes from
    whatever ATen/cuda/CUDAGeneratorImpl.h the include path finds first.
    """
    values = ",\n  ".join(expression for _, expression, _ in _layout_keys(fields))
    return (
        PRELUDE
        + f'\nextern "C" const unsigned long long {LAYOUT_SYMBOL}[] = {{\n  {values}}};\n'
        + "\nint main() {\n"
        + UNPACK_CASES
        + "}\n"
    )


def _read_table(binary: Path, count: int) -> list[int]:
    """The LAYOUT_SYMBOL array's `count` 64-bit values, from the compiled file's symbol table."""
    with binary.open("rb") as stream:
        elf = ELFFile(stream)
        symtab = elf.get_section_by_name(".symtab")
        symbols = symtab.get_symbol_by_name(LAYOUT_SYMBOL) if isinstance(symtab, SymbolTableSection) else None
        if not symbols:
            raise ProbeError(
                f"layout probe {binary} has no symbol {LAYOUT_SYMBOL}: was it stripped?",
                hint="build the probe without -s and without a stripping linker",
            )
        symbol = symbols[0]
        section = elf.get_section(symbol["st_shndx"])
        start = symbol["st_value"] - section["sh_addr"]
        data = section.data()[start : start + 8 * count]
        order = "<" if elf.little_endian else ">"
    return list(struct.unpack(f"{order}{count}Q", data))


def measure(
    workdir: Path,
    include_dirs: list[Path],
    fields: dict[str, list[str]],
    *,
    std: str = "c++17",
    compiler: str = "g++",
    run: bool = True,
    defines: tuple[str, ...] = (),
) -> Layout:
    """Compile the probe with `include_dirs` (searched in order: the torch headers or the shim, then
    flash.h's directory, then the CUDA toolkit's include directory) and read its layout; with `run`
    (a native compiler) also run it for unpack's results."""
    workdir.mkdir(parents=True, exist_ok=True)
    source, exe = workdir / "layout_probe.cpp", workdir / "layout_probe"
    source.write_text(probe_source(fields))
    # offsetof on a derived struct is "conditionally supported"; g++ supports it for non-virtual bases.
    command = [
        compiler,
        f"-std={std}",
        "-Wno-invalid-offsetof",
        *(f"-D{d}" for d in defines),
        *(f"-I{d}" for d in include_dirs),
        str(source),
        *([] if run else ["-c"]),
        "-o",
        str(exe),
    ]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise ProbeError(
            f"layout probe in {workdir} did not compile: {built.stderr.strip()[-2000:]}",
            hint="check that the include directories hold the headers the probe names",
        )
    keys = _layout_keys(fields)
    table = {(key, kind): value for (key, _, kind), value in zip(keys, _read_table(exe, len(keys)), strict=True)}
    sizes = {key: (value, table[(key, "align")]) for (key, kind), value in table.items() if kind == "size"}
    offsets = {key: value for (key, kind), value in table.items() if kind == "offset"}
    unpack = None
    if run:
        printed = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
        unpack = tuple(int(v) for v in printed[1].split(","))
    return Layout(sizes, offsets, unpack)

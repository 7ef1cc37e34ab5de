"""The memory layout flash-attn's glue and its kernel library must agree on, measured with a compiler.

The glue (`flash_api.cpp`, compiled against each torch) fills `Flash_fwd_params` / `Flash_bwd_params`
(`csrc/flash_attn/src/flash.h`) and hands them by reference to the kernel library's `run_mha_*`
functions, which were compiled once against the torch shim (`faforge/buildcost/torch_shim/`). The one
torch type inside those structs is `at::PhiloxCudaState` (the field `philox_args`), so the two sides
agree only if torch's definition of it lays out like the shim's. This module compiles a small host
probe against a set of include directories and returns sizes, alignments and every field's offset, so
two header sets can be compared field by field (`variants/kernel-abi.yaml` records the verdicts).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import FaforgeError

FLASH_STRUCTS = ("Qkv_params", "Flash_fwd_params", "Flash_bwd_params")
PHILOX_FIELDS = ("seed_", "offset_", "offset_intragraph_", "captured_")
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
    """sizeof/alignof per type (key 'T') and offsetof per field (key 'T.field'), plus unpack's results."""

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
        raise ProbeError(f"flash.h: no definition of {', '.join(missing)} found",
                         hint="pass the flash.h of a flash-attn 2.x source tree (csrc/flash_attn/src/flash.h)")
    return fields


def probe_source(fields: dict[str, list[str]]) -> str:
    """A host C++ program printing `T size align` and `T.field offset` lines and unpack's results.

    It includes flash.h exactly as the glue and the kernel TUs do, so at::PhiloxCudaState comes from
    whatever ATen/cuda/CUDAGeneratorImpl.h the include path finds first.
    """
    body = []
    for type_name, names in {"at::PhiloxCudaState": list(PHILOX_FIELDS), **fields}.items():
        body.append(f'  std::printf("{type_name} %zu %zu\\n", sizeof({type_name}), alignof({type_name}));')
        body += [f'  std::printf("{type_name}.{f} %zu\\n", offsetof({type_name}, {f}));' for f in names]
    return PRELUDE + "\nint main() {\n" + "\n".join(body) + "\n" + UNPACK_CASES + "}\n"


def parse_probe_output(text: str) -> Layout:
    sizes, offsets, unpack = {}, {}, None
    for line in text.splitlines():
        key, *values = line.split()
        if key == "unpack":
            unpack = tuple(int(v) for v in values[0].split(","))
        elif len(values) == 2:
            sizes[key] = (int(values[0]), int(values[1]))
        else:
            offsets[key] = int(values[0])
    return Layout(sizes, offsets, unpack)


def measure(workdir: Path, include_dirs: list[Path], fields: dict[str, list[str]], *, std: str = "c++17",
            compiler: str = "g++") -> Layout:
    """Compile and run the probe with `include_dirs` (searched in order: the torch headers or the shim,
    then flash.h's directory, then the CUDA toolkit's include directory) and return what it printed."""
    workdir.mkdir(parents=True, exist_ok=True)
    source, exe = workdir / "layout_probe.cpp", workdir / "layout_probe"
    source.write_text(probe_source(fields))
    # offsetof on a derived struct is "conditionally supported"; g++ supports it for non-virtual bases.
    command = [compiler, f"-std={std}", "-Wno-invalid-offsetof", *(f"-I{d}" for d in include_dirs), str(source), "-o", str(exe)]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise ProbeError(f"layout probe in {workdir} did not compile: {built.stderr.strip()[-2000:]}",
                         hint="check that the include directories hold the headers the probe names")
    return parse_probe_output(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)

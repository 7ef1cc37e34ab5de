"""Issue 21: the gate checks every library of the load closure, as ld.so relocates every object a
load brings in, not only the module. A helper beside the extension (found through its RUNPATH
$ORIGIN) or a split build's libflash_attn_kernels.so (--library-dir) that imports a torch symbol
the torch lacks fails the load, so it fails the gate, naming that library and the symbol.

Each verdict is also given by the real dynamic linker (ctypes, RTLD_NOW, torch's libraries first);
the tests assert that both agree. No stub ever stands in for a torch symbol.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.abi import classify
from faforge.abi.check import check_path
from tests.abi import elf_fixtures as fx
from tests.abi.conftest import run_faforge, validate
from tests.abi.test_loader_model import C10, CUDART, pip_layout

LOAD_AFTER_TORCH = """
import ctypes, os, sys
try:
    for lib in sys.argv[2:]:
        ctypes.CDLL(lib)
    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)
except OSError as exc:
    print(exc)
    sys.exit(1)
"""
HELPER = """
namespace c10 { int present(); DECL }
extern "C" int helper() { return c10::present() CALL; }
"""
EXT = 'extern "C" int helper();\nextern "C" void* PyInit_ext() { return nullptr; }\nextern "C" int use() { return helper(); }\n'


def real_load(ext: Path, first: list[Path], *, library_path: Path | None = None, python: str = sys.executable) -> tuple[bool, str]:
    """The real loader's verdict: `first` loaded as `import torch` loads them, then `ext` with RTLD_NOW."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = str(library_path)
    result = subprocess.run([python, "-c", LOAD_AFTER_TORCH, str(ext), *map(str, first)], capture_output=True,
                            text=True, env=env)
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def helper_family(gxx, folder: Path, torch_lib: Path, *, missing: bool, runpath: str = "$ORIGIN/lib",
                  helper_dir: Path | None = None, helper_name: str = "libhelper.so") -> tuple[Path, Path]:
    """An extension (no torch import of its own) and a helper in `helper_dir` (default folder/lib)
    that imports c10::present() and, with `missing`, c10::absent(), which the stand-in lacks."""
    helper_dir = helper_dir or folder / "lib"
    helper = fx.compile_shared(gxx, HELPER, helper_dir / helper_name,
                               defines={"DECL": "int absent();" if missing else "", "CALL": "+ c10::absent()" if missing else ""},
                               flags=[f"-Wl,-soname,{helper_name}", f"-L{torch_lib}", "-Wl,--no-as-needed", "-lc10",
                                      "-Wl,--allow-shlib-undefined"])
    ext = fx.compile_shared(gxx, EXT, folder / "ext.so", defines={},
                            flags=[f"-L{helper_dir}", "-Wl,--no-as-needed", f"-l:{helper_name}",
                                   *([f"-Wl,--enable-new-dtags,-rpath,{runpath}"] if runpath else [])])
    return ext, helper


@pytest.fixture
def site(gxx, tmp_path) -> tuple[Path, Path]:
    site = tmp_path / "site-packages"
    return site, pip_layout(gxx, site)


@pytest.mark.parametrize("missing", [True, False])
def test_helper_beside_the_extension_is_checked_against_torch(gxx, site, tmp_path, missing):
    site_dir, torch_lib = site
    ext, helper = helper_family(gxx, tmp_path / "pkg", torch_lib, missing=missing)
    verdict = check_path(ext, [site_dir])
    loaded, error = real_load(ext, [torch_lib / "libc10.so", torch_lib / "libc10_cuda.so"])
    assert verdict.ok == loaded, (verdict.modules[0].problems, error)
    if not missing:
        return
    (problem,) = verdict.modules[0].problems
    assert (problem.kind, problem.demangled, problem.imported_by) == (classify.MISSING_SYMBOL, "c10::absent()", str(helper))
    assert "_ZN3c106absentEv" in error and "libhelper.so" in error
    result = run_faforge("check-abi", ext, "--against", site_dir, "--json")
    report = validate(json.loads(result.stdout))
    assert result.returncode == 1 and [p["imported_by"] for p in report["problems"]] == [str(helper)]
    text = run_faforge("check-abi", ext, "--against", site_dir)
    assert text.returncode == 1 and f"imported by: {helper}" in text.stdout and "c10::absent()" in text.stdout


@pytest.mark.parametrize("missing", [True, False])
def test_split_glue_kernel_library_in_a_kernel_package_is_checked(gxx, site, tmp_path, missing):
    """Our own split: the glue needs libflash_attn_kernels.so from the kernel package's lib/ (--library-dir)."""
    site_dir, torch_lib = site
    kernels_lib = tmp_path / "kernel-pkg" / "lib"
    glue, kernels = helper_family(gxx, tmp_path / "glue", torch_lib, missing=missing, runpath="",
                                  helper_dir=kernels_lib, helper_name="libflash_attn_kernels.so")
    verdict = check_path(glue, [site_dir], library_dirs=[kernels_lib])
    loaded, error = real_load(glue, [torch_lib / "libc10.so"], library_path=kernels_lib)
    assert verdict.ok == loaded, (verdict.modules[0].problems, error)
    assert verdict.modules[0].unverified_libraries == ()
    if missing:
        (problem,) = verdict.modules[0].problems
        assert (problem.demangled, problem.imported_by) == ("c10::absent()", str(kernels.resolve()))
        result = run_faforge("check-abi", glue, "--against", site_dir, "--library-dir", kernels_lib)
        assert result.returncode == 1 and "libflash_attn_kernels.so" in result.stdout


def test_helper_that_is_not_found_stays_unverified(gxx, site, tmp_path):
    """Without the RUNPATH the helper is nowhere: unverified (the loader fails on the missing file)."""
    site_dir, torch_lib = site
    ext, _ = helper_family(gxx, tmp_path / "pkg", torch_lib, missing=True, runpath="")
    verdict = check_path(ext, [site_dir])
    assert verdict.ok and [u.name for u in verdict.modules[0].unverified_libraries] == ["libhelper.so"]

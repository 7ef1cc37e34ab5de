"""The gate checks every library of the load closure, as ld.so relocates every object a
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
from faforge.wheelfetch import RemoteZip
from tests.abi import elf_fixtures as fx
from tests.abi.conftest import run_faforge, validate
from tests.abi.test_loader_model import C10, pip_layout
from tests.abi.test_real_binaries import CACHE, SYSTEM_DIRS, _dynamic, _nm, _write, layout_dirs, torch_site
from tests.support.pinned_wheels import listed
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

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
EXT = (
    'extern "C" int helper();\nextern "C" void* PyInit_ext() { return nullptr; }\n'
    'extern "C" int use() { return helper(); }\n'
)


def real_load(
    ext: Path, first: list[Path], *, library_path: Path | None = None, python: str = sys.executable
) -> tuple[bool, str]:
    """The real loader's verdict: `first` loaded as `import torch` loads them, then `ext` with RTLD_NOW."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = str(library_path)
    result = subprocess.run(
        [python, "-c", LOAD_AFTER_TORCH, str(ext), *map(str, first)], capture_output=True, text=True, env=env
    )
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def helper_family(
    gxx,
    folder: Path,
    torch_lib: Path,
    *,
    missing: bool,
    runpath: str = "$ORIGIN/lib",
    helper_dir: Path | None = None,
    helper_name: str = "libhelper.so",
) -> tuple[Path, Path]:
    """An extension (no torch import of its own) and a helper in `helper_dir` (default folder/lib)
    that imports c10::present() and, with `missing`, c10::absent(), which the stand-in lacks."""
    helper_dir = helper_dir or folder / "lib"
    helper = fx.compile_shared(
        gxx,
        HELPER,
        helper_dir / helper_name,
        defines={"DECL": "int absent();" if missing else "", "CALL": "+ c10::absent()" if missing else ""},
        flags=[
            f"-Wl,-soname,{helper_name}",
            f"-L{torch_lib}",
            "-Wl,--no-as-needed",
            "-lc10",
            "-Wl,--allow-shlib-undefined",
        ],
    )
    ext = fx.compile_shared(
        gxx,
        EXT,
        folder / "ext.so",
        defines={},
        flags=[
            f"-L{helper_dir}",
            "-Wl,--no-as-needed",
            f"-l:{helper_name}",
            *([f"-Wl,--enable-new-dtags,-rpath,{runpath}"] if runpath else []),
        ],
    )
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
    assert (problem.kind, problem.demangled, problem.imported_by) == (
        classify.MISSING_SYMBOL,
        "c10::absent()",
        str(helper),
    )
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
    glue, kernels = helper_family(
        gxx,
        tmp_path / "glue",
        torch_lib,
        missing=missing,
        runpath="",
        helper_dir=kernels_lib,
        helper_name="libflash_attn_kernels.so",
    )
    verdict = check_path(glue, [site_dir], library_dirs=[kernels_lib])
    loaded, error = real_load(glue, [torch_lib / "libc10.so"], library_path=kernels_lib)
    assert verdict.ok == loaded, (verdict.modules[0].problems, error)
    assert verdict.modules[0].unverified_libraries == ()
    if missing:
        (problem,) = verdict.modules[0].problems
        assert (problem.demangled, problem.imported_by) == ("c10::absent()", str(kernels.resolve()))
        result = run_faforge("check-abi", glue, "--against", site_dir, "--library-dir", kernels_lib)
        assert result.returncode == 1 and "libflash_attn_kernels.so" in result.stdout


@pytest.mark.parametrize("missing", [True, False])
def test_a_helper_in_the_package_without_runpath_is_checked_as_loaded_first(gxx, site, tmp_path, missing):
    """A package's own helper library: no RUNPATH finds pkg/lib/libhelper.so, so the bare loader cannot load the
    module; a package that ships it so loads it itself first (as torchaudio does), and the gate judges that load."""
    site_dir, torch_lib = site
    ext, helper = helper_family(gxx, tmp_path / "pkg", torch_lib, missing=missing, runpath="")
    first = [torch_lib / "libc10.so", torch_lib / "libc10_cuda.so"]
    assert real_load(ext, first)[0] is False  # the bare loader
    verdict = check_path(ext, [site_dir])
    loaded, error = real_load(ext, [*first, helper])  # as the package loads
    assert verdict.ok == loaded, (verdict.modules[0].problems, error)
    assert [(lib.name, lib.beside_module) for lib in verdict.modules[0].libraries if lib.name == "libhelper.so"] == [
        ("libhelper.so", True)
    ]
    assert [p.imported_by for p in verdict.modules[0].problems] == ([str(helper)] if missing else [])


def test_a_helper_found_nowhere_cannot_be_told(gxx, site, tmp_path):
    """Not beside the module either: the loader fails on the missing file, and what the helper imports is
    unknown, so the verdict is "cannot tell" (check-abi exit 3), never OK."""
    site_dir, torch_lib = site
    ext, _ = helper_family(
        gxx, tmp_path / "pkg", torch_lib, missing=True, runpath="", helper_dir=tmp_path / "elsewhere"
    )
    verdict = check_path(ext, [site_dir])
    assert (verdict.verdict, verdict.ok) == ("cannot-tell", False)
    assert [u.name for u in verdict.modules[0].undecided] == ["libhelper.so"]
    result = run_faforge("check-abi", ext, "--against", site_dir, "--json")
    assert result.returncode == 3 and validate(json.loads(result.stdout))["verdict"] == "cannot-tell"


# -- a folder reached through a directory symlink: $ORIGIN/.. is resolved physically ----------------
DEP = 'extern "C" int dep() { return 1; }\n'
NEEDS_DEP = {  # a library that needs libdep.so and libc10.so
    "helper": 'extern "C" int dep();\nnamespace c10 { int present(); }\n'
    'extern "C" int helper() { return dep() + c10::present(); }\n',
    "torch": 'extern "C" int dep();\nnamespace c10 { int present(); int cuda_dep() { return dep() + present(); } }\n',
}
USES_C10 = (
    'namespace c10 { int present(); }\nextern "C" void* PyInit_ext() { return nullptr; }\n'
    'extern "C" int use() { return c10::present(); }\n'
)


def place(folder: Path, store: Path, layout: str) -> None:
    """`folder` shows the files built in `store`: a symlink to the store's folder ("directory-link"),
    or a real folder with a symlink per file ("file-links", as uv --link-mode symlink makes)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    if layout == "directory-link":
        folder.symlink_to(store, target_is_directory=True)
        return
    folder.mkdir()
    for path in store.iterdir():
        (folder / path.name).symlink_to(path)


@pytest.mark.parametrize("layout", ["file-links", "directory-link"])
@pytest.mark.parametrize("needer", ["helper", "torch"])
def test_origin_dotdot_through_a_directory_symlink(gxx, tmp_path, layout, needer):
    """A library opened in a folder that is a symlink into a store, with RUNPATH $ORIGIN/../X: read
    lexically, X is beside the link, but the kernel resolves `..` from the link's target, so the
    loader does not find libdep.so there. needer=helper: the extension's helper (its own closure);
    needer=torch: a torch library the extension does not need, which `import torch` loads anyway."""
    site = tmp_path / "site-packages"
    torch_lib = site / "torch" / "lib"
    if needer == "torch":
        store, name, runpath = (
            tmp_path / "store" / "0123-torch" / "lib",
            "libtorch_cuda.so",
            "$ORIGIN/../../nvidia/dep/lib",
        )
        folder, dep_dir, c10_dir = torch_lib, site / "nvidia" / "dep" / "lib", tmp_path / "store" / "0123-torch" / "lib"
    else:
        store, name, runpath = tmp_path / "store" / "4567-pkg" / "lib", "libhelper.so", "$ORIGIN/../dep/lib"
        folder, dep_dir, c10_dir = site / "pkg" / "lib", site / "pkg" / "dep" / "lib", torch_lib
    fx.compile_shared(gxx, C10, c10_dir / "libc10.so", defines={}, flags=["-Wl,-soname,libc10.so"])
    fx.compile_shared(gxx, DEP, dep_dir / "libdep.so", defines={}, flags=["-Wl,-soname,libdep.so"])
    fx.compile_shared(
        gxx,
        NEEDS_DEP[needer],
        store / name,
        defines={},
        flags=[
            f"-Wl,-soname,{name}",
            f"-L{dep_dir}",
            f"-L{c10_dir}",
            "-Wl,--no-as-needed",
            "-ldep",
            "-lc10",
            f"-Wl,--enable-new-dtags,-rpath,{runpath}",
        ],
    )
    place(folder, store, layout)
    ext = fx.compile_shared(
        gxx,
        EXT if needer == "helper" else USES_C10,
        site / "pkg" / "ext.so",
        defines={},
        flags=[
            f"-L{c10_dir}",
            f"-L{store}",
            "-Wl,--no-as-needed",
            "-lc10",
            *(["-l:libhelper.so", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"] if needer == "helper" else []),
        ],
    )
    verdict = check_path(ext, [site])
    loaded, error = real_load(ext, [torch_lib / "libc10.so", *([torch_lib / name] if needer == "torch" else [])])
    assert verdict.ok == loaded == (layout == "file-links"), (verdict.modules[0].problems, error)
    if loaded:
        return
    assert "libdep.so" in error
    (problem,) = verdict.modules[0].problems
    assert (problem.kind, problem.library) == (classify.MISSING_LIBRARY, "libdep.so")
    looked_in = os.path.normpath(store / runpath.removeprefix("$ORIGIN/"))
    for words in (str(folder / name), runpath, looked_in, str(dep_dir), "link the files, not the directory"):
        assert words in problem.detail, (words, problem.detail)
    result = run_faforge("check-abi", ext, "--against", site)
    assert result.returncode == 1 and "libdep.so" in result.stdout, result.stdout + result.stderr


# -- real binaries nobody here built ----------------------------------------------------------------
# intel-extension-for-pytorch 2.8.0 (built for torch 2.8.0, CPU): _C.so imports no torch symbol itself;
# its RUNPATH $ORIGIN/lib finds lib/libintel-ext-pt-python.so (RPATH $ORIGIN), which needs
# lib/libintel-ext-pt-cpu.so: those two carry the torch imports. Read out of the wheel by range
# requests (45 MB compressed, sha256 pinned and checked against PyPI's listing, CRC-32 per member).
IPEX_WHEEL = "intel_extension_for_pytorch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl"
IPEX_SHA256 = "e7b8a1daccf23ad4eccb33f4b2f6f110d65feddcecbf8aae70f351c2237fab70"
IPEX_MODULE = "intel_extension_for_pytorch/_C.cpython-311-x86_64-linux-gnu.so"
IPEX_HELPERS = (
    "intel_extension_for_pytorch/lib/libintel-ext-pt-python.so",
    "intel_extension_for_pytorch/lib/libintel-ext-pt-cpu.so",
)
LOAD_AFTER_IMPORT_TORCH = (
    "import ctypes, os, sys, torch\ntry:\n    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
    "except OSError as exc:\n    print(exc)\n    sys.exit(1)\n"
)


def ipex_site() -> Path:
    site = CACHE / "ipex-2.8.0" / "site-packages"
    done = site / ".complete"
    if not done.exists():
        wheel = RemoteZip(listed("intel-extension-for-pytorch", IPEX_WHEEL, IPEX_SHA256).url)
        for member in (IPEX_MODULE, *IPEX_HELPERS):
            _write(site / member, wheel.read(member))
        done.write_text(IPEX_SHA256 + "\n")
    return site


def closure_truth(binary: Path, site: Path) -> set[tuple[str, str]]:
    """binutils' answer, independent of faforge: (object, symbol) for every undefined non-weak
    non-Py symbol of the binary and of each library beside it (found through RUNPATH, not torch's)
    that no library of the load defines."""
    own, found, queue, seen = [binary], [], [(binary, n) for n in _dynamic(binary)[0]], set()
    while queue:
        needer, name = queue.pop(0)
        if name in seen:
            continue
        seen.add(name)
        dirs = [*map(Path, _dynamic(needer)[1]), *layout_dirs(site), *SYSTEM_DIRS]
        path = next((d / name for d in dirs if (d / name).is_file()), None)
        if path is None:
            continue
        found.append(path)
        if path.parent == binary.parent or binary.parent in path.parents:
            own.append(path)
        queue += [(path, dep) for dep in _dynamic(path)[0]]
    defined = {name for lib in found for kind, name in _nm(lib, "--defined-only")}
    return {
        (str(obj), name)
        for obj in own
        for kind, name in _nm(obj, "--undefined-only")
        if kind == "U" and name not in defined and not name.startswith(("Py", "_Py"))
    }


@pytest.mark.slow
def test_real_extension_with_helpers_against_real_torches(capsys):
    """IPEX 2.8.0 against torch 2.8.0 (built for: passes), the local 2.13.0 CPU and 2.14.1 CUDA
    (fail, naming the helpers): gate == binutils, and for the local venvs gate == real import."""
    module = ipex_site() / IPEX_MODULE
    sites = {"2.8.0": (torch_site("2.8.0"), None)}
    for version in ("2.13.0", "2.14.1"):
        try:
            env = torch_env(version)
        except TorchEnvUnavailable as exc:
            pytest.skip(f"torch {version} is not installable here: {exc}")
        sites[version] = (env.site_packages, env.python)
    rows, false_ok, false_fail = [], 0, 0
    for version, (site, python) in sites.items():
        truth = closure_truth(module, site)
        code, report = _check_json(module, site)
        named = {(p["imported_by"], p["symbol"]) for p in report["problems"] if p["kind"] != classify.MISSING_LIBRARY}
        loaded = None
        if python is not None:
            result = subprocess.run(
                [str(python), "-c", LOAD_AFTER_IMPORT_TORCH, str(module)], capture_output=True, text=True
            )
            loaded = result.returncode == 0
        loads = not truth if loaded is None else loaded
        assert loads == (not truth), (version, loaded, sorted(truth)[:5])
        false_ok += code == 0 and not loads
        false_fail += code != 0 and loads
        if truth:  # every missing symbol is named with the library that imports it
            assert truth <= named, sorted(truth - named)[:5]
            assert {obj for obj, _ in truth} <= {str(site_path) for site_path in (module.parent / "lib").glob("*.so")}
        rows.append(
            f"IPEX 2.8.0 _C -> torch {version}: gate {'OK' if code == 0 else 'FAIL'} ({len(named)} named), "
            f"binutils {len(truth)} unresolved, real loader {'-' if loaded is None else 'loads' if loaded else 'fails'}"
        )
    with capsys.disabled():
        print("\n" + "\n".join(rows) + f"\nfalse OK: {false_ok}, false FAIL: {false_fail}")
    assert (false_ok, false_fail) == (0, 0)
    assert [row.split("gate ")[1][:2] for row in rows] == ["OK", "FA", "FA"]


def _check_json(binary: Path, against: Path) -> tuple[int, dict]:
    result = run_faforge("check-abi", binary, "--against", against, "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, validate(json.loads(result.stdout))


def _link_tree(source: Path, target: Path) -> None:
    """`target` mirrors `source` with a symlink for every file (uv --link-mode symlink)."""
    for path in source.rglob("*"):
        if path.is_file():
            (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (target / path.relative_to(source)).symlink_to(path)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["file-links", "directory-link"])
def test_real_torch_in_symlinked_layouts(gxx, tmp_path, layout, capsys):
    """The real torch 2.14.1: torch/lib of file links loads ($ORIGIN is the folder the library was
    opened in); torch/lib as a link to a folder in a store does not (the kernel resolves
    $ORIGIN/../../nvidia physically, inside the store). The gate decides as the loader does."""
    try:
        real = torch_env("2.14.1").site_packages
    except TorchEnvUnavailable as exc:
        pytest.skip(f"torch 2.14.1 is not installable here: {exc}")
    site = tmp_path / "site-packages"
    _link_tree(real / "nvidia", site / "nvidia")
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").symlink_to(real / "torch" / "version.py")
    if layout == "file-links":
        _link_tree(real / "torch" / "lib", site / "torch" / "lib")
    else:
        store = tmp_path / "store" / "0123abcd-torch" / "lib"
        _link_tree(real / "torch" / "lib", store)
        (site / "torch" / "lib").symlink_to(store, target_is_directory=True)
    torch_lib = site / "torch" / "lib"
    ext = fx.compile_shared(
        gxx,
        "namespace c10::cuda { void SetDevice(signed char, bool); }\n"
        'extern "C" void* PyInit_ext() { return nullptr; }\n'
        'extern "C" void use() { c10::cuda::SetDevice(0, false); }\n',
        tmp_path / "ext.so",
        defines={},
        flags=[f"-L{real / 'torch' / 'lib'}", "-Wl,--no-as-needed", "-lc10_cuda", "-lc10", "-ltorch_cuda"],
    )
    verdict = check_path(ext, [site])
    loaded, error = real_load(
        ext, [torch_lib / name for name in ("libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so")]
    )
    with capsys.disabled():
        print(
            f"\ntorch 2.14.1, {layout}: gate {'OK' if verdict.ok else 'FAIL'}, real loader "
            f"{'loads' if loaded else 'fails: ' + error[-120:]}"
        )
    assert verdict.ok == loaded == (layout == "file-links"), (verdict.modules[0].problems, error)
    if not loaded:  # the library the loader could not open is one the gate names, with the layout's cause
        refused = error.split(":", 1)[0]
        misplaced = {p.library: p.detail for p in verdict.modules[0].problems if p.kind == classify.MISSING_LIBRARY}
        assert refused in misplaced and "link the files, not the directory" in misplaced[refused], (refused, misplaced)
        with capsys.disabled():
            print(
                f"gate names {len(misplaced)} libraries torch's RPATH $ORIGIN/../../nvidia does not reach, "
                f"the loader stops at the first: {refused}"
            )

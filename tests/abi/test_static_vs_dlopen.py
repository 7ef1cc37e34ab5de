"""The static verdict must agree with the real dynamic linker on every pairing.

Each extension (SetDevice signature x C++ ABI) is checked against each torch
stand-in, and the same pair is dlopen'ed with RTLD_NOW in a fresh process.

The exception, where the static verdict is *meant* to differ from this host's dlopen: glibc-too-new
under --glibc (the binary loads on this host's glibc 2.36 but not on the target). A non-torch dependency
found nowhere is no exception: the loader fails, and the verdict is "cannot tell", not OK.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from faforge.abi import classify
from faforge.abi.check import check_path
from faforge.abi.elf import read_dynamic_symbols
from tests.abi import elf_fixtures as fx
from tests.abi.conftest import dlopen, run_faforge, validate

PAIRS = list(itertools.product(itertools.product(fx.SIGNATURES, fx.ABIS), repeat=2))


def expected_kinds(ext: tuple[str, int], lib: tuple[str, int]) -> set[str]:
    kinds = set()
    if ext[0] != lib[0]:
        kinds.add(classify.SIGNATURE_DRIFT)  # SetDevice has no std::string: only its parameters differ
    if ext[1] != lib[1]:
        kinds.add(classify.ABI_MISMATCH)  # device_name(std::string const&) exists only in the other ABI
    return kinds


@pytest.mark.parametrize(("ext", "lib"), PAIRS, ids=[f"{e[0]}-abi{e[1]}-vs-{x[0]}-abi{x[1]}" for e, x in PAIRS])
def test_pair_agrees_with_dlopen(ext, lib, extensions, stand_ins):
    verdict = check_path(extensions[ext], [stand_ins[lib]])
    loaded, error = dlopen(extensions[ext], stand_ins[lib])
    assert verdict.ok == loaded, error
    assert {p.kind for p in verdict.modules[0].problems} == expected_kinds(ext, lib)
    assert verdict.modules[0].declared.cxx11_abi == ext[1]
    assert verdict.torch.cxx11_abi == lib[1]
    validate(verdict.to_json())


def test_drift_names_both_signatures(extensions, stand_ins):
    verdict = check_path(extensions[("int", 1)], [stand_ins[("int8_bool", 1)]])
    (problem,) = verdict.modules[0].problems
    assert problem.kind == classify.SIGNATURE_DRIFT
    assert problem.symbol == "_ZN3c104cuda9SetDeviceEi"
    assert problem.demangled == "c10::cuda::SetDevice(int)"
    assert problem.offers == ("c10::cuda::SetDevice(signed char, bool)",)
    assert problem.library == "libc10_cuda.so"


def test_abi_mismatch_says_which_abi_each_side_uses(extensions, stand_ins):
    verdict = check_path(extensions[("int8", 0)], [stand_ins[("int8", 1)]])
    (problem,) = verdict.modules[0].problems
    assert problem.kind == classify.ABI_MISMATCH
    assert problem.symbol == "_ZN3c1011device_nameERKSs"
    assert problem.demangled == "c10::device_name(std::string const&)"
    assert "only in the C++11 ABI" in problem.detail and "built with the pre-C++11 ABI" in problem.detail


def test_stand_ins_export_the_real_mangled_names(stand_ins):
    for (sig, _), folder in stand_ins.items():
        assert fx.SIGNATURES[sig][2] in read_dynamic_symbols(folder / "libc10_cuda.so").exports()


def test_missing_symbol_agrees(gxx, stand_ins, tmp_path):
    lib = stand_ins[("int8_bool", 1)]
    ext = fx.build_extension(
        gxx,
        tmp_path / "ext.so",
        "int8_bool",
        1,
        lib,
        extra_decl="void SetStream(int);",
        extra_call="c10::cuda::SetStream(1);",
    )
    verdict = check_path(ext, [lib])
    assert [(p.kind, p.demangled) for p in verdict.modules[0].problems] == [
        (classify.MISSING_SYMBOL, "c10::cuda::SetStream(int)")
    ]
    assert dlopen(ext, lib)[0] is False


def test_missing_torch_library_agrees(gxx, stand_ins, tmp_path):
    """libc10_cuda.so absent from a folder that still holds torch (libc10.so): an error, never 'unverified'."""
    lib = stand_ins[("int8_bool", 1)]
    ext = fx.build_extension(gxx, tmp_path / "ext.so", "int8_bool", 1, lib)
    torch_without_cuda = tmp_path / "torch-lib"
    torch_without_cuda.mkdir()
    shutil.copy(lib / "libc10.so", torch_without_cuda)
    verdict = check_path(ext, [torch_without_cuda])
    assert [(p.kind, p.library) for p in verdict.modules[0].problems] == [(classify.MISSING_LIBRARY, "libc10_cuda.so")]
    assert dlopen(ext, torch_without_cuda)[0] is False


def test_required_version_the_host_lacks_agrees(extensions, stand_ins, tmp_path):
    """A GLIBC version node this glibc does not define fails dlopen; statically it is glibc-too-new."""
    ext = tmp_path / "ext.so"
    data = extensions[("int8_bool", 1)].read_bytes()
    assert b"GLIBC_2.2.5" in data
    ext.write_bytes(data.replace(b"GLIBC_2.2.5\0", b"GLIBC_9.9.9\0"))
    verdict = check_path(ext, [stand_ins[("int8_bool", 1)]])
    kinds = {(p.kind, p.symbol) for p in verdict.modules[0].problems}
    assert kinds == {(classify.GLIBC_TOO_NEW, "GLIBC_9.9.9")}
    loaded, error = dlopen(ext, stand_ins[("int8_bool", 1)])
    assert not loaded and "GLIBC_9.9.9" in error


# -- the listed exceptions: static verdict != this host's dlopen, by design ------------------------


def test_exception_glibc_too_new_for_the_target(extensions, stand_ins):
    ext, lib = extensions[("int8_bool", 1)], stand_ins[("int8_bool", 1)]
    verdict = check_path(ext, [lib], glibc="2.28")  # manylinux_2_28
    assert verdict.modules[0].declared.newest_versions["GLIBC"] == "GLIBC_2.36"  # arc4random
    assert [(p.kind, p.symbol) for p in verdict.modules[0].problems] == [(classify.GLIBC_TOO_NEW, "GLIBC_2.36")]
    assert "arc4random" in verdict.modules[0].problems[0].detail
    assert dlopen(ext, lib)[0] is True  # this host's glibc 2.36 has it; a 2.28 target would not
    assert check_path(ext, [lib], glibc="2.36").ok


def test_a_library_found_nowhere_is_no_pass(gxx, stand_ins, tmp_path):
    lib = stand_ins[("int8_bool", 1)]
    fx.compile_shared(gxx, "int helper() { return 1; }\n", tmp_path / "build" / "libhelper.so", defines={})
    ext = fx.build_extension(
        gxx,
        tmp_path / "ext.so",
        "int8_bool",
        1,
        lib,
        extra_libs=[f"-L{tmp_path / 'build'}", "-Wl,--no-as-needed", "-lhelper"],
    )
    verdict = check_path(ext, [lib])
    assert (verdict.ok, verdict.verdict, verdict.modules[0].problems) == (False, "cannot-tell", ())
    assert [u.name for u in verdict.modules[0].unverified_libraries] == ["libhelper.so"]
    assert dlopen(ext, lib)[0] is False  # the dynamic linker cannot find libhelper.so either


# -- architecture -------------------------------------------------------------------------------


def test_wrong_architecture_agrees(tmp_path, stand_ins):
    tool = fx.aarch64_gxx()
    if tool is None:
        pytest.skip("aarch64-linux-gnu-g++ is missing (Debian g++-aarch64-linux-gnu; scripts/dev test installs it)")
    lib = stand_ins[("int8_bool", 1)]
    arm_lib = fx.build_library(tool, tmp_path / "arm-lib", "int8_bool", 1).parent
    ext = fx.build_extension(tool, tmp_path / "ext_arm.so", "int8_bool", 1, arm_lib)
    verdict = check_path(ext, [lib])
    problems = verdict.modules[0].problems
    assert [p.kind for p in problems] == [classify.WRONG_ARCHITECTURE]
    assert "aarch64" in problems[0].detail and "x86_64" in problems[0].detail
    assert verdict.modules[0].declared.machine == "aarch64"
    assert dlopen(ext, lib)[0] is False
    # Against its own architecture's torch and libstdc++, the static check passes (it cannot be dlopen'ed here).
    assert check_path(ext, [arm_lib], platform="linux-aarch64", library_dirs=[fx.AARCH64_SYSROOT_LIB]).ok


def test_platform_mismatch(extensions, stand_ins):
    verdict = check_path(extensions[("int8_bool", 1)], [stand_ins[("int8_bool", 1)]], platform="linux-aarch64")
    assert [p.kind for p in verdict.modules[0].problems] == [classify.WRONG_ARCHITECTURE]


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_json_and_exit_codes(extensions, stand_ins):
    good = run_faforge("check-abi", extensions[("int8_bool", 1)], "--against", stand_ins[("int8_bool", 1)], "--json")
    assert good.returncode == 0, good.stderr
    report = validate(json.loads(good.stdout))
    assert report["ok"] is True and report["problems"] == []
    bad = run_faforge("check-abi", extensions[("int", 0)], "--against", stand_ins[("int8_bool", 1)], "--json")
    assert bad.returncode == 1, bad.stderr
    report = validate(json.loads(bad.stdout))
    assert {p["kind"] for p in report["problems"]} == {"signature-drift", "abi-mismatch"}
    for problem in report["problems"]:
        assert problem["symbol"].startswith("_Z") and problem["demangled"] and problem["library"] == "libc10_cuda.so"


def test_cli_text_explains_in_plain_words(extensions, stand_ins):
    result = run_faforge("check-abi", extensions[("int", 1)], "--against", stand_ins[("int8_bool", 1)])
    assert result.returncode == 1
    assert (
        "the binary wants c10::cuda::SetDevice(int), but libc10_cuda.so offers c10::cuda::SetDevice(signed char, bool)"
        in result.stdout
    )
    assert "built for: x86_64 (64-bit), _GLIBCXX_USE_CXX11_ABI=1" in result.stdout


def test_wheel_and_conda_tarball_inputs(extensions, stand_ins, tmp_path):
    ext, lib = extensions[("int8_bool", 1)], stand_ins[("int8_bool", 1)]
    wheel = tmp_path / "fixture-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(ext, "fixture_ext.cpython-311-x86_64-linux-gnu.so")
        zf.writestr("fixture-1.0.dist-info/METADATA", "Name: fixture\n")
    package = tmp_path / "fixture-1.0-py311_0.tar.bz2"
    with tarfile.open(package, "w:bz2") as tar:
        tar.add(ext, "lib/python3.11/site-packages/fixture_ext.cpython-311-x86_64-linux-gnu.so")
        tar.add(lib / "libc10.so", "lib/libnot_an_extension.so")  # no PyInit_: not checked
    for archive in (wheel, package):
        verdict = check_path(archive, [lib])
        assert verdict.ok
        assert [m.path.rsplit("/", 1)[-1] for m in verdict.modules] == ["fixture_ext.cpython-311-x86_64-linux-gnu.so"]


def test_folder_input_finds_extension_modules(extensions, stand_ins, tmp_path):
    (tmp_path / "pkg").mkdir()
    shutil.copy(extensions[("int", 0)], tmp_path / "pkg" / "a.so")
    shutil.copy(stand_ins[("int", 0)] / "libc10.so", tmp_path / "pkg" / "libc10.so")
    verdict = check_path(tmp_path, [stand_ins[("int", 0)]])
    assert [m.path for m in verdict.modules] == [str(Path("pkg") / "a.so")]
    assert verdict.ok


def test_dot_conda_input(extensions, stand_ins, tmp_path):
    """A .conda is a zip of zstd tarballs; py-rattler unpacks it (the package is built here with Debian's zstd)."""
    zstd = shutil.which("zstd")
    if zstd is None:
        pytest.skip("the zstd program is missing; it is only used to build the .conda fixture")
    ext, lib = extensions[("int8_bool", 1)], stand_ins[("int8_bool", 1)]
    with tarfile.open(tmp_path / "pkg.tar", "w") as tar:
        tar.add(ext, "lib/python3.11/site-packages/fixture_ext.cpython-311-x86_64-linux-gnu.so")
    (tmp_path / "index.json").write_text('{"name": "fixture", "version": "1.0", "build": "0", "build_number": 0}')
    with tarfile.open(tmp_path / "info.tar", "w") as tar:
        tar.add(tmp_path / "index.json", "info/index.json")
    package = tmp_path / "fixture-1.0-0.conda"
    with zipfile.ZipFile(package, "w") as zf:
        zf.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
        for part in ("info", "pkg"):
            subprocess.run(
                [zstd, "-q", str(tmp_path / f"{part}.tar"), "-o", str(tmp_path / f"{part}.tar.zst")], check=True
            )
            zf.write(tmp_path / f"{part}.tar.zst", f"{part}-fixture-1.0-0.tar.zst")
    verdict = check_path(package, [lib])
    assert verdict.ok and [m.path for m in verdict.modules] == [
        "lib/python3.11/site-packages/fixture_ext.cpython-311-x86_64-linux-gnu.so"
    ]

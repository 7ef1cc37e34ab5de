"""torch.ops libraries and per-torch library sets, on g++-built stand-ins (fast; the real wheels are in
test_torch_ops_wheels.py).

An "ops library" here is the fixture extension without its PyInit_: a .so that needs libc10_cuda.so and
that a package would open with torch.ops.load_library. The torch stand-ins are conftest's, given a
torch/version.py so the release (and CPU or CUDA build) is known, as in a real torch.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from faforge.abi import library_sets
from faforge.abi.check import check_path
from faforge.abi.report import CANNOT_TELL, IMPORT, LOAD_LIBRARY, OK, PROBLEMS
from faforge.errors import DataError
from tests.abi import elf_fixtures as fx
from tests.abi.conftest import run_faforge, validate

DLPACK = "libtorch_c_dlpack_addon_torch{}-{}.so"


@pytest.fixture(scope="module")
def ops(tmp_path_factory, gxx, stand_ins) -> dict[str, Path]:
    """signature -> an ops library (no PyInit_) built on that SetDevice: 'int8' is torch 2.3-2.7's, 'int8_bool' 2.8+."""
    root = tmp_path_factory.mktemp("ops")
    source = fx.EXTENSION_SOURCE.replace('extern "C" void* PyInit_fixture_ext() { return nullptr; }', "")
    built = {}
    for sig in ("int8", "int8_bool"):
        params, args, _ = fx.SIGNATURES[sig]
        built[sig] = fx.compile_shared(
            gxx,
            source,
            root / f"ops_{sig}.so",
            defines={"PARAMS": params, "ARGS": args, "EXTRA_DECL": "", "EXTRA_CALL": ""},
            flags=["-D_GLIBCXX_USE_CXX11_ABI=1", f"-L{stand_ins[(sig, 1)]}", "-lc10_cuda"],
        )
    return built


def torch_at(tmp_path: Path, stand_ins, sig: str, version: str | None, cuda: str | None = None) -> Path:
    """A torch/lib folder: the stand-in of `sig`, and a version.py saying `version` and `cuda` (None: no version.py)."""
    lib = tmp_path / f"torch-{version}-{cuda}" / "torch" / "lib"
    shutil.copytree(stand_ins[(sig, 1)], lib)
    if version is not None:
        (lib.parent / "version.py").write_text(
            f"__version__ = '{version}'\ncuda: Optional[str] = {cuda and repr(cuda)}\n"
        )
    return lib


def package(tmp_path: Path, files: dict[str, Path]) -> Path:
    folder = tmp_path / "site"
    for shown, source in files.items():
        (folder / shown).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder / shown)
    return folder


@pytest.fixture
def dlpack(tmp_path, ops) -> Path:
    """torch-c-dlpack-ext's layout: torch27 members built like torch 2.7's ops, torch28 like 2.8's."""
    return package(
        tmp_path,
        {
            f"pkg/{DLPACK.format(r, d)}": ops["int8" if r == 27 else "int8_bool"]
            for r in (27, 28)
            for d in ("cpu", "cuda")
        },
    )


def test_a_folder_of_ops_libraries_is_checked_by_path_in_the_package(tmp_path, ops, stand_ins):
    """Before: "no Python extension module" (exit 2). Each library is checked as the package loads it."""
    folder = package(tmp_path, {"vision/_C.so": ops["int8_bool"], "vision/image.so": ops["int8"]})
    verdict = check_path(folder, [torch_at(tmp_path, stand_ins, "int8_bool", "2.8.0")])
    assert [(m.path, m.loaded_by, m.ok) for m in verdict.modules] == [
        ("vision/_C.so", LOAD_LIBRARY, True),
        ("vision/image.so", LOAD_LIBRARY, False),
    ]
    assert verdict.verdict == PROBLEMS


def test_the_set_member_for_the_torch_is_the_only_one_checked(dlpack, tmp_path, stand_ins):
    for sig, version, loads in (("int8_bool", "2.8.0", "28"), ("int8", "2.7.1+cpu", "27")):
        verdict = check_path(dlpack, [torch_at(tmp_path, stand_ins, sig, version)])
        assert [m.path for m in verdict.modules] == [f"pkg/{DLPACK.format(loads, 'cpu')}"]
        (library_set,) = verdict.sets
        assert (library_set.package, library_set.verdict, verdict.verdict) == ("torch-c-dlpack-ext", OK, OK)
        assert library_set.files == "pkg/libtorch_c_dlpack_addon_torch{27,28}-{cpu,cuda}.so"
        assert "the other 3 are never loaded" in library_set.detail


def test_a_cuda_torch_checks_both_devices_its_loader_may_pick(tmp_path, ops, stand_ins):
    """cuda where a GPU is visible, cpu where none is: a torch28-cuda built like 2.7's fails, though -cpu loads."""
    folder = package(
        tmp_path,
        {
            f"pkg/{DLPACK.format(28, 'cpu')}": ops["int8_bool"],
            f"pkg/{DLPACK.format(28, 'cuda')}": ops["int8"],
            f"pkg/{DLPACK.format(27, 'cpu')}": ops["int8"],
        },
    )
    verdict = check_path(folder, [torch_at(tmp_path, stand_ins, "int8_bool", "2.8.0", "12.8")])
    assert [(m.path, m.ok) for m in verdict.modules] == [
        (f"pkg/{DLPACK.format(28, 'cpu')}", True),
        (f"pkg/{DLPACK.format(28, 'cuda')}", False),
    ]
    assert verdict.verdict == PROBLEMS


def test_a_torch_without_its_member_fails_as_the_loader_does(dlpack, tmp_path, stand_ins):
    lib = torch_at(tmp_path, stand_ins, "int8", "2.5.1")
    verdict = check_path(dlpack, [lib])
    assert (verdict.modules, verdict.verdict) == ((), PROBLEMS)
    assert verdict.sets[0].problem.library == f"pkg/{DLPACK.format(25, 'cpu')}"
    result = run_faforge("check-abi", dlpack, "--against", lib, "--json")
    report = validate(json.loads(result.stdout))
    assert result.returncode == 1 and [p["kind"] for p in report["problems"]] == ["missing-library"]
    text = run_faforge("check-abi", dlpack, "--against", lib)
    assert text.returncode == 1 and "opens libtorch_c_dlpack_addon_torch25-cpu.so on torch 2.5.1" in text.stdout


def test_a_torch_that_loads_none_verifies_nothing(dlpack, tmp_path, stand_ins):
    lib = torch_at(tmp_path, stand_ins, "int8_bool", "2.11.0", "13.0")
    result = run_faforge("check-abi", dlpack, "--against", lib, "--json")
    report = validate(json.loads(result.stdout))
    assert (result.returncode, report["verdict"], report["modules"]) == (3, CANNOT_TELL, [])
    assert "loads none of them" in report["library_sets"][0]["detail"]
    text = run_faforge("check-abi", dlpack, "--against", lib)
    assert (
        text.returncode == 3 and "CANNOT TELL (the package loads none of its libraries with this torch" in text.stdout
    )


def test_a_torch_of_unknown_release_cannot_tell_which(dlpack, tmp_path, stand_ins):
    verdict = check_path(dlpack, [torch_at(tmp_path, stand_ins, "int8_bool", None)])
    assert (verdict.modules, verdict.verdict) == ((), CANNOT_TELL)
    assert "release is unknown" in verdict.sets[0].detail


def test_a_set_no_rule_knows_is_never_checked_member_by_member(tmp_path, ops, stand_ins):
    folder = package(
        tmp_path,
        {
            "other/libops_torch2.7.so": ops["int8"],
            "other/libops_torch2.8.so": ops["int8_bool"],
            "other/_C.so": ops["int8_bool"],
            "lone/libops_pt28.so": ops["int8_bool"],
        },
    )
    lib = torch_at(tmp_path, stand_ins, "int8_bool", "2.8.0")
    verdict = check_path(folder, [lib])
    assert [m.path for m in verdict.modules] == [
        "lone/libops_pt28.so",
        "other/_C.so",
    ]  # one release only: a library like any other
    (library_set,) = verdict.sets
    assert (library_set.files, library_set.package, library_set.loads) == ("other/libops_torch{2.7,2.8}.so", None, ())
    assert verdict.verdict == CANNOT_TELL and "variants/torch-library-sets.yaml" in library_set.detail
    text = run_faforge("check-abi", folder, "--against", lib)
    assert (
        text.returncode == 3
        and "CANNOT TELL (which of other/libops_torch{2.7,2.8}.so the package loads is unknown)" in text.stdout
    )


def test_a_wheel_holding_a_set(dlpack, tmp_path, stand_ins, extensions):
    wheel = tmp_path / "torch_c_dlpack_ext-0.1.5-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for member in sorted(dlpack.rglob("*.so")):
            zf.write(member, str(member.relative_to(dlpack)))
        zf.write(extensions[("int8_bool", 1)], "pkg/_ext.cpython-311-x86_64-linux-gnu.so")
    verdict = check_path(wheel, [torch_at(tmp_path, stand_ins, "int8_bool", "2.8.0")])
    assert [(m.path, m.loaded_by) for m in verdict.modules] == [
        ("pkg/_ext.cpython-311-x86_64-linux-gnu.so", IMPORT),
        (f"pkg/{DLPACK.format(28, 'cpu')}", LOAD_LIBRARY),
    ]
    assert verdict.ok


@pytest.mark.parametrize(
    "row, says",
    [
        ({"package": "p", "loader": "l", "file": "x(", "no_member": "import-error"}, "not a regular expression"),
        ({"package": "p", "loader": "l", "file": "x", "no_member": "import-error"}, "needs the groups"),
        (
            {
                "package": "p",
                "loader": "l",
                "file": r"(?P<major>\d)(?P<minor>\d)(?P<device>a|b)",
                "no_member": "import-error",
            },
            "devices",
        ),
        ({"package": "p", "loader": "l", "file": r"(?P<major>\d)(?P<minor>\d)", "no_member": "maybe"}, "no_member"),
        (
            {
                "package": "p",
                "loader": "l",
                "file": r"(?P<major>\d)(?P<minor>\d)",
                "no_member": "import-error",
                "loads_none_from": 2.1,
            },
            "loads_none_from",
        ),
        ({"package": "", "loader": "l", "file": r"(?P<major>\d)(?P<minor>\d)", "no_member": "import-error"}, "package"),
    ],
)
def test_a_bad_rule_is_named_by_file_and_key(tmp_path, row, says):
    data = tmp_path / "sets.yaml"
    data.write_text(json.dumps({"schema": 1, "sets": [row]}))
    with pytest.raises(DataError, match=says):
        library_sets.load_rules(data)


def test_the_committed_rules_load():
    (row,) = library_sets.load_rules()
    assert row.package == "torch-c-dlpack-ext" and row.loads_none_from == (2, 10)
    assert row.file.match(DLPACK.format(29, "cuda")) and not row.file.match("libtorch_c_dlpack_addon_torch29.so")


def test_a_wheels_vendored_libraries_are_unpacked_with_its_modules(tmp_path, gxx, stand_ins):
    """auditwheel puts what a library needs in pkg.libs/ under a versioned name
    (torchvision.libs/libpng16.6f3a47c5.so.16), found through RUNPATH $ORIGIN/../pkg.libs. Before, only names ending in
    .so were unpacked, so the check of a wheel said "cannot tell" (libhelper found nowhere) where the same files in a
    folder were OK."""
    helper = fx.compile_shared(
        gxx,
        'extern "C" int helper() { return 1; }\n',
        tmp_path / "libhelper-1a2b3c4d.so.1",
        defines={},
        flags=["-Wl,-soname,libhelper-1a2b3c4d.so.1"],
    )
    lib = torch_at(tmp_path, stand_ins, "int8_bool", "2.8.0")
    source = (
        'extern "C" int helper(); namespace c10 { int version(); }\n'
        'extern "C" int use() { return helper() + c10::version(); }\n'
    )
    ops = fx.compile_shared(
        gxx,
        source,
        tmp_path / "image.so",
        defines={},
        flags=[f"-L{lib}", "-lc10", str(helper), "-Wl,-rpath,$ORIGIN/../pkg.libs"],
    )
    wheel = tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(ops, "pkg/image.so")
        zf.write(helper, "pkg.libs/libhelper-1a2b3c4d.so.1")
    verdict = check_path(wheel, [lib])
    (module,) = verdict.modules
    assert (module.path, module.loaded_by, module.unverified_libraries, verdict.verdict) == (
        "pkg/image.so",
        LOAD_LIBRARY,
        (),
        OK,
    )

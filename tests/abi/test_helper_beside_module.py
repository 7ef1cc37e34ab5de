"""A package's own helper library beside its extension, judged as the package loads it.

torchaudio's `_torchaudio.so` and torchtext's `_torchtext.so` NEED `libtorchaudio.so` / `libtorchtext.so`,
which they find through no RUNPATH: the package's Python code loads the helper first from its own folder
(`torch.ops.load_library(path)`, a ctypes.CDLL), and the import's DT_NEEDED then binds to it by name.
The gate takes such a library from beside the module, checks it as loaded first and says so; before,
it was "unverified" and the verdict said OK even where the helper needs torch symbols the torch lacks.

Ground truth is the real dynamic linker in the order the package loads: PyPI's aarch64 CPU torch
(installed with `pip --target`, tests/support/aarch64_cross.py) is imported by Debian's arm64 Python
under qemu-user (its glibc ld.so does the loading), then the module is opened alone (the bare loader:
it must fail, "cannot open shared object file"), then the helper, then the module. The gate's verdict
must be OK exactly when both the helper and the module load, and a FAIL must name the symbol the loader
stopped at. aarch64 because PyPI's aarch64 torch up to 2.10 is a CPU build (~90 MB, nothing else to
load), where an x86_64 torch needs several GB of NVIDIA libraries to import.

Downloads, cached in the test cache: the three wheels whole (1-3 MB, sha256 pinned below) and four
aarch64 torches with their pure-Python dependencies (2.0.0, 2.0.1, 2.4.1, 2.5.1; about 400 MB).
The six real loads run two at a time, about 30 s each under qemu.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from faforge.abi import classify
from faforge.abi.report import CANNOT_TELL
from tests.abi.arm64_loads import emulated, gate, two_at_a_time
from tests.abi.conftest import run_faforge, validate
from tests.support.cache import cache_dir
from tests.support.pinned_wheels import unpacked_wheel

pytestmark = pytest.mark.slow

WHEELS = cache_dir("helper-wheels")


@dataclass(frozen=True)
class Family:
    name: str
    project: str
    wheel: str
    sha256: str
    module: str  # the extension module, relative to site-packages
    helper: str  # the library the package loads itself before importing it
    built_for: str  # the torch its METADATA requires (==)


FAMILIES = {
    f.name: f
    for f in (
        Family(
            "torchaudio 2.5.1",
            "torchaudio",
            "torchaudio-2.5.1-cp311-cp311-manylinux2014_aarch64.whl",
            "4ba24769a72bd686903feaf1040c895d710af2ffbcd25ee7a9794ee285561b26",
            "torchaudio/lib/_torchaudio.so",
            "torchaudio/lib/libtorchaudio.so",
            "2.5.1",
        ),
        Family(
            "torchaudio 2.8.0",
            "torchaudio",
            "torchaudio-2.8.0-cp311-cp311-manylinux_2_28_aarch64.whl",
            "4573c6042950c20278e3608a9a38050ba0bc72e0049e1bbfd249caf859a8029b",
            "torchaudio/lib/_torchaudio.so",
            "torchaudio/lib/libtorchaudio.so",
            "2.8.0",
        ),
        Family(
            "torchtext 0.15.2",
            "torchtext",
            "torchtext-0.15.2-cp311-cp311-manylinux2014_aarch64.whl",
            "f44fa2bdeaba751eca9ff77c28b374234b5281c7b1d40cea38f67a871e64bfb9",
            "torchtext/_torchtext.so",
            "torchtext/lib/libtorchtext.so",
            "2.0.1",
        ),
    )
}
# (family, torch): its own torch, an older one, and for two a newer helper on an older torch.
PAIRINGS = [
    ("torchaudio 2.5.1", "2.5.1"),
    ("torchaudio 2.5.1", "2.4.1"),
    ("torchaudio 2.8.0", "2.5.1"),
    ("torchtext 0.15.2", "2.0.1"),
    ("torchtext 0.15.2", "2.0.0"),
    ("torchtext 0.15.2", "2.5.1"),
]
# Run in the emulated Python: import torch from SITE, then open MODULE alone, HELPER, and MODULE again.
LOAD_AS_THE_PACKAGE_DOES = """
import ctypes, json, os, sys
site, module, helper = sys.argv[1:4]
sys.path.insert(0, site)
import torch
def load(path):
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW)
        return [True, ""]
    except OSError as exc:
        return [False, str(exc)]
bare = load(module)
print(json.dumps({"torch": torch.__version__, "bare": bare, "helper": load(helper), "module": load(module)}))
"""


@dataclass(frozen=True)
class RealLoad:
    bare: tuple[bool, str]  # the module opened alone, after import torch
    helper: tuple[bool, str]  # the helper, as the package opens it
    module: tuple[bool, str]  # the module, after the helper

    @property
    def ok(self) -> bool:
        return self.helper[0] and self.module[0]


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    return {name: unpacked_wheel(f.project, f.wheel, f.sha256, WHEELS) for name, f in FAMILIES.items()}


@pytest.fixture(scope="module")
def real_loads(arm64, sites, wheels) -> dict[tuple[str, str], RealLoad]:
    """The real loader's verdict for every pairing, two emulated processes at a time."""

    def load(pairing):
        family, torch = FAMILIES[pairing[0]], pairing[1]
        folder = wheels[family.name]
        answer = emulated(
            arm64, LOAD_AS_THE_PACKAGE_DOES, [sites[torch], folder / family.module, folder / family.helper], torch, 600
        )
        return RealLoad(tuple(answer["bare"]), tuple(answer["helper"]), tuple(answer["module"]))

    return two_at_a_time(load, PAIRINGS)


@pytest.mark.parametrize("pairing", PAIRINGS, ids=[f"{f}-vs-torch{t}" for f, t in PAIRINGS])
def test_the_verdict_is_the_real_loaders_in_the_order_the_package_loads(pairing, real_loads, sites, wheels, arm64):
    family = FAMILIES[pairing[0]]
    real = real_loads[pairing]
    module, helper = wheels[family.name] / family.module, wheels[family.name] / family.helper
    assert not real.bare[0] and "cannot open shared object file" in real.bare[1], (
        real.bare
    )  # the bare loader finds no helper

    verdict = gate(module, sites[pairing[1]], arm64)
    (checked,) = verdict.modules
    print(
        f"{family.name} vs torch {pairing[1]}: "
        f"loader {'loads' if real.ok else 'fails: ' + (real.helper[1] or real.module[1])[-90:]}; "
        f"gate {verdict.verdict} ({len(checked.problems)} problems)"
    )
    assert verdict.ok == real.ok, (real, [(p.kind, p.demangled, p.imported_by) for p in checked.problems])
    taken = [lib for lib in checked.libraries if lib.beside_module]
    assert [(lib.name, lib.path) for lib in taken] == [(helper.name, str(helper))]
    assert checked.undecided == ()
    if not real.ok:
        stopped_at = real.helper[1].rsplit("undefined symbol: ", 1)[1]
        assert stopped_at in {p.symbol for p in checked.problems if p.imported_by == str(helper)}, stopped_at
        assert all(p.kind in classify.KINDS for p in checked.problems)


def test_the_report_says_the_helper_was_taken_from_beside_the_module(sites, wheels, arm64):
    family = FAMILIES["torchtext 0.15.2"]
    module = wheels[family.name] / family.module
    args = (module, "--against", sites["2.5.1"], "--platform", "linux-aarch64", "--library-dir", arm64.sysroot / "lib")
    result = run_faforge("check-abi", *args, "--json")
    report = validate(json.loads(result.stdout))
    assert result.returncode == 1 and report["verdict"] == "problems"
    (taken,) = [lib for lib in report["modules"][0]["libraries"] if lib["beside_module"]]
    assert taken["path"] == str(wheels[family.name] / family.helper)
    assert {p["imported_by"] for p in report["problems"]} == {taken["path"]}
    text = run_faforge("check-abi", *args)
    assert text.returncode == 1 and f"taken from beside the module: libtorchtext.so ({taken['path']})" in text.stdout


def test_a_helper_found_nowhere_leaves_the_verdict_untold(sites, wheels, arm64, tmp_path):
    """The module without its helper: the bare loader cannot load it, and what the helper imports is
    unknown. Before, this was OK ("unverified"); now it is "cannot tell", exit 3, never a pass."""
    family = FAMILIES["torchaudio 2.5.1"]
    alone = tmp_path / "_torchaudio.so"
    shutil.copy2(wheels[family.name] / family.module, alone)
    verdict = gate(alone, sites["2.5.1"], arm64)
    assert verdict.verdict == CANNOT_TELL and not verdict.ok
    assert [u.name for u in verdict.modules[0].undecided] == ["libtorchaudio.so"]
    args = (alone, "--against", sites["2.5.1"], "--platform", "linux-aarch64", "--library-dir", arm64.sysroot / "lib")
    result = run_faforge("check-abi", *args, "--json")
    report = validate(json.loads(result.stdout))
    assert (result.returncode, report["ok"], report["verdict"]) == (3, False, "cannot-tell")
    text = run_faforge("check-abi", *args)
    assert text.returncode == 3 and "CANNOT TELL (needs libtorchaudio.so, found nowhere)" in text.stdout
    assert "Traceback" not in text.stderr


def test_torchs_own_rpath_chain_finds_its_bundled_libraries(sites, wheels, arm64):
    """torch.libs/libopenblasp-*.so has no RPATH and needs libgfortran-*.so beside it: ld.so finds it through
    libtorch_cpu.so's inherited DT_RPATH ($ORIGIN/../../torch.libs), and so must the gate (nothing unverified)."""
    family = FAMILIES["torchaudio 2.5.1"]
    verdict = gate(wheels[family.name] / family.module, sites["2.5.1"], arm64)
    names = {lib.name for lib in verdict.modules[0].libraries}
    assert any(n.startswith("libgfortran-") for n in names) and verdict.modules[0].unverified_libraries == ()

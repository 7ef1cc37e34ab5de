"""torch.ops libraries in real PyPI wheels, judged as their package loads them, against the real loader.

Many packages ship `.so` files with no PyInit_ that their Python code opens itself after `import torch`
(torch.ops.load_library, ctypes.CDLL): torchvision's `_C.so` and `image.so`, torch-c-dlpack-ext's add-on
libraries. check-abi used to say "no Python extension module" (exit 2) for such a wheel; it now checks
each one, named by its path in the package. torch-c-dlpack-ext 0.1.5 ships one library per torch release
(`libtorch_c_dlpack_addon_torch{27,28,29}-{cpu,cuda}.so` on aarch64) and picks one by torch.__version__:
only that one is judged (variants/torch-library-sets.yaml).

Ground truth is the real glibc loader under qemu-user, as in test_helper_beside_module.py (same torches,
same cache): Debian's arm64 Python imports PyPI's aarch64 CPU torch, then the package itself
(torch-c-dlpack-ext: its own loader picks; torchvision: torch.ops.load_library of each library, as
torchvision/extension.py does). Every member of the dlpack set is also opened alone, to show what
checking each one would have called a FAIL. Downloads: the two wheels (0.4 and 2.4 MB, sha256 pinned)
and the aarch64 torches 2.5.1 and 2.8.0 with their dependencies (shared with the helper test). The
four emulated imports run two at a time, about a minute each on a busy 2-core machine.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from faforge.abi.report import LOAD_LIBRARY, OK, PROBLEMS
from tests.abi.arm64_loads import emulated, gate, two_at_a_time
from tests.abi.conftest import run_faforge, validate
from tests.support.cache import cache_dir
from tests.support.pinned_wheels import unpacked_wheel

pytestmark = pytest.mark.slow

WHEELS = cache_dir("torch-ops-wheels")


@dataclass(frozen=True)
class Wheel:
    project: str
    file: str
    sha256: str
    package: str | None  # imported to let the package's own loader pick (None: open `libraries` with torch.ops)
    libraries: tuple[str, ...]  # every torch.ops library in it, relative to site-packages


DLPACK_SET = tuple(
    f"torch_c_dlpack_ext/libtorch_c_dlpack_addon_torch{r}-{d}.so" for r in (27, 28, 29) for d in ("cpu", "cuda")
)
WHEEL_FILES = {
    w.project: w
    for w in (
        Wheel(
            "torch-c-dlpack-ext",
            "torch_c_dlpack_ext-0.1.5-cp311-cp311-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl",
            "fba674110e1fab0b176bb5a28223e157db65c90767d4ba74abdbee9f537b0e9d",
            "torch_c_dlpack_ext",
            DLPACK_SET,
        ),
        Wheel(
            "torchvision",
            "torchvision-0.23.0-cp311-cp311-manylinux_2_28_aarch64.whl",  # Requires-Dist: torch (==2.8.0)
            "01dc33ee24c79148aee7cdbcf34ae8a3c9da1674a591e781577b716d233b1fa6",
            None,
            ("torchvision/_C.so", "torchvision/image.so"),
        ),
    )
}
# (wheel, torch): the torch it was built for, and one it was not.
PAIRINGS = [
    ("torch-c-dlpack-ext", "2.8.0"),
    ("torch-c-dlpack-ext", "2.5.1"),
    ("torchvision", "2.8.0"),
    ("torchvision", "2.5.1"),
]
# Run in the emulated Python: import torch from SITE, then the package from FOLDER, or each library with torch.ops.
LOAD_AS_THE_PACKAGE_DOES = """
import json, os, sys
site, folder, extra, package = sys.argv[1:5]
libraries = sys.argv[5:]
sys.path[:0] = [site, folder, extra]
import torch
def load(path):
    try:
        torch.ops.load_library(os.path.join(folder, path))
        return [True, ""]
    except OSError as exc:
        return [False, str(exc)]
answer = {"torch": torch.__version__, "import": None}
if package:
    try:
        lib = __import__(package).core._lib
        answer["import"] = [True, os.path.basename(lib._name) if lib is not None else ""]
    except ImportError as exc:
        answer["import"] = [False, str(exc)]
answer["loads"] = {path: load(path) for path in libraries}
print(json.dumps(answer))
"""


@dataclass(frozen=True)
class RealLoad:
    imported: tuple[bool, str] | None  # the package's own import: (ok, the library its loader opened, or the error)
    loads: dict[str, tuple[bool, str]]  # each library opened alone with torch.ops.load_library

    def ok(self, wheel: Wheel) -> bool:
        return self.imported[0] if self.imported is not None else all(ok for ok, _ in self.loads.values())


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    return {w.project: unpacked_wheel(w.project, w.file, w.sha256, WHEELS) for w in WHEEL_FILES.values()}


@pytest.fixture(scope="module")
def packaging_folder(tmp_path_factory) -> Path:
    """torch-c-dlpack-ext's loader imports `packaging` (pure Python), which its METADATA does not require."""
    folder = tmp_path_factory.mktemp("pure")
    shutil.copytree(Path(importlib.util.find_spec("packaging").origin).parent, folder / "packaging")
    return folder


@pytest.fixture(scope="module")
def real_loads(arm64, sites, wheels, packaging_folder) -> dict[tuple[str, str], RealLoad]:
    def load(pairing):
        wheel, torch = WHEEL_FILES[pairing[0]], pairing[1]
        answer = emulated(
            arm64,
            LOAD_AS_THE_PACKAGE_DOES,
            [sites[torch], wheels[wheel.project], packaging_folder, wheel.package or "", *wheel.libraries],
            torch,
        )
        return RealLoad(
            tuple(answer["import"]) if answer["import"] else None, {k: tuple(v) for k, v in answer["loads"].items()}
        )

    return two_at_a_time(load, PAIRINGS)


@pytest.mark.parametrize("pairing", PAIRINGS, ids=[f"{w}-vs-torch{t}" for w, t in PAIRINGS])
def test_the_verdict_is_the_real_loaders_for_what_the_package_loads(pairing, real_loads, sites, wheels, arm64):
    wheel, torch = WHEEL_FILES[pairing[0]], pairing[1]
    real = real_loads[pairing]
    verdict = gate(wheels[wheel.project], sites[torch], arm64)
    print(
        f"{wheel.file} vs torch {torch}: loader {real.imported or real.loads}; gate {verdict.verdict}, "
        f"checked {[m.path for m in verdict.modules]}"
    )
    assert verdict.ok == real.ok(wheel), (
        real,
        [(p.kind, p.demangled, p.library) for m in verdict.modules for p in m.problems],
    )
    assert all(
        m.loaded_by == LOAD_LIBRARY for m in verdict.modules
    )  # no PyInit_ in any: before, "no Python extension module"
    if wheel.package is None:  # every library is loaded: each is checked, named by its path in the package
        assert [m.path for m in verdict.modules] == list(wheel.libraries)
        for module in verdict.modules:
            ok, error = real.loads[module.path]
            assert module.ok == ok, (module.path, error)
            if not ok:
                stopped_at = error.rsplit("undefined symbol: ", 1)[1]
                assert stopped_at in {p.symbol for p in module.problems}, stopped_at
        return
    (library_set,) = verdict.sets
    assert library_set.members == DLPACK_SET and library_set.package == wheel.project
    if real.imported[0]:  # the one its loader opened is the one checked, and only it
        assert (
            library_set.loads == tuple(m.path for m in verdict.modules) == (f"torch_c_dlpack_ext/{real.imported[1]}",)
        )
        assert library_set.verdict == OK
    else:
        assert "No matching prebuilt torch c dlpack extension" in real.imported[1]
        assert (verdict.modules, library_set.verdict) == ((), PROBLEMS)
        assert library_set.problem.library == "torch_c_dlpack_ext/libtorch_c_dlpack_addon_torch25-cpu.so"


def test_checking_every_member_would_fail_the_ones_the_package_never_loads(real_loads, sites, wheels, arm64):
    """Against torch 2.8.0 (a CPU build) the -cuda members do not load (libtorch_cuda.so), and each checked
    alone is a FAIL, as the real loader says; the package never opens them there, so the wheel is OK."""
    real = real_loads[("torch-c-dlpack-ext", "2.8.0")]
    folder = wheels["torch-c-dlpack-ext"]
    alone = {member: gate(folder / member, sites["2.8.0"], arm64).ok for member in DLPACK_SET}
    assert alone == {member: ok for member, (ok, _) in real.loads.items()}
    assert [m for m, ok in alone.items() if not ok] == [m for m in DLPACK_SET if m.endswith("-cuda.so")]
    assert gate(folder, sites["2.8.0"], arm64).ok


@pytest.mark.parametrize("pairing", PAIRINGS, ids=[f"{w}-vs-torch{t}" for w, t in PAIRINGS])
def test_the_cli_on_the_wheel_exits_as_the_loader_says(pairing, real_loads, sites, wheels, arm64, tmp_path):
    wheel, torch = WHEEL_FILES[pairing[0]], pairing[1]
    archive = Path(shutil.make_archive(str(tmp_path / "w"), "zip", wheels[wheel.project])).rename(tmp_path / wheel.file)
    args = (archive, "--against", sites[torch], "--platform", "linux-aarch64", "--library-dir", arm64.sysroot / "lib")
    result = run_faforge("check-abi", *args, "--json")
    report = validate(json.loads(result.stdout))
    assert result.returncode == (0 if real_loads[pairing].ok(wheel) else 1), result.stderr
    assert {m["loaded_by"] for m in report["modules"]} <= {LOAD_LIBRARY}
    text = run_faforge("check-abi", *args)
    assert text.returncode == result.returncode and "Traceback" not in text.stderr
    for module in report["modules"]:
        assert f"{module['path']} (a library its package loads itself" in text.stdout
    if wheel.package:
        assert (
            "torch_c_dlpack_ext/libtorch_c_dlpack_addon_torch{27,28,29}-{cpu,cuda}.so: one library per torch release"
            in text.stdout
        )

"""The torch::CppFunction layout break at torch 2.9 (faforge/abi/layout_breaks.json), judged on real PyPI
extension families against real torch libraries, with the real loader as ground truth.

An operator library built for torch 2.8 (TORCH_LIBRARY / TORCH_LIBRARY_IMPL: torch::Library::_impl with a
torch::CppFunction) resolves every symbol against torch 2.9 and aborts in its static initialiser; one
built for 2.9 aborts the same way on 2.8. Before the layout table, check-abi said a plain OK there.

The families: torchvision (0.23.0 for torch 2.8, 0.24.1 for 2.9; _C.so) and fbgemm-gpu-cpu (1.3.0 for
2.8, 1.4.2 for 2.9; two of its operator libraries), each paired with its own torch and the torch across
the boundary. PyPI's aarch64 builds, whose torch is a CPU build: its libraries (torch/lib, torch.libs) are
read from torch 2.8.0's and 2.9.1's wheels by HTTP range requests (tests/support/torch_release_libs.py),
the extension wheels whole (sha256 pinned). The real loader is Debian's arm64 Python under qemu-user
(its glibc ld.so): it opens torch's libraries RTLD_GLOBAL, then the extension, as `import torch` and the
package's torch.ops.load_library do. The verdict must be OK exactly where that load succeeds (0 false
FAIL on its own torch, 0 false OK across), and a crash with every symbol resolved must be a layout-break.

Downloads, cached in the test cache: about 100 MB of torch libraries per release and 13 MB of extension
wheels; the 12 loads run two at a time, 10-20 s each under qemu.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from faforge.abi import classify
from faforge.abi.check import check_path
from faforge.abi.report import CANNOT_TELL, OK, PROBLEMS
from faforge.doctor.torch_symbols import dating
from faforge.doctor.torch_symbols_file import default_table
from tests.abi.conftest import run_faforge, validate
from tests.support.cache import cache_dir
from tests.support.pinned_wheels import unpacked_wheel
from tests.support.torch_release_libs import release_torch_libraries

pytestmark = pytest.mark.slow

WHEELS = cache_dir("layout-wheels")
TORCHES = ("2.8.0", "2.9.1")


@dataclass(frozen=True)
class Build:
    name: str
    project: str
    wheel: str
    sha256: str
    module: str  # the operator library, relative to site-packages
    built_for: str  # the torch its METADATA requires


BUILDS = {
    b.name: b
    for b in (
        Build(
            "torchvision 0.23.0",
            "torchvision",
            "torchvision-0.23.0-cp311-cp311-manylinux_2_28_aarch64.whl",
            "01dc33ee24c79148aee7cdbcf34ae8a3c9da1674a591e781577b716d233b1fa6",
            "torchvision/_C.so",
            "2.8.0",
        ),
        Build(
            "torchvision 0.24.1",
            "torchvision",
            "torchvision-0.24.1-cp311-cp311-manylinux_2_28_aarch64.whl",
            "1e39619de698e2821d71976c92c8a9e50cdfd1e993507dfb340f2688bfdd8283",
            "torchvision/_C.so",
            "2.9.1",
        ),
        *(
            Build(
                f"fbgemm-gpu-cpu {version} {module}",
                "fbgemm-gpu-cpu",
                f"fbgemm_gpu_cpu-{version}-cp311-cp311-manylinux_2_28_aarch64.whl",
                sha256,
                f"fbgemm_gpu/{module}.so",
                torch,
            )
            for version, sha256, torch in (
                ("1.3.0", "b736bdad29864526f79b859303cccc48d1539125af47a3936200c2e5c964c3e1", "2.8.0"),
                ("1.4.2", "fae0b3ce3500bb72dde1ffd68a1cb530b808d1178e98c8b9a01721f453225d16", "2.9.1"),
            )
            for module in ("fbgemm_gpu_sparse_async_cumsum", "fbgemm_gpu_tbe_index_select")
        ),
    )
}
PAIRINGS = [(name, torch) for name in BUILDS for torch in TORCHES]
# fbgemm-gpu-cpu 1.4.2's sparse_async_cumsum: no torch pin, imports dated "2.4 or newer", and it carries
# c10::KernelFunction::~KernelFunction(), as builds on both sides may: its side does not show.
UNTOLD = {"fbgemm-gpu-cpu 1.4.2 fbgemm_gpu_sparse_async_cumsum"}
# Run in the emulated Python: open torch's libraries as `import torch` leaves them, then the extension.
LOAD = """
import ctypes, os, sys
lib, module = sys.argv[1:3]
for name in ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so"):
    ctypes.CDLL(os.path.join(lib, name), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
print("TORCH LOADED", flush=True)
try:
    ctypes.CDLL(module, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
except OSError as exc:
    print("REFUSED", exc, flush=True)
    sys.exit(0)
print("LOADED", flush=True)
"""


@dataclass(frozen=True)
class RealLoad:
    loaded: bool
    crashed: bool  # killed by a signal (abort, segfault) in a static initialiser, every symbol resolved
    says: str


@pytest.fixture(scope="module")
def torch_libs() -> dict[str, Path]:
    return {torch: release_torch_libraries(torch, "aarch64") for torch in TORCHES}


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    folders = {b.wheel: unpacked_wheel(b.project, b.wheel, b.sha256, WHEELS) for b in BUILDS.values()}
    return {name: folders[b.wheel] / b.module for name, b in BUILDS.items()}


@pytest.fixture(scope="module")
def real_loads(arm64, torch_libs, modules) -> dict[tuple[str, str], RealLoad]:
    def load(pairing):
        name, torch = pairing
        result = subprocess.run(
            [
                str(arm64.qemu),
                "-L",
                str(arm64.sysroot),
                str(arm64.python),
                "-c",
                LOAD,
                str(torch_libs[torch]),
                str(modules[name]),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert "TORCH LOADED" in result.stdout, result.stderr[-2000:]  # torch's own libraries load under this loader
        crashed = result.returncode != 0 and "REFUSED" not in result.stdout
        return RealLoad("LOADED" in result.stdout.splitlines(), crashed, (result.stdout + result.stderr).strip()[-300:])

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(PAIRINGS, pool.map(load, PAIRINGS), strict=True))


def gate(module: Path, torch_lib: Path, arm64):
    """check-abi for the aarch64 binary, with the dating it passes: the target's libc and libstdc++ from the sysroot."""
    return check_path(
        module,
        [torch_lib],
        platform="linux-aarch64",
        library_dirs=[arm64.sysroot / "lib"],
        dating=dating(default_table()),
    )


@pytest.mark.parametrize("pairing", PAIRINGS, ids=[f"{n.replace(' ', '-')}-vs-torch{t}" for n, t in PAIRINGS])
def test_the_verdict_is_the_real_loaders(pairing, real_loads, torch_libs, modules, arm64):
    name, torch = pairing
    real = real_loads[pairing]
    verdict = gate(modules[name], torch_libs[torch], arm64)
    (checked,) = verdict.modules
    kinds = sorted({p.kind for p in checked.problems})
    symbol_only = [p for p in checked.problems if p.kind != classify.LAYOUT_BREAK]
    before = "OK" if not symbol_only and not checked.undecided else "FAILED"  # what check-abi said without the table
    print(
        f"{name} (built for {BUILDS[name].built_for}) vs torch {torch}: loader "
        f"{'loads' if real.loaded else 'aborts' if real.crashed else 'refuses'}; faforge before {before}, "
        f"after {verdict.verdict} {kinds}"
    )
    assert checked.undecided == ()
    # Never a plain OK where the loader fails, never FAILED where it loads; CANNOT TELL only where the side is hidden.
    assert verdict.verdict != OK or real.loaded, (real, kinds)
    assert verdict.verdict != PROBLEMS or not real.loaded, (real, [(p.kind, p.detail[:200]) for p in checked.problems])
    assert (verdict.verdict == CANNOT_TELL) == (name in UNTOLD and not checked.problems), checked.untold
    same_side = (BUILDS[name].built_for >= "2.9") == (torch >= "2.9")
    assert (classify.LAYOUT_BREAK in kinds) == (not same_side and name not in UNTOLD)
    if real.crashed:  # the silent break: every symbol resolves, the load aborts in the static initialiser
        assert before == "OK" and (kinds == [classify.LAYOUT_BREAK] or verdict.verdict == CANNOT_TELL), (kinds, real)


def test_each_family_has_a_silent_break_the_loader_confirms(real_loads):
    """The table is proven on real binaries in both directions, not only on stand-ins."""
    crashed = {
        (BUILDS[name].project, BUILDS[name].built_for, torch)
        for (name, torch), real in real_loads.items()
        if real.crashed
    }
    assert {
        ("torchvision", "2.8.0", "2.9.1"),
        ("fbgemm-gpu-cpu", "2.8.0", "2.9.1"),
        ("fbgemm-gpu-cpu", "2.9.1", "2.8.0"),
    } <= crashed
    assert all(real.loaded for (name, torch), real in real_loads.items() if BUILDS[name].built_for == torch)


def test_check_abi_says_failed_with_the_reason_and_exits_1(torch_libs, modules, arm64):
    module = modules["torchvision 0.23.0"]
    args = (
        module,
        "--against",
        torch_libs["2.9.1"],
        "--platform",
        "linux-aarch64",
        "--library-dir",
        arm64.sysroot / "lib",
    )
    result = run_faforge("check-abi", *args, "--json")
    report = validate(json.loads(result.stdout))
    assert (result.returncode, report["verdict"]) == (1, "problems")
    (problem,) = report["problems"]
    assert problem["kind"] == "layout-break" and "torch::CppFunction" in problem["detail"]
    assert "pytorch/pytorch#160657" in problem["detail"]
    text = run_faforge("check-abi", *args)
    assert text.returncode == 1 and "layout-break: torch::Library::_impl" in text.stdout

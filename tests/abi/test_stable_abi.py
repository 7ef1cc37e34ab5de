"""The stable-ABI gate (FlashAttention-3's): `faforge check-abi --stable-abi` on real binaries, against the real
libraries of every torch release of the matrix from 2.9 on, cross-checked with an independent tool.

Binaries:
  * two stand-ins compiled here for real (tests/fixtures/stable_abi/): the same operator through
    torch/csrc/stable (TORCH_TARGET_VERSION 2.9, Py_LIMITED_API 3.9, as FlashAttention-3's
    hopper/flash_api_stable.cpp) and through torch's C++ API (at::, c10::, as every flash-attn 2 glue),
    both against torch 2.14.1's headers and libraries;
  * torchvision's own: 0.29.1's `_C_stable.so` (stable ABI, built by PyTorch's CI) and 0.24.0's `_C.so`
    (C++ API), the wheels tests/abi/test_real_binaries.py pins and caches.
Torch releases: torch/lib/libc10.so and libtorch_cpu.so (and the CUDA runtime they need) of each
release's PyPI wheel, by range requests (tests/support/torch_release_libs.py, ~0.6 GB cold, cached).
The independent verdict: Quansight's torch-abi-audit (PyPI), which classifies a binary's torch
imports from its own table of the stable C shim.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faforge.datafile import load_yaml
from faforge.versions import vtuple
from tests.abi.test_real_binaries import BINARIES, binary_wheel
from tests.support.cache import cache_dir
from tests.support.torch_envs import TorchEnvUnavailable, torch_env
from tests.support.torch_release_libs import release_torch_lib

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "tests" / "fixtures" / "stable_abi"
BUILT = cache_dir("stable-abi")
LOCAL_TORCH = "2.14.1"  # the real venv: headers to compile against, and one more release to load on
STABLE_FLOOR = (2, 9)  # TORCH_TARGET_VERSION of FlashAttention-3's stable build (hopper/setup.py, 0251105a)


def matrix_releases() -> list[str]:
    """The newest patch of each torch minor variants/releases.yaml lists, from the stable floor on."""
    newest: dict[tuple[int, ...], str] = {}
    for row in load_yaml(ROOT / "variants" / "releases.yaml")["releases"]:
        version = str(row["torch"])
        minor = vtuple(version)[:2]
        if minor >= STABLE_FLOOR and (minor not in newest or vtuple(version) > vtuple(newest[minor])):
            newest[minor] = version
    return [newest[m] for m in sorted(newest)]


@pytest.fixture(scope="module")
def local_torch():
    try:
        return torch_env(LOCAL_TORCH)
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))


def compile_standin(name: str, env, *flags: str) -> Path:
    """tests/fixtures/stable_abi/<name>.cpp as a shared object, linked as-needed (the libraries it uses)."""
    source = SOURCES / f"{name}.cpp"
    key = hashlib.sha256((source.read_text() + " ".join(flags)).encode()).hexdigest()[:16]
    target = BUILT / f"{name}-torch{LOCAL_TORCH}-{key}.so"
    if not target.is_file():
        BUILT.mkdir(parents=True, exist_ok=True)
        torch = env.site_packages / "torch"
        include = subprocess.run(
            [str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        partial = target.with_suffix(".part")
        subprocess.run(
            [
                "g++",
                "-O1",
                "-std=c++20",
                "-fPIC",
                "-shared",
                "-D_GLIBCXX_USE_CXX11_ABI=1",
                *flags,
                f"-I{torch / 'include'}",
                f"-I{include}",
                str(source),
                "-o",
                str(partial),
                f"-L{torch / 'lib'}",
                "-Wl,--as-needed",
                "-ltorch_cpu",
                "-lc10",
            ],
            check=True,
        )
        partial.replace(target)
    return target


@pytest.fixture(scope="module")
def stable_standin(local_torch) -> Path:
    return compile_standin(
        "stable_op", local_torch, "-DPy_LIMITED_API=0x03090000", "-DTORCH_TARGET_VERSION=0x0209000000000000"
    )


@pytest.fixture(scope="module")
def cxx_standin(local_torch) -> Path:
    return compile_standin("cxx_api_op", local_torch)


def check(path: Path, *releases: Path) -> tuple[int, dict]:
    args = [a for r in releases for a in ("--against", str(r))]
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "check-abi", "--stable-abi", "--json", *args, str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_the_matrix_range_starts_at_2_9_and_has_several_minors():
    releases = matrix_releases()
    assert vtuple(releases[0])[:2] == STABLE_FLOOR and len(releases) >= 4, releases


def test_a_stable_binary_loads_on_every_release_of_the_range(stable_standin, local_torch):
    releases = [release_torch_lib(v) for v in matrix_releases()]
    code, report = check(stable_standin, *releases, local_torch.prefix)
    seen = [r["torch"] for r in report["releases"]]
    print(f"{stable_standin.name}: stable C functions {report['stable_imports']}; loads on {seen}")
    assert code == 0 and report["ok"], json.dumps(report, indent=1)[:3000]
    assert report["unstable_imports"] == [] and report["stable_imports"], report
    assert [v.split("+")[0] for v in seen] == [*matrix_releases(), LOCAL_TORCH]


def test_a_binary_using_the_cxx_api_is_refused_even_where_it_loads(cxx_standin, local_torch):
    code, report = check(cxx_standin, local_torch.prefix)
    unstable = {u["demangled"] for u in report["unstable_imports"]}
    assert code == 1 and not report["ok"]
    assert report["releases"][0]["ok"], "it does load on the torch it was built against"
    assert any(name.startswith("c10::detail::torchCheckFail") for name in unstable), unstable
    assert any(name.startswith("at::") for name in unstable), unstable


def test_torchvisions_own_binaries(local_torch):
    stable = BINARIES["torchvision 0.29.1 _C_stable"]
    code, report = check(binary_wheel(stable) / stable.member, local_torch.prefix)
    assert code == 0 and report["stable_imports"] and not report["unstable_imports"], report["unstable_imports"]
    cxx = BINARIES["torchvision 0.24.0 _C"]
    code, report = check(binary_wheel(cxx) / cxx.member, local_torch.prefix)
    assert code == 1 and len(report["unstable_imports"]) > 50


@pytest.mark.skipif(
    shutil.which("torch-abi-audit", path=str(Path(sys.executable).parent)) is None,
    reason="torch-abi-audit (the test extra) is not installed in this environment",
)
def test_the_independent_audit_agrees(stable_standin, cxx_standin, local_torch):
    binaries = [
        stable_standin,
        cxx_standin,
        *(
            binary_wheel(BINARIES[n]) / BINARIES[n].member
            for n in ("torchvision 0.29.1 _C_stable", "torchvision 0.24.0 _C")
        ),
    ]
    audit = str(Path(sys.executable).parent / "torch-abi-audit")
    rows = []
    for binary in binaries:
        ours = check(binary, local_torch.prefix)[1]
        theirs = json.loads(
            subprocess.run([audit, "--json", str(binary)], capture_output=True, text=True, check=True).stdout
        )
        verdicts = {
            "STABLE" if lib["torch"]["stable"] else "UNSTABLE"
            for lib in [*theirs["extensions"], *theirs["bundled_libs"]]
            if lib["torch"]["uses_torch"]
        }
        rows.append(
            f"{binary.name}: faforge {'stable' if not ours['unstable_imports'] else 'unstable'}, "
            f"torch-abi-audit {sorted(verdicts)}"
        )
        assert verdicts == ({"STABLE"} if not ours["unstable_imports"] else {"UNSTABLE"}), rows[-1]
    print("\n".join(rows))


def test_a_real_flash_attn_2_glue_built_against_torch_2_11s_cxx_api_is_refused(tmp_path):
    """The committed FA2 GPU canary (tests/gpu/canary/): flash_attn_2_cuda built for real against PyPI's torch
    2.11.0+cu130 through its C++ API, with its kernel library beside it. Both refusals of the stable-ABI gate at once:
    an FA2 glue, and a binary of torch 2.11's C++ API: 71 imports of c10::/at:: functions, none of the stable C shim."""
    canary = ROOT / "tests/gpu/canary"
    manifest = json.loads((canary / "manifest.json").read_text())
    wheel = tmp_path / manifest["file"].removesuffix(".xz")
    wheel.write_bytes(lzma.decompress((canary / manifest["file"]).read_bytes()))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    glue = next((tmp_path / "site").glob("flash_attn_2_cuda.cpython-*.so"))
    own = next(v for v in matrix_releases() if v.startswith("2.11."))
    code, report = check(glue, release_torch_lib(own))
    unstable = {u["demangled"] or u["symbol"] for u in report["unstable_imports"]}
    print(
        f"{glue.name}: {len(unstable)} unstable torch imports, e.g. {sorted(unstable)[:3]}; "
        f"loads on torch {own}: {report['releases'][0]['ok']}"
    )
    assert code == 1 and not report["ok"] and len(unstable) > 20
    assert any(name.startswith("c10::") for name in unstable) and any(name.startswith("at::") for name in unstable), (
        sorted(unstable)[:10]
    )

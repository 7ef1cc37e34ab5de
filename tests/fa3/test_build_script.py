"""The flash-attn-3 build script on a tiny FA3-shaped tree, compiled for real.

The tree has upstream's layout (hopper/ with its instantiations/, csrc/cutlass/include, the
flash_attn_3 package and flash_attn_interface.py); its TUs are one-line kernels and its glue is the
stable-ABI stand-in of tests/fixtures/stable_abi, so a build takes seconds, not hours. It goes through
recipes/flash-attn-3/build_flash_attn_3.py with this machine's nvcc 13.0 against the real torch 2.14.1,
and the result is judged by what it contains (each TU's GPU code, read from the fatbinary) and by the
stable-ABI gate against that torch's libraries.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge import paths
from faforge.abi import elf, fatbin
from faforge.backend.errors import BuildError
from faforge.bench import cache_reuse as reuse
from faforge.channel.local import PackageSpec, assemble
from faforge.errors import FaforgeError
from faforge.families.flash_attn_3 import backend as fa3
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.family import FLASH_ATTN_3
from faforge.matrix import load_matrix
from tests.abi.test_stable_abi import compile_standin
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.fa3_tree import fa3_shaped_tree
from tests.support.tiers import slow
from tests.support.torch_envs import TorchEnvUnavailable, torch_env
from tests.support.torch_release_libs import release_torch_lib

SCRIPT = paths.repo_root() / FLASH_ATTN_3.recipe_dir / FLASH_ATTN_3.build_script
# Forward only, head dim 128, fp16 and bf16, for sm_80 and sm_90a: both per-file GPU codes and the
# scheduler, which gets both.
DISABLED = (
    "BACKWARD,SPLIT,PAGEDKV,APPENDKV,LOCAL,SOFTCAP,PACKGQA,FP8,VARLEN,CLUSTER,"
    "HDIM64,HDIM96,HDIM192,HDIM256,HDIMDIFF64,HDIMDIFF192"
)


def test_the_sources_follow_upstreams_switches():
    full = fa3.sources(frozenset())
    assert (
        len(full) == 293
        and full[0] == fa3.STABLE_GLUE
        and full[-2:] == ["flash_fwd_combine.cu", "flash_prepare_scheduler.cu"]
    )
    assert "instantiations/flash_bwd_hdim256_fp16_softcapall_sm90.cu" in full  # softcap_all for sm90 bwd
    assert not any(
        "packgqa" in s and ("_paged" in s or "_split" in s) for s in full
    )  # never PackGQA with paged or split
    canary = fa3.sources(fa3.parse_disabled(DISABLED + ",SM8x"))
    assert canary == [
        fa3.STABLE_GLUE,
        "instantiations/flash_fwd_hdim128_bf16_sm90.cu",
        "instantiations/flash_fwd_hdim128_fp16_sm90.cu",
        "flash_prepare_scheduler.cu",
    ]
    assert fa3.gencode("instantiations/flash_fwd_hdim128_bf16_sm80.cu", ["80", "90a"]) == [
        "-gencode",
        "arch=compute_80,code=sm_80",
    ]
    assert fa3.gencode("flash_prepare_scheduler.cu", ["80", "90a"]) == [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90a,code=sm_90a",
    ]


@pytest.mark.parametrize(
    "bad, says", [("SPLIT,NOPE", "unknown FA3 feature NOPE"), ("split", "unknown FA3 feature split")]
)
def test_an_unknown_switch_is_refused(bad, says):
    with pytest.raises(BuildError, match=says):
        fa3.parse_disabled(bad)


@pytest.mark.parametrize("spec", ["", "90", "100a", "80;120"])
def test_an_arch_fa3_does_not_build_is_refused(spec):
    with pytest.raises(BuildError, match="FA3 builds sm_90a and the sm_80 fallback only"):
        fa3.parse_archs(spec)


def test_a_tu_whose_arch_is_not_listed_is_refused():
    with pytest.raises(BuildError, match="not in the arch list 90a"):
        fa3.gencode("instantiations/flash_fwd_hdim128_bf16_sm80.cu", ["90a"])


@pytest.fixture(scope="module")
@slow("a torch venv and an nvcc build")
def built(tmp_path_factory):
    try:
        cuda_home()
        torch = torch_env("2.14.1")
    except (NoCudaToolkit, TorchEnvUnavailable) as exc:
        pytest.skip(str(exc))
    if not shutil.which("ninja") and not Path(sys.executable).with_name("ninja").is_file():
        pytest.skip("ninja is not on PATH (pip install ninja)")
    root = tmp_path_factory.mktemp("fa3")
    tree = fa3_shaped_tree(root / "src", fa3.parse_disabled(DISABLED))
    site = root / "site"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/cuda/bin:/usr/bin:/bin", "MAX_JOBS": "2"}
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--source-dir",
            str(tree),
            "--archs",
            "80;90a",
            "--disable",
            DISABLED,
            "--build-dir",
            str(root / "build"),
            "--install-dir",
            str(site),
            "--torch-dir",
            str(torch.site_packages / "torch"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    return result, site, torch


def test_the_build_installs_the_stable_abi_extension_and_declares_it(built):
    result, site, _ = built
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    extension = site / FLASH_ATTN_3.module / fa3.EXTENSION
    assert extension.is_file() and (site / f"{FLASH_ATTN_3.interface_module}.py").is_file()
    config = {}
    exec(
        (site / f"{FLASH_ATTN_3.config_module}.py").read_text(), config
    )  # upstream's generated module, written by the build
    declared = config["CONFIG"]
    assert declared["gpu_archs"] == ["sm_80", "sm_90a"] and len(declared["tus"]) == 6
    assert (
        declared["build_flags"]["FLASHATTENTION_DISABLE_BACKWARD"]
        and not declared["build_flags"]["FLASHATTENTION_DISABLE_HDIM128"]
    )
    assert (
        declared["build_flags"]["FLASH_ATTENTION_DISABLE_HDIMDIFF64"]
        and len(declared["build_flags"]) == len(fa3.FEATURES) + 1
    )
    # each TU's own GPU code: sm_80 for the *_sm80.cu, sm_90a for the *_sm90.cu, both for the scheduler
    assert fatbin.read_gpu_archs(extension) == fatbin.GpuArchs(sass=("sm_80", "sm_90a"), ptx=())
    assert "runs ptxas" in result.stdout  # the tools nvcc ran are named
    # found without `import torch` first, in a conda prefix and in a pip environment; `$ORIGIN` survives ninja
    assert elf.read_info(extension).runpath == ("$ORIGIN/../../..", "$ORIGIN/../torch/lib")


def test_the_built_extension_passes_the_stable_abi_gate(built):
    result, site, torch = built
    assert result.returncode == 0
    gate = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "check-abi",
            str(site / FLASH_ATTN_3.module / fa3.EXTENSION),
            "--stable-abi",
            "--against",
            str(torch.torch_lib),
            "--library-dir",
            "/usr/local/cuda/lib64",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-2000:]


def fa3_package(site: Path, out: Path, extension: Path | None = None) -> Path:
    """The built tree as the linux-64 cu130 flash-attn-3 package of the matrix would hold it (`extension`:
    another binary in the extension's place)."""
    head = next(p for p in packages_of(load_matrix()) if p.id == "linux-64/cu130/sm80_90a").build_string_head
    files = {
        f"lib/python3.10/site-packages/{p.relative_to(site)}": p.read_bytes() for p in site.rglob("*") if p.is_file()
    }
    if extension:
        files[f"lib/python3.10/site-packages/{FLASH_ATTN_3.module}/{fa3.EXTENSION}"] = extension.read_bytes()
    return assemble(
        PackageSpec(
            FLASH_ATTN_3.package,
            "3.0.0",
            f"{head}_faforge_h1a2b3c4_0",
            "linux-64",
            depends=("python >=3.10", "pytorch >=2.9 cuda*", "cuda-version >=13.0,<14"),
            files=files,
        ),
        out,
    )


def verify_abi(package: Path, tmp_path: Path, *against: Path) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "verify",
            str(package),
            "--gates",
            "abi,import",
            "--manifest",
            str(tmp_path / "verification"),
            *(a for path in against for a in ("--against", str(path))),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {r["gate"]: (r["result"], r["detail"]) for r in json.loads(result.stdout)["results"]}


def test_verify_passes_the_package_on_the_oldest_and_newest_torch_it_serves(built, tmp_path):
    """cu130 serves torch 2.10 to 2.13 (conda-forge has no cu130 torch 2.9): both releases' real libraries."""
    result, site, _ = built
    assert result.returncode == 0
    gates = verify_abi(
        fa3_package(site, tmp_path / "out"), tmp_path, release_torch_lib("2.10.0"), release_torch_lib("2.13.0")
    )
    assert gates["abi"][0] == "passed" and "loads on torch 2.10.0" in gates["abi"][1] and "2.13.0" in gates["abi"][1], (
        gates
    )
    assert gates["import"][0] == "skipped"


def test_verify_never_passes_a_check_narrower_than_the_range(built, tmp_path):
    result, site, torch = built
    assert result.returncode == 0
    gates = verify_abi(fa3_package(site, tmp_path / "out"), tmp_path, torch.torch_lib)
    assert gates["abi"][0] == "skipped" and "also check torch 2.10 and 2.13" in gates["abi"][1], gates
    assert verify_abi(fa3_package(site, tmp_path / "none"), tmp_path)["abi"][0] == "skipped"


def test_verify_fails_a_package_whose_binary_uses_the_cxx_api(built, tmp_path):
    """The same package with a binary built against torch's C++ API (at::, c10::) in the extension's place."""
    result, site, torch = built
    assert result.returncode == 0
    cxx = compile_standin("cxx_api_module", torch)
    gates = verify_abi(
        fa3_package(site, tmp_path / "out", cxx), tmp_path, release_torch_lib("2.10.0"), release_torch_lib("2.13.0")
    )
    assert gates["abi"][0] == "failed" and "unstable import" in gates["abi"][1], gates


def _cache_line(log: str) -> tuple[int, int]:
    found = re.findall(r"compiler cache: (\d+) hits, (\d+) misses", log)
    assert found, log[-3000:]
    return tuple(map(int, found[-1]))


def _nvcc_compiles(log: str) -> list[str]:
    """The TUs ninja compiled with nvcc (its progress lines name each object's source)."""
    return sorted(
        set(re.findall(r"(\w+\.cu)\b", "\n".join(line for line in log.splitlines() if re.match(r"\[\d+/\d+\]", line))))
    )


@pytest.mark.slow
def test_a_piece_fills_the_compiler_cache_that_the_full_build_then_hits(tmp_path):
    """A piece job of a package too long for one CI job (FAFORGE_BUILD_TUS, as the recipe passes it) compiles only
    its TUs, through ccache; the package's final job, a full build in another build dir with the same cache,
    takes those objects from it and compiles only the rest."""
    try:
        cuda_home()
        torch = torch_env("2.14.1")
        ccache = reuse.find_ccache()
    except (NoCudaToolkit, TorchEnvUnavailable, FaforgeError) as exc:
        pytest.skip(str(exc))
    if not shutil.which("ninja") and not Path(sys.executable).with_name("ninja").is_file():
        pytest.skip("ninja is not on PATH (pip install ninja)")
    tree = fa3_shaped_tree(tmp_path / "src", fa3.parse_disabled(DISABLED))
    piece = ["flash_fwd_hdim128_bf16_sm90.cu", "flash_fwd_hdim128_fp16_sm80.cu"]
    env = {
        "PATH": f"{Path(ccache).parent}:{Path(sys.executable).parent}:/usr/local/cuda/bin:/usr/bin:/bin",
        "MAX_JOBS": "2",
        "CCACHE_DIR": str(tmp_path / "ccache"),
        "FAFORGE_COMPILER_CACHE": "ccache",
    }
    common = [
        sys.executable,
        str(SCRIPT),
        "--source-dir",
        str(tree),
        "--archs",
        "80;90a",
        "--disable",
        DISABLED,
        "--torch-dir",
        str(torch.site_packages / "torch"),
    ]
    first = subprocess.run(
        [*common, "--build-dir", str(tmp_path / "build-piece")],
        capture_output=True,
        text=True,
        env={**env, "FAFORGE_BUILD_TUS": " ".join(piece)},
        timeout=1200,
    )
    log = first.stdout + first.stderr
    assert first.returncode == 0, log[-3000:]
    assert _cache_line(log) == (0, 2) and _nvcc_compiles(log) == sorted(piece)
    assert "nothing linked or installed" in log and not (tmp_path / "build-piece" / fa3.EXTENSION).exists()
    full = subprocess.run(
        [*common, "--build-dir", str(tmp_path / "build-all"), "--install-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        env={**env, "FAFORGE_BUILD_TUS": ""},
        timeout=1200,
    )
    log = full.stdout + full.stderr
    assert full.returncode == 0, log[-3000:]
    # the piece's two objects from the cache; the other two kernels and the scheduler compiled here
    assert _cache_line(log) == (2, 3)
    assert (tmp_path / "site" / FLASH_ATTN_3.module / fa3.EXTENSION).is_file()


def test_a_refused_compiler_cache_value_names_its_variable(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--source-dir", str(tmp_path), "--plan-only"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FAFORGE_COMPILER_CACHE": "sccache"},
        timeout=120,
    )
    assert result.returncode == 2 and "$FAFORGE_COMPILER_CACHE='sccache': expected one of none, ccache" in result.stderr
    assert "Traceback" not in result.stderr

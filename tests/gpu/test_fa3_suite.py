"""FlashAttention-3's GPU suite and gate on this GPU-less machine, on the real canary
binary (tests/gpu/canary/flash-attn-3/): the kernels it registers, named through libstdc++'s demangler,
each map to a TU its flash_attn_config.py declares and every declared TU has one; the gate finds no
defect on it, names one where a declaration is not kept, and serves sm_90 only (the canary has no
sm_80 code); `test-gpu --family flash-attn-3` beside a real CUDA torch without a GPU exits 3."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from faforge import paths
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.families.flash_attn_3 import gpu_gate as fa3_gate
from faforge.families.flash_attn_3 import gpu_kernels as fa3_kernels
from faforge.families.flash_attn_3.gpu import coverage as compare_declared
from faforge.family import FLASH_ATTN_3
from tests.gpu.fa3_canary import FOLDER
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

MANIFEST = json.loads((FOLDER / "manifest.json").read_text())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The canary wheel unpacked: a site-packages with flash_attn_3/, flash_attn_interface.py, flash_attn_config.py."""
    root = tmp_path_factory.mktemp("fa3-canary-site")
    wheel = root / MANIFEST["file"].removesuffix(".xz")
    wheel.write_bytes(lzma.decompress((FOLDER / MANIFEST["file"]).read_bytes()))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root / "site")
    return root / "site"


def extension(site: Path) -> Path:
    return site / FLASH_ATTN_3.module / "_C.abi3.so"


def found(site: Path, capability: tuple[int, int]) -> dict:
    return {"torch": "2.11.0+cu130", "device": "a GPU", "capability": capability, "extension": str(extension(site))}


def test_every_kernel_the_canary_registers_maps_to_a_declared_tu(site):
    declared = fa3_gate.read_declaration(site / f"{FLASH_ATTN_3.config_module}.py")
    kernels = fa3_kernels.registered_kernels(extension(site))
    unmapped = [k for k in kernels if fa3_kernels.tu_of_kernel(k, declared["tus"]) is None]
    by_tu = fa3_kernels.tus_in_binary(extension(site), declared["tus"])
    print({tu: len(names) for tu, names in by_tu.items()})
    assert len(kernels) >= 40 and not unmapped, unmapped[:3]
    assert sorted(by_tu) == sorted(t for t in declared["tus"] if t.endswith(".cu")) and all(by_tu.values()), by_tu
    assert all(name.startswith(("void cutlass::device_kernel<", "void flash::")) for name in kernels), kernels[0]


def test_the_gate_finds_the_canary_keeps_its_declaration_and_serves_hopper_only(site):
    config = site / f"{FLASH_ATTN_3.config_module}.py"
    hopper = fa3_gate.judge(found(site, (9, 0)), config)
    assert (
        hopper.usable and hopper.defects == () and hopper.head_dims == (128,) and hopper.dtypes == ("bf16", "fp16")
    ), hopper
    assert not hopper.enabled("VARLEN") and hopper.enabled("BACKWARD")
    for capability in ((8, 0), (10, 0), (12, 0)):  # sm_90a code runs on sm_90 only
        closed = fa3_gate.judge(found(site, capability), config)
        assert not closed.usable and "flash-attn 2 or torch's SDPA" in closed.reason, closed.reason


def test_a_declaration_the_binary_does_not_keep_is_a_defect(site, tmp_path):
    declared = fa3_gate.read_declaration(site / f"{FLASH_ATTN_3.config_module}.py")
    lying = dict(
        declared, gpu_archs=["sm_80", "sm_90a"], tus=[*declared["tus"], "instantiations/flash_fwd_hdim64_bf16_sm90.cu"]
    )
    config = tmp_path / "flash_attn_config.py"
    config.write_text(f"CONFIG = {lying!r}\n")
    defects = fa3_gate.judge(found(site, (9, 0)), config).defects
    assert any("declares GPU code sm_80, sm_90a" in d for d in defects), defects
    assert any("flash_fwd_hdim64_bf16_sm90.cu" in d for d in defects), defects
    missing = fa3_gate.judge(found(site, (9, 0)), None)  # no flash_attn_config module found
    assert missing.defects and "does not declare" in missing.defects[0]


def test_a_declared_tu_the_profiler_never_saw_is_reported():
    observed = {"sms": 132, "tests": {"a": ["instantiations/flash_fwd_hdim128_bf16_sm90.cu"], "b": []}}
    declared = ("flash_api_stable.cpp", "instantiations/flash_fwd_hdim128_bf16_sm90.cu", "flash_prepare_scheduler.cu")
    coverage = compare_declared(observed, fa3_gate.Fa3Gate(True, "H100", declared={"tus": list(declared)}))
    assert coverage["never_seen"] == ["flash_prepare_scheduler.cu"] and coverage["package_tus"] == 2


@pytest.mark.slow  # a CUDA torch venv
def test_test_gpu_beside_a_real_cuda_torch_without_a_gpu_exits_3(site):
    try:
        torch = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    pytest_site = Path(pytest.__file__).resolve().parents[1]  # the torch venv has no pytest: this one's, behind torch
    run = subprocess.run(
        [str(torch.python), "-m", "faforge.gpu.run_suite", "--family", FLASH_ATTN_3.package, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            "PYTHONPATH": f"{paths.repo_root() / 'scripts'}:{site}:{pytest_site}",
            "PATH": "/usr/bin:/bin",
            "CUDA_VISIBLE_DEVICES": "",
        },
    )
    summary = json.loads(run.stdout)
    assert run.returncode == 3 and summary["status"] == "skipped" and summary["family"] == FLASH_ATTN_3.package, (
        run.stderr[-2000:]
    )
    assert "no CUDA device visible to torch 2.14.1" in summary["reason"] and summary["counts"]["passed"] == 0
    assert summary["counts"]["skipped"] >= 20, summary[
        "counts"
    ]  # the canary's declaration: hdim128, bf16 and fp16, 3 shapes, causal or not


def test_kernels_of_real_full_feature_objects_map_to_the_tu_they_were_compiled_from():
    """tests/fixtures/fa3/registered-kernels.json.xz: the kernels real objects of a full build register (sm80 and
    sm90, forward with softcap both ways, backward, the split-KV combine), read from each object: every one maps
    back to its own TU among the 293 a full build compiles."""
    fixture = json.loads(
        lzma.decompress((paths.repo_root() / "tests/fixtures/fa3/registered-kernels.json.xz").read_bytes())
    )
    full = fa3_backend.sources(frozenset())
    wrong = {
        tu: sorted({fa3_kernels.tu_of_kernel(k, full) for k in names} - {tu})
        for tu, names in fixture["kernels"].items()
    }
    assert sum(map(len, fixture["kernels"].values())) > 200 and not any(wrong.values()), wrong


@pytest.mark.parametrize(
    "content, says",
    [
        ("fifo", "not a regular"),
        ("huge", "more than"),
        ("CONFIG = []\n", "not a dict"),
        ("CONFIG = {'tus': 'flash_api_stable.cpp', 'gpu_archs': [], 'build_flags': {}}\n", "tus"),
        ("CONFIG = " + "[" * 5000 + "]" * 5000 + "\n", "unreadable declaration"),
        (
            "CONFIG = {'tus': [], 'gpu_archs': [], 'build_flags': {}, 'x': __import__('os').system('false')}\n",
            "unreadable declaration",
        ),
        ("\udcff", "not UTF-8"),
    ],
    ids=["fifo", "huge", "not-a-dict", "tus-a-string", "deep", "code", "not-utf8"],
)
def test_a_hostile_declaration_is_a_defect_never_a_hang_a_crash_or_code_run(site, tmp_path, content, says):
    """flash_attn_config.py is a file the package brought: read bounded, as a literal, its shape checked."""
    config = tmp_path / "flash_attn_config.py"
    if content == "fifo":
        os.mkfifo(config)
    elif content == "huge":
        config.write_bytes(b"#" * (17 << 20))
    else:
        config.write_bytes(content.encode("utf-8", "surrogateescape"))
    gate = fa3_gate.judge(found(site, (9, 0)), config)
    assert gate.defects and says in gate.defects[0], gate.defects


@pytest.mark.parametrize("data", [b"", b"garbage" * 10], ids=["empty", "not-elf"])
def test_an_extension_that_is_no_shared_library_is_a_defect(site, tmp_path, data):
    extension = tmp_path / "_C.abi3.so"
    extension.write_bytes(data)
    gate = fa3_gate.judge(
        dict(found(site, (9, 0)), extension=str(extension)), site / f"{FLASH_ATTN_3.config_module}.py"
    )
    assert gate.defects and "ELF" in gate.defects[0], gate.defects

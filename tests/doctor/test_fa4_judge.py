"""`faforge doctor`'s FlashAttention-4 section from facts given as data (the fast tier): which problems, which
line, and what its probe's output may not be. The real environments are tests/doctor/test_fa4.py's."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from faforge.doctor import facts as env_facts
from faforge.doctor import probe_facts
from faforge.doctor.facts import ImportOutcome, ProbeError
from faforge.errors import EXIT_BAD_INPUT, FaforgeError
from faforge.families.flash_attn_4 import doctor, doctor_facts, sets
from faforge.families.flash_attn_4.doctor_facts import Fa4Facts
from faforge.family import FLASH_ATTN_4

DATA = sets.load()
SET = DATA.set_for("2.14", "13.0")
H100 = env_facts.Gpu("NVIDIA H100 80GB HBM3", (9, 0), "580.65.06", "nvidia-smi")
A100 = env_facts.Gpu("NVIDIA A100-SXM4-80GB", (8, 0), "580.65.06", "nvidia-smi")
V100 = env_facts.Gpu("Tesla V100-SXM2-32GB", (7, 0), "580.65.06", "nvidia-smi")


def env(torch="2.14.1+cu130", cuda="13.0", gpus=(H100,), conda=False, venv=None):
    python = {"executable": "/v/bin/python", "version": "3.11.7", "implementation": "cpython", "prefix": "/v"}
    python["venv"] = venv
    stages = {
        "env": {"python": python, "system": {"os": "Linux", "machine": "x86_64"}, "conda": [] if conda else None},
        "torch": {"imported": True, "version": torch, "cuda": cuda} if torch else {"imported": False},
        "import": {"ok": False},
    }
    return probe_facts.parse(stages, None, tuple(gpus), "ok")


def fa4(init: str | None = None, error: str | None = None, **versions: str | None) -> Fa4Facts:
    found = {FLASH_ATTN_4.package: "4.0.0b40", **SET.packages}
    found.update({k.replace("_", "-"): v for k, v in versions.items()})
    outcome = ImportOutcome(True, ok=error is None, error=ProbeError("ModuleNotFoundError", error) if error else None)
    return Fa4Facts(found, init, ("/v/site-packages/flash_attn",), outcome, None)


def kinds(report) -> list[str]:
    return [p.kind for p in report.problems]


def test_the_set_installed_is_healthy_and_offers_nothing():
    report = doctor.judge(env(), fa4(), DATA)
    assert report.healthy and report.kgs == SET and kinds(report) == [] and report.fixes == ()
    assert report.layout == doctor.FA4_ONLY and report.to_json()["known_good_set"]["id"] == "torch2.14-cu130"


def test_each_package_off_the_set_is_named_with_the_set_version_and_the_line_pins_the_set():
    report = doctor.judge(env(), fa4(quack_kernels="0.6.2", nvidia_cutlass_dsl="4.6.1", apache_tvm_ffi=None), DATA)
    messages = [p.message for p in report.problems]
    assert "quack-kernels 0.6.2 is outside the set (0.6.5)" in messages
    assert any(m.startswith("nvidia-cutlass-dsl 4.6.1 is outside flash-attn-4's requirement >=4.6.2") for m in messages)
    assert "apache-tvm-ffi is not installed (the set has 0.1.15.post2)" in messages
    (fix,) = report.fixes
    words = shlex.split(fix.commands[0])
    assert words[:4] == ["/v/bin/python", "-m", "pip", "install"] and "torch==2.14.1" in words
    assert {"flash-attn-4==4.0.0b40", "quack-kernels==0.6.5", "nvidia-cutlass-dsl==4.8.1"} <= set(words)
    assert any("torch2.14-cu130/ torch==2.14.1 flash-attn-4==4.0.0b40+cu130.torch2.14" in n for n in fix.notes)


def test_a_newer_floor_package_is_fine_an_older_one_is_not():
    assert doctor.judge(env(), fa4(einops="0.9.0"), DATA).healthy
    assert kinds(doctor.judge(env(), fa4(einops="0.7.0"), DATA)) == ["outside-set"]


def test_the_import_error_is_its_last_line_and_a_problem():
    report = doctor.judge(env(), fa4(error="No module named 'cutlass.base_dsl.enums'"), DATA)
    assert kinds(report) == ["import-failed"] and not report.healthy and report.fixes
    assert report.to_json()["import"]["error"] == "ModuleNotFoundError: No module named 'cutlass.base_dsl.enums'"


def test_a_torch_without_a_set_names_the_sets_and_moves_to_the_newest():
    report = doctor.judge(env("2.13.0+cpu", None), fa4(), DATA)
    (problem,) = [p for p in report.problems if p.kind == "no-known-good-set"]
    assert "torch 2.11 with CUDA 13.0, torch 2.14 with CUDA 13.0" in problem.message
    assert "torch==2.14.*" in shlex.split(report.fixes[0].commands[0])


def test_gpus_fa4_does_not_run_on_or_trains_not_on():
    assert kinds(doctor.judge(env(gpus=(V100,)), fa4(), DATA)) == ["gpu-arch-unsupported"]
    report = doctor.judge(env(gpus=(A100,)), fa4(), DATA)
    assert kinds(report) == ["gpu-forward-only"] and report.healthy
    assert kinds(doctor.judge(env(gpus=()), fa4(), DATA)) == ["no-gpu"]


def test_beside_flash_attn_2_it_says_so():
    report = doctor.judge(env(), fa4(init="/v/site-packages/flash_attn/__init__.py", flash_attn="2.8.3"), DATA)
    assert report.layout == doctor.BESIDE_FA2 and report.to_json()["beside"] == "2.8.3"
    assert "flash-attn-4: 4.0.0b40, FA2 + FA4 (flash-attn 2.8.3)" in report.text_lines()


def test_a_conda_prefix_gets_the_conda_line_and_pip_as_a_note():
    (fix,) = doctor.judge(env(conda=True), fa4(quack_kernels=None), DATA).fixes
    assert fix.commands[0].startswith("conda install -p /v -c faforge -c conda-forge 'flash-attn-4 ==4.0.0b40'")
    assert "'pytorch ==2.14.1'" in fix.commands[0] and fix.notes[0].startswith("or with pip: /v/bin/python -m pip")


def test_a_uv_venv_gets_the_uv_line():
    (fix,) = doctor.judge(env(venv={"uv": "0.13.9"}), fa4(packaging=None), DATA).fixes
    assert fix.commands[0].startswith("uv pip install --python /v/bin/python torch==2.14.1 flash-attn-4==4.0.0b40 ")


def test_a_release_without_a_set_is_an_error():
    report = doctor.judge(env(), fa4(flash_attn_4="4.0.0b39"), DATA)
    assert kinds(report) == ["release-not-gated"] and "4.0.0b40" in shlex.split(report.fixes[0].commands[0])[5]


# What FA4's probe prints, hostile: each is one FaforgeError naming the interpreter (exit 2), never a traceback.
MARK = "@@faforge-probe@@"
DISTS = '{"stage": "fa4-dists", "versions": {"x": "1.0"}, "namespace": {"init": null, "paths": []}}'
HOSTILE = {
    "not-json": ("{", "is not valid JSON"),
    "deep": ("[" * 100_000 + "]" * 100_000, "nests deeper than 64 levels"),
    "unknown-stage": ('{"stage": "env"}', "its stage 'env' is none of fa4-dists, fa4-import"),
    "wrong-type": ('{"stage": "fa4-dists", "versions": [], "namespace": {}}', "fa4-dists.versions is a list"),
    "twice": (DISTS + "\n" + MARK + DISTS, "came twice"),
    "long-path": (DISTS.replace("[]", '["' + "a" * 5000 + '"]'), "more than 4096"),
    "bad-version": (DISTS.replace('"1.0"', '"not a version"'), "the version of x, 'not a version', is not PEP 440"),
    "lacks-a-name": (DISTS.replace('"x"', '"y"'), "fa4-dists.versions lacks x"),
    "nothing": ("", "printed no facts"),
    "import-error-shape": (DISTS + "\n" + MARK + '{"stage": "fa4-import", "ok": false, "error": 3}', "fa4-import"),
}


@pytest.mark.parametrize(("line", "says"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_probe_output_is_one_error(tmp_path, line, says):
    (tmp_path / "lines").write_text(f"{MARK}{line}\n" if line else "garbage\n")
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\ncat {tmp_path / 'lines'}\n")
    python.chmod(0o755)
    with pytest.raises(FaforgeError) as caught:
        doctor_facts.collect(python, ("x",), 30, lambda message: None)
    assert caught.value.exit_code == EXIT_BAD_INPUT and f"--python {python}" in caught.value.message
    assert says in caught.value.message, caught.value.message


def test_a_probe_that_dies_in_the_import_is_a_crash_not_a_silence(tmp_path):
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\necho '{MARK}{DISTS}'\nkill -SEGV $$\n")
    python.chmod(0o755)
    found = doctor_facts.collect(Path(python), ("x",), 30, lambda message: None)
    assert found.versions == {"x": "1.0"} and found.import_outcome.crashed and not found.import_outcome.ok


def test_a_conda_prefix_holds_only_what_the_conda_package_pins():
    """conda-forge's nvidia-cutlass-dsl folds PyPI's libs wheels into one package and its cuda-python chooses
    cuda-bindings: a prefix our conda package made (no libs dists, cuda-bindings 13.4.4) is healthy; a venv is not."""
    made_by_conda = fa4(
        nvidia_cutlass_dsl_libs_base=None,
        nvidia_cutlass_dsl_libs_core=None,
        nvidia_cutlass_dsl_libs_cu12=None,
        nvidia_cutlass_dsl_libs_cu13=None,
        cuda_bindings="13.4.4",
        cuda_pathfinder="1.8.3",
    )
    assert kinds(doctor.judge(env(conda=True), made_by_conda, DATA)) == []
    assert "dependency-missing" in kinds(doctor.judge(env(), made_by_conda, DATA))
    assert kinds(doctor.judge(env(conda=True), fa4(quack_kernels="0.6.2"), DATA)) == ["outside-set"]

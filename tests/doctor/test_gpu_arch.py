"""GPU SM not compiled in: real fatbinaries built with nvcc, judged for a GPU given as data, and (on a
machine with an NVIDIA GPU) the whole `faforge doctor` against the GPU that is really there."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from faforge.doctor import facts as env_facts
from faforge.doctor import probe_facts
from faforge.doctor.diagnose import diagnose
from faforge.doctor.examine import situation_from
from faforge.doctor.fixes import plan
from faforge.doctor.probe_run import run_probe
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from tests.doctor import envs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc builds the fatbinary fixtures"),
]
H200 = env_facts.Gpu("NVIDIA H200", (9, 0), "580.65.06", "nvidia-smi")
V100 = env_facts.Gpu("Tesla V100-SXM2-32GB", (7, 0), "580.65.06", "nvidia-smi")  # no cell holds sm_70 code


def situation_on(python, gpu):
    """The doctor's view of `python`'s environment, as if nvidia-smi had reported `gpu`."""
    stages, stopped = run_probe(python)
    return situation_from(probe_facts.parse(stages, stopped, (gpu,), "ok"))


@pytest.fixture
def plain_venv(tmp_path):
    return envs.pyenv_venv(tmp_path / "venv", "3.11")


def install_kernel(python, tmp_path, gencode):
    """Compile and drop the module straight into site-packages (no dist-info: only the binary matters here)."""
    envs.cuda_extension(
        envs.site_packages(python) / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so", python, gencode
    )


@pytest.mark.parametrize(
    ("gencode", "kinds"),
    [
        ("arch=compute_80,code=sm_80", ["gpu-arch-missing"]),
        ("arch=compute_80,code=[sm_80,compute_80]", ["gpu-arch-jit"]),
        ("arch=compute_90a,code=sm_90a", []),
    ],
)
def test_embedded_archs_against_an_sm90_gpu(plain_venv, tmp_path, gencode, kinds):
    install_kernel(plain_venv, tmp_path, gencode)
    problems = diagnose(situation_on(plain_venv, H200))
    assert [p.kind for p in problems if p.kind.startswith("gpu-")] == kinds
    if kinds == ["gpu-arch-missing"]:
        arch = gencode.rsplit("=", 1)[1]
        assert problems[-1].message == (
            "flash-attn has no kernels for your NVIDIA H200 (sm_90): sm_90 GPU cannot run this "
            f"binary: it has SASS {arch} and PTX none, none of which runs on sm_90"
        )


def test_the_fix_installs_a_wheel_with_the_gpus_arch_or_builds_for_it(cuda_overlay, tmp_path):
    """The pip cell's wheel (sm_80/90/100/120 + PTX 12.0) when its code runs on the GPU, else a build for its SM."""
    install_kernel(cuda_overlay, tmp_path, "arch=compute_80,code=sm_80")
    matrix = load_matrix()
    s = situation_on(cuda_overlay, H200)
    problems = diagnose(s)
    assert [p.kind for p in problems] == ["gpu-arch-missing"]
    [fix] = plan(s, problems, matrix, [], pip_builds(matrix, "linux-64"))
    assert (fix.kind, fix.cell) == ("pip-install", "pypi/linux-64/py311/torch2.14/cu130/abi1")
    s = situation_on(cuda_overlay, V100)
    problems = diagnose(s)
    assert [p.kind for p in problems] == ["gpu-arch-missing"]
    fixes = plan(s, problems, matrix, [], pip_builds(matrix, "linux-64"))
    assert [f.kind for f in fixes] == ["no-matching-cell", "local-build"]
    assert "has no GPU code for this GPU" in fixes[0].title
    assert "--archs 70" in " ".join(fixes[1].commands)


def _visible_gpu() -> tuple[int, int] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True
    )
    first = out.stdout.strip().splitlines()[:1]
    return tuple(int(x) for x in first[0].split(".")) if out.returncode == 0 and first else None


@pytest.mark.gpu
def test_doctor_on_the_real_gpu(run_doctor, cuda_overlay, tmp_path):
    capability = _visible_gpu()
    if capability is None:
        pytest.skip("no NVIDIA GPU visible (nvidia-smi absent or reports none)")
    other = "90" if capability[0] == 8 else "80"  # SASS of another major never runs here
    ext = envs.cuda_extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        cuda_overlay,
        f"arch=compute_{other},code=sm_{other}",
    )
    envs.install_flash_attn(cuda_overlay, ext, tmp_path)
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert result.kinds() == ["gpu-arch-missing"]
    assert f"sm_{capability[0]}{capability[1]}" in result.problem("gpu-arch-missing")["message"]

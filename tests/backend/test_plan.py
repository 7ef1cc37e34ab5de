"""faforge.backend.plan: the kernel library's plan from the arguments and the machine."""

from __future__ import annotations

import pytest

from faforge.backend import plan
from faforge.backend.errors import BuildError
from tests.backend.test_sources import _sdist


@pytest.fixture
def nvcc_13(monkeypatch, tmp_path):
    monkeypatch.setattr(plan, "find_cuda_home", lambda: str(tmp_path / "cuda"))
    monkeypatch.setattr(plan, "nvcc_version", lambda nvcc: (13, 0))


def test_the_plan_names_what_the_build_resolved(nvcc_13, tmp_path):
    resolved, jobs = plan.kernel_plan(
        source_dir=_sdist(tmp_path),
        archs=[(90, False), (120, True)],
        nvcc_threads=1,
        max_jobs=3,
        compiler_cache="ccache",
        only_tus="flash_fwd_hdim32_fp16_sm80.cu",
    )
    assert jobs == 3
    assert resolved == {
        "flash_attn": "2.8.3.post2",
        "nvcc": "13.0",
        "archs": ["sm_90", "sm_120+PTX"],
        "kernel_cxx_std": "c++17",
        "max_jobs": 3,
        "nvcc_threads": 1,
        "compiler_cache": "ccache",
        "only_tus": 1,
    }


def test_without_max_jobs_the_memory_decides_and_nvcc_checks_the_archs(nvcc_13, tmp_path):
    resolved, jobs = plan.kernel_plan(
        source_dir=_sdist(tmp_path),
        archs=[(90, False)],
        nvcc_threads=1,
        max_jobs=None,
        compiler_cache="none",
        only_tus=None,
    )
    assert jobs >= 1 and resolved["only_tus"] == "all"
    with pytest.raises(BuildError, match="sm_70: flash-attn 2 kernels need sm_80"):
        plan.kernel_plan(
            source_dir=_sdist(tmp_path),
            archs=[(70, False)],
            nvcc_threads=1,
            max_jobs=1,
            compiler_cache="none",
            only_tus=None,
        )

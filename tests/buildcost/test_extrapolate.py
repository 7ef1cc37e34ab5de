"""From measured TU compiles to cells and runners: the model's rules, and the MAX_JOBS policy's safety."""

from __future__ import annotations

import pytest

from faforge.costmodel import extrapolate
from faforge.costmodel.samples import Sample
from faforge.errors import FaforgeError
from faforge.kernels.tus import CLASSES
from faforge.matrix import load_matrix


def sample(tu, cpu_s, rss=3.0, arch="80"):
    return Sample(
        tu=tu,
        arch=arch,
        nvcc="13.0",
        torch="2.14.1",
        cxx_std="c++20",
        cpu_s=cpu_s,
        wall_s=cpu_s,
        peak_rss_gb=rss,
        source="test",
    )


def test_linear_fit_recovers_a_line_and_is_flat_for_one_point():
    assert extrapolate.linear_fit([(32, 100.0), (128, 200.0), (256, 333.33)]) == pytest.approx(
        (1.0417, 66.67), rel=1e-3
    )
    assert extrapolate.linear_fit([(32, 90.0), (32, 110.0)]) == (0.0, 100.0)


def test_class_mean_is_the_fit_at_the_mean_head_dim_and_worst_is_hdim256():
    costs = extrapolate.class_costs(
        (sample("flash_fwd_hdim32_fp16_sm80.cu", 60), sample("flash_fwd_hdim128_bf16_causal_sm80.cu", 120, 4.4))
    )
    fwd = costs["fwd"]
    assert fwd.measured_hdims == (32, 128)
    assert fwd.mean_cpu_s == pytest.approx(120.0)  # the six head dims 32..256 average 128
    assert fwd.worst_cpu_s == pytest.approx(200.0)  # 120 + (120 - 60) * 128 / 96
    assert fwd.peak_rss_gb == 4.4


def test_a_multi_arch_sample_counts_per_arch():
    costs = extrapolate.class_costs((sample("flash_bwd_hdim32_fp16_sm80.cu", 300, arch="80;90;120+PTX"),))
    assert costs["bwd"].mean_cpu_s == pytest.approx(100.0)


def test_ptx_on_a_sass_arch_adds_no_pass():
    assert extrapolate.sass_arch_count("80;90;100;120+PTX") == 4
    assert extrapolate.sass_arch_count("80;90+PTX") == 2


def test_cell_cost_is_tus_times_class_cost_times_archs():
    costs = extrapolate.class_costs(tuple(sample(f"flash_{c}_hdim32_fp16_sm80.cu", 60) for c in CLASSES))
    cell = extrapolate.cell_cost(costs, "80;90;100;120+PTX")
    assert cell.tus == 72
    assert cell.cpu_h == pytest.approx(72 * 60 * 4 / 3600)
    assert extrapolate.cell_cost(costs, "80;90+PTX").cpu_h == pytest.approx(cell.cpu_h / 2)


def test_an_unmeasured_class_is_assumed_to_cost_the_mean_of_the_measured_ones():
    costs = extrapolate.class_costs(
        (sample("flash_fwd_hdim32_fp16_sm80.cu", 60), sample("flash_bwd_hdim32_fp16_sm80.cu", 120, 5.0))
    )
    assert costs["fwd_split"].measured_hdims == ()
    assert costs["fwd_split"].mean_cpu_s == 90.0 and costs["fwd_split"].peak_rss_gb == 5.0
    assert extrapolate.cell_cost(costs, "80").cpu_h == pytest.approx(24 * (60 + 120 + 90) / 3600)


def test_cell_cost_names_a_class_it_has_no_cost_for():
    with pytest.raises(FaforgeError, match="fwd, fwd_split, bwd"):
        extrapolate.cell_cost({}, "80")


@pytest.mark.parametrize("archs", sorted({rule.value for rule in load_matrix().policy.cuda_archs}))
def test_max_jobs_never_oversubscribes_a_24_gib_2_core_runner(archs):
    n = extrapolate.sass_arch_count(archs)
    # What a 24 GiB runner shows as available, down to a busy one.
    for available in (23.0, 22.0, 20.0, 16.0):
        fit = extrapolate.runner_fit(2, available, n, nvcc_threads=1, measured_peak_gb=6.4)
        assert 1 <= fit.max_jobs <= 2
        assert fit.fits, fit


def test_max_jobs_on_an_8_vcpu_runner_is_memory_bound():
    fit = extrapolate.runner_fit(8, 30.0, 4)
    assert fit.max_jobs == 3 and fit.fits


def test_policy_cannot_fit_many_nvcc_threads_and_says_so():
    # NVCC_THREADS=4 with 4 archs: one job alone is budgeted above 24 GiB; derive_max_jobs still
    # returns 1, and the report marks it as not fitting.
    fit = extrapolate.runner_fit(2, 22.0, 4, nvcc_threads=4)
    assert fit.max_jobs == 1 and not fit.fits

"""The kernel split's benchmark from the real matrix and the committed measurements:
kernels compiled at most once per (platform, CUDA, archs, Philox layout), and no kernel compile for a new
torch minor whose CUDA and layout are already built. Timings and sizes are printed by `faforge
bench-build`, not asserted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from faforge.bench.kernel_split import new_kernel_builds, size_model, split_report
from faforge.costmodel import samples
from faforge.costmodel.extrapolate import class_costs
from faforge.errors import DataError
from faforge.kernels.cachekey import kernel_cache_key
from faforge.matrix import load_matrix
from faforge.matrix.kernels import kernel_key


@pytest.fixture(scope="module")
def matrix(repo):
    return load_matrix(repo)


@pytest.fixture(scope="module")
def measured():
    return samples.load()


@pytest.fixture(scope="module")
def report(matrix, measured):
    return split_report(measured, class_costs(measured.samples), matrix.cells, matrix.kernels)


def test_kernels_are_compiled_at_most_once_per_platform_cuda_archs_and_philox_layout(report, matrix):
    keys = {(c.platform, c.cuda, c.cuda_archs, c.philox_offset_bits) for c in matrix.cells}
    assert report.kernel_builds_after == len(keys) == 12
    # The two beyond one per (platform, CUDA, archs): CUDA 12.9 serves torch 2.7-2.9 (32-bit Philox offset)
    # and 2.10-2.13 (64-bit) on both platforms; every other CUDA serves one side of 2.9/2.10 only.
    two_layouts = {(p, cuda) for p, cuda, archs, bits in keys if (p, cuda, archs, 96 - bits) in keys}
    assert two_layouts == {("linux-64", "12.9"), ("linux-aarch64", "12.9")}
    assert report.kernel_builds_before == len({kernel_cache_key(c) for c in matrix.cells}) == 38
    assert report.kernel_cpu_h_after < report.kernel_cpu_h_before / 3


def test_a_new_torch_minor_whose_cuda_and_layout_are_built_costs_no_kernel_compile(report, matrix):
    assert (report.new_minor.torch_minor, report.new_minor.world) == ("2.13", "conda-forge")
    assert report.new_minor.kernel_builds_before > 0 and report.new_minor.kernel_builds_after == 0
    assert report.new_minor.kernel_cpu_h_after == 0
    # Every torch minor of the matrix shares each of its (platform, CUDA, archs, layout) with another
    # minor, so none adds a kernel build any more; before, each added one per cache key.
    for world, minor in {(c.world, c.torch_minor) for c in matrix.cells}:
        assert new_kernel_builds(matrix.cells, minor, world, kernel_key) == [], (world, minor)
        assert new_kernel_builds(matrix.cells, minor, world, kernel_cache_key), (world, minor)


def test_a_torch_minor_with_a_cuda_or_layout_of_its_own_still_pays_for_its_kernels(matrix):
    newest = [c for c in matrix.cells if c.torch_minor == "2.13" and c.world == "conda-forge"]
    alone = [c for c in matrix.cells if c not in newest] + [replace(newest[0], cuda="13.2")]
    assert len(new_kernel_builds(alone, "2.13", "conda-forge", kernel_key)) == 1
    # A torch 2.13 with torch 2.9's 32-bit layout would need a CUDA 13.0 kernel build no other minor has.
    other_layout = [c for c in matrix.cells if c not in newest] + [replace(c, philox_offset_bits=32) for c in newest]
    assert {k.cuda for k in map(kernel_key, new_kernel_builds(other_layout, "2.13", "conda-forge", kernel_key))} == {
        "13.0"
    }


def test_switching_across_the_philox_layout_downloads_the_other_layouts_kernels(report):
    crossing = report.crossing
    assert (crossing.cuda, crossing.cuda_archs, crossing.torch_from, crossing.torch_to) == (
        "12.9",
        "80;90;100;120+PTX",
        "2.9",
        "2.10",
    )
    assert crossing.after == crossing.before, "the glue and a kernel package: what a package before the split held"
    assert crossing.after.zstd > 30 * report.switch_after.zstd


def test_the_size_model_reproduces_the_measured_build(measured, report):
    model = size_model(measured.sizes)
    library = next(s for s in measured.sizes if s.part == "kernel-library")
    assert model.kernel_library(1).raw == library.bytes and model.kernel_library(1).zstd == library.zstd_bytes
    assert model.glue.raw < library.bytes / 100, "flash_api.cpp is a small share of a package"
    assert (
        report.channel_after.zstd < report.channel_before.zstd and report.switch_after.zstd < report.switch_before.zstd
    )


def test_a_size_entry_of_an_unknown_part_names_its_key(tmp_path, measured):
    path = tmp_path / "m.yaml"
    path.write_text(samples.dump(measured).replace("part: fatbin", "part: cubin"))
    with pytest.raises(DataError) as caught:
        samples.load(path)
    assert caught.value.key == "sizes[1].part"


def test_variants_readme_holds_the_table_bench_build_prints(repo, report):
    text = (repo / "variants" / "README.md").read_text()
    for label, before, after in report.rows():
        assert f"| {label} | {before} | {after} |" in text, label

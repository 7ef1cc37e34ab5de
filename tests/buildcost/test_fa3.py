"""FlashAttention-3's build cost (faforge.families.flash_attn_3.cost) from the committed
variants/build-measurements.yaml: its FA3 samples, the per-package and matrix CPU hours, the measured/estimated
labels and the piece jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.costmodel import samples
from faforge.costmodel.runners import KERNELS_LINK_PART, load_build_cost
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.families.flash_attn_3 import cost as fa3
from faforge.families.flash_attn_3 import cost_report as fa3_report
from faforge.families.flash_attn_3.cost_samples import fa3_measurements
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.matrix import load_matrix

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "bench-build.json"
FULL_TUS = [Path(tu).name for tu in fa3_backend.sources(frozenset())]


@pytest.fixture(scope="module")
def data():
    return samples.load()


@pytest.fixture(scope="module")
def measured(data):
    return fa3_measurements(data)


@pytest.fixture(scope="module")
def report(data):
    return fa3_report.report(data, packages_of(load_matrix()), load_build_cost())


def test_the_data_file_has_fa3_samples_of_full_and_trimmed_builds_for_both_platforms(measured):
    builds = {b.build: b for b in measured.builds}
    assert measured.samples and all(s.build in builds for s in measured.samples)
    for s in measured.samples:
        build = builds[s.build]
        assert s.tu in {Path(tu).name for tu in fa3_backend.sources(build.disabled_set)}, s
        assert s.source.strip() and build.source.strip()
        assert s.cpu_s is not None or s.wall_s > 0
    full = [b for b in measured.builds if not b.disabled_set]
    trimmed = [b for b in measured.builds if b.disabled_set]
    assert full and trimmed, "a full build's samples and a trimmed build's to scale against"
    assert {b.platform for b in measured.builds} == {"linux-64", "linux-aarch64"}
    # the trimmed canary builds say what they left out, so their samples are never read as full TUs
    assert all("SPLIT" in b.disabled_set and "SM8x" in b.disabled_set for b in trimmed)


def test_every_fa3_package_compiles_the_293_tus_of_a_full_build(report):
    assert len(FULL_TUS) == 293
    assert [p.id for p in report.packages] == [p.id for p in packages_of(load_matrix())]
    for package in report.packages:
        assert package.tus == 293
        assert sorted(tu for line in package.lines for tu in line.tus) == sorted(FULL_TUS)
        # 80;90a: each kernel TU compiles its own arch, combine and scheduler both, the glue is host C++
        assert sum(line.passes for line in package.lines) == 293 + 2
        assert {line.tu_class for line in package.lines} == set(fa3.CLASSES)


def test_cpu_hours_per_package_and_for_the_matrix(report):
    by_id = {p.id: p for p in report.packages}
    assert all(p.cpu_h > 0 for p in report.packages)
    assert report.matrix_cpu_h == pytest.approx(sum(p.cpu_h for p in report.packages), abs=0.11)
    arm_factor = report.platform_factors["linux-aarch64"][0]
    for pid, package in by_id.items():
        if package.platform == "linux-aarch64":
            twin = by_id[pid.replace("linux-aarch64", "linux-64")]
            assert package.cpu_h == pytest.approx(twin.cpu_h * (arm_factor or 1.0), abs=0.11)


def test_classes_are_labelled_measured_or_estimated(report, measured):
    assert list(report.costs) == list(fa3.CLASSES)
    full_classes = {
        fa3.tu_class(s.tu)
        for s in measured.samples
        if not measured.build(s.build).disabled_set and measured.build(s.build).platform == fa3.REFERENCE_PLATFORM
    }
    for name, cost in report.costs.items():
        assert cost.status.split(":")[0].split(" x ")[0] in {
            "measured",
            "measured, trimmed build",
            "scaled",
            "lower bound",
            "assumed",
        }
        assert cost.measured == (name in full_classes or (name in fa3.TRIM_FREE and cost.samples > 0)), (
            name,
            cost.status,
        )
        assert (cost.samples == 0) == cost.status.startswith("assumed")
    assert report.costs["sm90_fwd"].measured, "the class with 220 of the 293 TUs has a full-build sample"


def test_a_class_without_a_full_sample_is_scaled_bounded_or_assumed(report):
    reference = [t for t in fa3.best_timed(report.timed) if t.build.platform == fa3.REFERENCE_PLATFORM]
    trimmed_bwd = [t.per_pass_s for t in reference if t.tu_class == "sm90_bwd" and not t.full]
    # without its full-build sample, sm90 bwd is its trimmed TUs times the ratio sm90 fwd measured
    costs, ratio, source = fa3.class_costs([t for t in reference if not (t.full and t.tu_class == "sm90_bwd")])
    assert source == ("sm90_fwd",) and ratio > 1
    assert costs["sm90_bwd"].status.startswith("scaled") and not costs["sm90_bwd"].measured
    assert costs["sm90_bwd"].at_hdim128_s == pytest.approx(sum(trimmed_bwd) / len(trimmed_bwd) * ratio)
    # with no full build at all: trimmed kernels are lower bounds, classes no trimmed build has are assumed
    costs, ratio, _ = fa3.class_costs([t for t in reference if not t.full])
    assert ratio is None
    assert costs["sm90_fwd"].status.startswith("lower bound") and costs["glue"].status == "measured, trimmed build"
    known = [costs["sm90_fwd"].at_hdim128_s, costs["sm90_bwd"].at_hdim128_s]
    for name in ("sm80_fwd", "sm80_bwd", "combine"):
        assert costs[name].status.startswith("assumed") and costs[name].samples == 0
        assert costs[name].at_hdim128_s == pytest.approx(sum(known) / 2)


def test_a_tu_timed_alone_replaces_its_ninja_log_estimate(report):
    alone = {t.config() for t in report.timed if t.basis == fa3.TIMED_ALONE}
    used = fa3.best_timed(report.timed)
    assert all(t.basis == fa3.TIMED_ALONE for t in used if t.config() in alone)
    assert len(used) < len(report.timed), "the committed data re-times trimmed TUs alone"


def test_piece_jobs_cover_every_cu_tu_once_and_fit_the_runner(report):
    cost = load_build_cost()
    cu = sorted(tu for tu in FULL_TUS if tu.endswith(".cu"))
    for package in report.packages:
        runner = cost.runner_for(package.platform)
        assert sorted(tu for job in package.jobs for tu in job.tus) == cu
        assert package.jobs[-1].name == KERNELS_LINK_PART
        assert all(job.minutes <= runner.job_limit_minutes for job in package.jobs)


def test_class_of_a_tu_and_its_head_dim():
    assert fa3.tu_class("flash_fwd_hdim64_512_bf16_paged_split_sm90.cu") == "sm90_fwd"
    assert fa3.head_dim("flash_fwd_hdim64_512_bf16_paged_split_sm90.cu") == 512
    assert fa3.tu_class("flash_bwd_hdim96_fp16_softcapall_sm90.cu") == "sm90_bwd"
    assert fa3.dtype("flash_fwd_hdim192_128_e4m3_sm90.cu") == "e4m3"
    assert [
        fa3.tu_class(t) for t in ("flash_api_stable.cpp", "flash_fwd_combine.cu", "flash_prepare_scheduler.cu")
    ] == ["glue", "combine", "scheduler"]
    assert {fa3.tu_class(t) for t in FULL_TUS} == set(fa3.CLASSES)


def test_bench_build_prints_the_fa3_section_and_its_json_matches_the_schema():
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "faforge", "bench-build", *args], capture_output=True, text=True, timeout=120
        )

    text, as_json = run(), run("--json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    for title in (
        "FA3: timed TU compiles",
        "FA3: per TU class",
        "FA3: packages",
        "FA3: piece jobs",
        "matrix (4 packages)",
        "measured classes:",
        "sanity: upstream",
    ):
        assert title in text.stdout
    report = json.loads(as_json.stdout)
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    section = report["fa3"]
    assert section["tus"] == 293 and len(section["packages"]) == len(packages_of(load_matrix()))
    assert section["matrix_cpu_h"] == pytest.approx(sum(p["cpu_h"] for p in section["packages"]), abs=0.11)
    measured = [name for name, c in section["classes"].items() if c["measured"]]
    estimated = [name for name, c in section["classes"].items() if not c["measured"]]
    assert (
        f"measured classes: {', '.join(measured) or 'none'}; estimated: {', '.join(estimated) or 'none'}" in text.stdout
    )


def test_variants_readme_holds_the_fa3_table_bench_build_prints(report):
    text = (Path(__file__).resolve().parents[2] / "variants" / "README.md").read_text()
    for row in report.markdown_rows():
        assert row in text, f"variants/README.md, FlashAttention-3: update the table row {row}"

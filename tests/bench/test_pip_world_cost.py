"""`faforge bench-build`'s pip world section: the runner and CPU hours each torch release adds, from the
committed measurements and variants/build-cost.yaml. Numbers recomputed here from the data, never timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from faforge.costmodel import samples
from faforge.costmodel.extrapolate import cell_cost, class_costs
from faforge.costmodel.runners import cell_part, load_build_cost, split_kernels
from faforge.matrix import load_matrix
from faforge.matrix.kernels import kernel_key
from faforge.matrix.pip_builds import pip_builds

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "bench-build.json").read_text())
TITLE = "pip world: added runner hours per torch release"


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "faforge", "bench-build", *args], capture_output=True, text=True, timeout=120
    )


def test_each_torch_release_adds_its_wheel_jobs_and_only_the_kernel_packages_no_world_has():
    result = run("--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    section = report["pip_world"]
    data, cost, matrix = samples.load(), load_build_cost(), load_matrix()
    builds = pip_builds(matrix)
    costs = class_costs(data.samples)
    glue_min = round(sum(g.cpu_s for g in data.glue) / len(data.glue) / 60, 2)
    assert section["glue_cpu_min"] == glue_min and section["wheel_job_minutes"] == cell_part(cost).minutes
    assert section["pip_cells"] == len(builds) == 79 and section["kernel_wheels"] == len(
        {kernel_key(b.cell) for b in builds}
    )
    had = {k.key for k in matrix.kernels}
    for row in section["per_torch_release"]:
        mine = [b for b in builds if b.cell.torch_minor == row["torch_minor"]]
        new = sorted({kernel_key(b.cell) for b in mine} - had)
        had |= set(new)
        assert row["new_kernel_packages"] == [k.id for k in new]
        jobs = [p for k in new for p in split_kernels(cost, k.platform, k.cuda_archs)]
        assert (row["kernel_jobs"], row["kernel_runner_minutes"]) == (len(jobs), sum(p.minutes for p in jobs))
        assert row["wheel_runner_minutes"] == len(mine) * cell_part(cost).minutes
        assert row["kernel_cpu_h"] == round(sum(cell_cost(costs, k.cuda_archs).cpu_h for k in new), 2)
        assert row["glue_cpu_h"] == round(len(mine) * glue_min / 60, 2)
    rows = {r["torch_minor"]: r for r in section["per_torch_release"]}
    assert rows["2.14"]["kernel_jobs"] == 0 and rows["2.14"]["kernel_cpu_h"] == 0, (
        "torch 2.14 on CUDA 13.0: the conda world's kernels"
    )
    assert len(rows["2.15"]["new_kernel_packages"]) == 2, "torch 2.15 brings CUDA 13.2 on both platforms"


def test_the_table_prints_the_same_numbers():
    table, report = run(), json.loads(run("--json").stdout)["pip_world"]
    assert table.returncode == 0, table.stderr
    section = table.stdout.split(TITLE, 1)[1]
    newest = report["per_torch_release"][-1]
    line = next(line for line in section.splitlines() if line.startswith(newest["torch_minor"] + " "))
    assert f"{newest['runner_minutes'] / 60:.1f}" in line.split() and f"{newest['cpu_h']:.1f}" in line.split()
    assert "no kernel TU compiled for pip" in section

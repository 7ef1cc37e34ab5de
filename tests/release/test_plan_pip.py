"""`faforge plan`'s pip stage (the pip world): one wheel job per pip cell after the kernel stage, the kernel
packages the conda cells have reused (a pip-only kernel key is an ordinary kernel job, never a second compile),
what a real wheel index (written by faforge.pipindex, read locally and over loopback HTTP) already holds, and
the runner hours each torch release adds, from variants/build-cost.yaml."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from faforge.channel.local import PackageSpec, assemble, index
from faforge.costmodel.runners import cell_part, load_build_cost, split_kernels
from faforge.matrix import load_matrix
from faforge.matrix.kernels import kernel_key
from faforge.matrix.pip_builds import pip_builds
from faforge.pipindex.publish import publish_wheels
from faforge.pipwheel.facts import read_wheel
from faforge.pipwheel.writer import WheelSpec, write_wheel
from faforge.release.build.jobs import jobs_from_plan
from tests.release.test_plan import STAGES, faforge, plan_json
from tests.support.pip_index_server import serve_index

TAG = "manylinux_2_28_x86_64"
REPO = Path(__file__).resolve().parents[2]


def jobs_of(data, stage):
    return [j for c in data[stage] for j in c["include"]]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@pytest.fixture(scope="module")
def builds(matrix):
    return pip_builds(matrix)


@pytest.fixture(scope="module")
def full_plan():
    return plan_json()


def test_one_wheel_job_per_pip_cell_after_the_kernel_package_of_its_key(full_plan, builds, matrix):
    data = full_plan
    assert data["version"] == 5 and "wheels" in STAGES and STAGES.index("wheels") > STAGES.index("kernel_links")
    wheels = jobs_of(data, "wheels")
    assert sorted(j["cell"] for j in wheels) == sorted(b.cell.id for b in builds) == sorted(data["pip_to_build"])
    assert data["pip_cells"] == len(builds) == 79 and data["pip_in_index"] == [] and data["index"] is None
    assert data["pip_not_built"] == [], "every platform has a wheel runner (variants/build-cost.yaml)"
    cost = load_build_cost()
    # Each platform's glue is built natively in PyPA's manylinux_2_28 image of its machine, with NVIDIA's RHEL 8 CUDA
    # repository of that machine: linux-aarch64's on GitHub's arm64 runner, where pip installs PyPI's aarch64 torch.
    machines = {
        "linux-64": ("ubuntu-latest", "x86_64", "x86_64"),
        "linux-aarch64": ("ubuntu-24.04-arm", "aarch64", "sbsa"),
    }
    for job in wheels:
        label, machine, repo = machines[job["platform"]]
        runner = cost.wheel_runners[job["platform"]]
        assert (job["runs-on"], job["container"], job["cuda-repo"]) == (
            runner.label,
            runner.container,
            runner.cuda_repo,
        )
        assert (runner.label, runner.container) == (label, f"quay.io/pypa/manylinux_2_28_{machine}")
        assert (
            runner.cuda_repo == f"https://developer.download.nvidia.com/compute/cuda/repos/rhel8/{repo}/cuda-rhel8.repo"
        )
    by_id = {b.cell.id: b for b in builds}
    kernel_slugs = {j["kernels"] for stage in ("kernels", "kernel_links") for j in jobs_of(data, stage)}
    for job in wheels:
        b = by_id[job["cell"]]
        assert (
            job["part"] == "wheel"
            and job["kernels"] == kernel_key(b.cell).slug in kernel_slugs
            and not job["kernel-in-channel"]
        )
        assert (
            job["kernel-build"] == b.kernel_build
            and job["build-string"] == b.build_string
            and job["index-name"] == b.cell.index_name
        )
        assert (
            job["package"] == b.glue_wheel()
            and job["kernel-wheel"] == b.kernel_wheel()
            and job["torch-wheel"] == b.cell.wheel
        )
        assert job["timeout-minutes"] == cell_part(cost).minutes, "flash_api.cpp and the link, as a conda cell's job"


def test_a_platform_without_a_wheel_runner_gets_no_wheel_job_and_says_why(tmp_path, builds):
    """variants/build-cost.yaml's wheel_runners decide which platforms' pip cells CI builds: one left out is listed
    apart in pip_not_built, with the reason naming the file, and given no job."""
    project = tmp_path / "project"
    for name in ("variants", "recipes", "scripts", "pyproject.toml"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, project / name)
    cost = project / "variants" / "build-cost.yaml"
    data = yaml.safe_load(cost.read_text())
    del data["wheel_runners"]["linux-aarch64"]
    cost.write_text(yaml.safe_dump(data))
    result = faforge("plan", "--json", env={**os.environ, "FAFORGE_ROOT": str(project)})
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    arm = [b.cell.id for b in builds if b.cell.platform == "linux-aarch64"]
    assert [c["id"] for c in plan["pip_not_built"]] == arm and arm
    assert {c["why"] for c in plan["pip_not_built"]} == {
        "no wheel runner for linux-aarch64 in variants/build-cost.yaml (wheel_runners: label, container, cuda_repo)"
    }
    assert {j["platform"] for j in jobs_of(plan, "wheels")} == {"linux-64"} and not set(arm) & set(plan["pip_to_build"])


def test_no_kernel_package_is_planned_twice_and_pip_only_keys_are_ordinary_kernel_jobs(full_plan, matrix):
    """The conda cells' kernel packages serve the pip cells of their key; CUDA 12.8 and 13.2 (PyPI's torch
    2.8-2.10 and 2.15) are kernel packages only pip cells need: built by the kernel stage, once."""
    data = full_plan
    kernel_jobs = jobs_of(data, "kernels") + jobs_of(data, "kernel_links")
    assert [k for k, n in Counter((j["kernels"], j["part"]) for j in kernel_jobs).items() if n > 1] == []
    pip_only = {k.key.slug: k for k in matrix.pip_kernels}
    assert len(pip_only) == 4 and {k.key.cuda for k in pip_only.values()} == {"12.8", "13.2"}
    cost = load_build_cost()
    for slug, package in pip_only.items():
        mine = [j for j in kernel_jobs if j["kernels"] == slug]
        assert [j["part"] for j in mine] == [
            p.name for p in split_kernels(cost, package.key.platform, package.key.cuda_archs)
        ]
        assert {j["cell"] for j in mine} == {package.cell_ids[0]} and package.cell_ids[0].startswith("pypi/")
    listed = {k["id"]: k for k in data["kernel_packages"]}
    assert set(listed) == {k.key.id for k in matrix.all_kernels}, "conda's 12 and pip's own 4, each once"
    for platform in ("linux-64", "linux-aarch64"):
        shared = listed[f"{platform}/cu130/sm80_90_100_120ptx/philox64"]
        assert {c for c in shared["cells"] if c.startswith("pypi/")} == {
            c.id for c in matrix.pip_cells if kernel_key(c).cuda == "13.0" and c.platform == platform
        }


def test_build_reads_the_wheel_jobs_of_a_plan_and_an_older_plan_without_them(full_plan, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(full_plan))
    jobs = jobs_from_plan(str(plan))
    assert ("pypi/linux-64/py311/torch2.14/cu130/abi1", "wheel") in jobs
    old = {k: v for k, v in full_plan.items() if k != "wheels"}
    plan.write_text(json.dumps({**old, "version": 4}))
    assert not [j for j in jobs_from_plan(str(plan)) if j[1] == "wheel"] and jobs_from_plan(str(plan))


def test_a_kernel_package_the_channel_holds_serves_the_wheel_jobs_of_its_key(tmp_path, builds):
    """Every conda cell of CUDA 13.0 is planned too, but its kernel package is in the channel: no kernel job,
    the wheel jobs of its key take it from there."""
    held = next(b for b in builds if b.cell.id == "pypi/linux-64/py311/torch2.14/cu130/abi1")
    channel = tmp_path / "channel"
    assemble(PackageSpec(held.kernel.name, held.kernel.version, held.kernel_build, "linux-64"), channel)
    index(channel)
    data = plan_json("--channel", str(channel), "--platform", "linux-64")
    slug = kernel_key(held.cell).slug
    assert slug not in {j["kernels"] for stage in ("kernels", "kernel_links") for j in jobs_of(data, stage)}
    mine = [j for j in jobs_of(data, "wheels") if j["kernels"] == slug]
    assert len(mine) == 20 and {j["kernel-in-channel"] for j in mine} == {True}, "torch 2.11-2.14 x 5 pythons"


def _publish_cell(build, root: Path, tmp_path: Path) -> None:
    """Write the cell's two wheels under the names the matrix gives them (small stand-ins) and publish them
    into `root` through faforge.pipindex, as `faforge publish --index` does after the gates."""
    made = tmp_path / "made"
    kernel = write_wheel(
        WheelSpec(
            name=build.kernel.name,
            version=build.kernel_wheel_version,
            build_tag=build.kernel_wheel_build_tag,
            python_tags=("py3",),
            abi_tags=("none",),
            platform_tags=(TAG,),
            requires_python=None,
            requires_dist=(),
            files={"libflash_attn_kernels/__init__.py": b""},
        ),
        made,
    )
    tag = build.cell.python_wheel_tag
    glue = write_wheel(
        WheelSpec(
            name="flash-attn",
            version=build.glue_version,
            build_tag=build.glue_build_tag,
            python_tags=(tag,),
            abi_tags=(tag,),
            platform_tags=(TAG,),
            requires_python=build.cell.requires_python,
            requires_dist=build.requires_dist,
            files={"flash_attn/__init__.py": b""},
        ),
        made,
    )
    assert (glue.name, kernel.name) == (build.glue_wheel(TAG), build.kernel_wheel(TAG))
    published = publish_wheels([read_wheel(kernel), read_wheel(glue)], root, dry_run=False, force=False)
    assert {o.action for o in published.outcomes} == {"published"}, published.outcomes


def test_a_cell_whose_wheels_the_index_holds_gets_no_job_from_a_folder_or_over_http(tmp_path, builds):
    root = tmp_path / "wheels"
    cell = next(b for b in builds if b.cell.id == "pypi/linux-64/py312/torch2.11/cu130/abi1")
    _publish_cell(cell, root, tmp_path)
    for where in (str(root), None):
        if where is None:
            with serve_index(root, tmp_path / "requests.log") as url:
                data = plan_json("--index", url, "--platform", "linux-64")
        else:
            data = plan_json("--index", where, "--platform", "linux-64")
        assert data["pip_in_index"] == [cell.cell.id]
        assert (
            cell.cell.id not in {j["cell"] for j in jobs_of(data, "wheels")}
            and cell.cell.id not in data["pip_to_build"]
        )
        assert len(jobs_of(data, "wheels")) == len([b for b in builds if b.cell.platform == "linux-64"]) - 1
        # The other cells of that index, and of the indexes nothing was published to yet, are to build.
        assert "pypi/linux-64/py313/torch2.11/cu130/abi1" in data["pip_to_build"]
    human = faforge("plan", "--index", str(root), "--platform", "linux-64")
    assert human.returncode == 0, human.stderr
    assert f"1 already in {root}" in human.stdout
    assert (
        f"indexes are not in {root} yet (nothing published there)" in human.stderr and "torch2.15-cu132" in human.stderr
    )


def test_the_index_holds_a_cell_only_with_its_exact_wheels(tmp_path, builds):
    """A glue wheel of another build (another identity hash in its build tag) is not this cell's."""
    root = tmp_path / "wheels"
    cell = next(b for b in builds if b.cell.id == "pypi/linux-64/py312/torch2.11/cu130/abi1")

    other = replace(cell, build_string=cell.build_string.replace(cell.build_string.split("_")[-2], "h0000000"))
    _publish_cell(other, root, tmp_path)
    data = plan_json("--index", str(root), "--platform", "linux-64")
    assert data["pip_in_index"] == [] and cell.cell.id in data["pip_to_build"]


def test_an_index_that_is_no_index_is_refused(tmp_path):
    (tmp_path / "torch2.11-cu130").mkdir()
    (tmp_path / "torch2.11-cu130" / "index.html").write_text("<html><body>nothing</body></html>")
    result = faforge("plan", "--index", str(tmp_path), "--platform", "linux-64")
    assert result.returncode == 2 and "torch2.11-cu130" in result.stderr and "faforge index --pip" in result.stderr
    assert "Traceback" not in result.stderr
    down = faforge("plan", "--index", "http://127.0.0.1:9/wheels", "--platform", "linux-64")
    assert down.returncode == 4 and "Traceback" not in down.stderr


def test_added_runner_hours_per_torch_release(full_plan, builds, matrix):
    """Each torch minor of the pypi world costs one wheel job per pip cell, plus the kernel packages its
    cells need that no conda cell and no older minor needs, each at its planned jobs' minutes."""
    cost = load_build_cost()
    rows = {r["torch_minor"]: r for r in full_plan["pip_cost"]["per_torch_release"]}
    assert list(rows) == sorted(rows, key=lambda m: tuple(map(int, m.split("."))))
    per_job = cell_part(cost).minutes
    assert full_plan["pip_cost"]["wheel_job_minutes"] == per_job
    new = {
        "2.8": ["linux-64/cu128/sm80_90_100_120ptx/philox32"],
        "2.10": ["linux-64/cu128/sm80_90_100_120ptx/philox64"],
        "2.15": ["linux-64/cu132/sm80_90_100_120ptx/philox64", "linux-aarch64/cu132/sm80_90_100_120ptx/philox64"],
    }
    for minor, row in rows.items():
        cells = [b for b in builds if b.cell.torch_minor == minor]
        assert (
            row["pip_cells"] == row["wheel_jobs"] == len(cells) and row["wheel_runner_minutes"] == len(cells) * per_job
        )
        assert row["new_kernel_packages"] == new.get(minor, []), minor
        kernel_minutes = sum(
            p.minutes
            for key in row["new_kernel_packages"]
            for p in split_kernels(cost, key.split("/")[0], "80;90;100;120+PTX")
        )
        assert row["kernel_runner_minutes"] == kernel_minutes
        assert row["runner_minutes"] == len(cells) * per_job + kernel_minutes and row["runner_hours"] == round(
            row["runner_minutes"] / 60, 1
        )
    assert rows["2.14"]["runner_minutes"] == 10 * per_job, (
        "torch 2.14 reuses CUDA 13.0's kernel packages: ten glue jobs only"
    )
    human = faforge("plan")
    assert human.returncode == 0, human.stderr
    section = human.stdout.split("pip world: added runner hours per torch release", 1)[1]
    line = next(line for line in section.splitlines() if line.startswith("2.15 "))
    assert f"{rows['2.15']['runner_hours']}" in line and "2" in line.split()

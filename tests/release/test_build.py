"""`faforge build` through py-rattler-build, offline, on a scratch checkout whose recipe is a tiny
stand-in (same variant keys and build-string formula as recipes/flash-attn, no compile) and whose
conda-forge world points at a local file:// channel: per-cell logs, a summary, isolation of a
failing cell, resuming, and the world's channels taken from variants/releases.yaml."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import pytest

from faforge.channel.local import index
from faforge.costmodel.runners import load_build_cost, split_kernels
from faforge.matrix.releases import dump_releases, header_of
from faforge.matrix.releases_read import load_releases
from faforge.release.package import read_package
from tests.support.tiers import slow
from tests.support.tiny_recipe import TINY_RECIPE, TINY_SPLIT_RECIPE

REPO = Path(__file__).resolve().parents[2]


def scratch_checkout(tmp_path: Path) -> tuple[Path, Path, dict]:
    """variants/ and recipes/ copied to tmp_path/project, its conda-forge world pointed at an empty local
    file:// channel: (the checkout, the channel, an environment whose faforge reads that checkout)."""
    root = tmp_path / "project"
    for name in ("variants", "recipes"):
        shutil.copytree(REPO / name, root / name)
    channel = tmp_path / "conda-forge-local"
    index(channel)
    path = root / "variants" / "releases.yaml"
    table = load_releases(path)
    worlds = {**table.worlds, "conda-forge": replace(table.worlds["conda-forge"], channels=(channel.as_uri(),))}
    path.write_text(dump_releases(replace(table, worlds=worlds), header_of(path.read_text())))
    return root, channel, dict(os.environ, FAFORGE_ROOT=str(root))


@pytest.fixture
@slow("a scratch checkout whose builds run py-rattler-build (1 to 2 s of CPU a test)")
def project(tmp_path):
    root, channel, env = scratch_checkout(tmp_path)
    cells = [
        c
        for c in json.loads(run(env, "matrix", "--platform", "linux-64", "--json").stdout)
        if c["torch_source"] == "conda-forge"
    ]
    good, bad = cells[-1]["id"], next(c for c in reversed(cells) if c["python"] != cells[-1]["python"])
    (root / "recipes" / "flash-attn" / "recipe.yaml").write_text(TINY_RECIPE.replace("@FAIL@", bad["python"] + ".*"))
    rendered = {c["id"]: c for c in json.loads(run(env, "matrix", "--platform", "linux-64", "--json").stdout)}
    return env, tmp_path / "output", rendered[good], rendered[bad["id"]], channel


def run(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, timeout=900
    )


def test_one_failure_does_not_stop_the_others_and_reruns_resume(project):
    env, output, good, bad, channel = project
    first = run(env, "build", bad["id"], good["id"], "--output-dir", str(output))
    assert first.returncode == 1, first.stdout + first.stderr
    rows = {line.split()[0]: line.split() for line in first.stdout.splitlines() if line.startswith("linux-")}
    assert rows[bad["id"]][2] == "failed" and rows[good["id"]][2] == "built"
    package = output / "linux-64" / f"flash-attn-2.8.3.post2-{good['build_string']}.conda"
    assert package.is_file(), "the good cell is built although the one before it failed"
    logs = output / "logs"
    good_log = (logs / (good["id"].replace("/", "-") + ".log")).read_text()
    bad_log = (logs / (bad["id"].replace("/", "-") + ".log")).read_text()
    assert f"channels {channel.as_uri()}" in good_log, "the world's channels come from variants/releases.yaml"
    assert "stand-in build for torch" in good_log
    assert "exit 3" in bad_log and "FAILED" in bad_log
    assert "1 of 2 ok, 1 failed" in first.stdout
    assert "[1/2]" in first.stderr and "✗" in first.stderr and "✓" in first.stderr, "live progress per cell"

    before = package.stat().st_mtime_ns
    again = run(env, "build", good["id"], "--output-dir", str(output))
    assert again.returncode == 0
    assert "present" in again.stdout and package.stat().st_mtime_ns == before, "a built cell is skipped on re-run"


def test_kernel_jobs_build_the_kernel_output_and_a_cell_job_pins_it(project):
    """A piece passes its TUs to the kernel output and leaves no package; kernels-link builds the
    kernel package and a cell job the flash-attn that pins it, both named as the plan names them."""
    env, output, good, _, _ = project
    recipe = Path(env["FAFORGE_ROOT"]) / "recipes" / "flash-attn" / "recipe.yaml"
    recipe.write_text(TINY_SPLIT_RECIPE)
    cost = load_build_cost(Path(env["FAFORGE_ROOT"]) / "variants" / "build-cost.yaml")
    parts = split_kernels(cost, "linux-64", good["cuda_archs"])
    assert len(parts) > 2, "the measured costs split a 4-CPU / 16 GB hosted runner's kernel package"
    piece = parts[0]

    result = run(env, "build", good["id"], "--part", piece.name, "--output-dir", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    log = (output / "logs" / f"{good['id'].replace('/', '-')}-{piece.name}.log").read_text()
    assert (
        f"stand-in kernels for CUDA {good['cuda']}, archs {good['cuda_archs']}, "
        f"philox offset {good['philox_offset_bits']} bits, "
        f"TUs [{' '.join(piece.tus)}]"
    ) in log
    assert not list(output.rglob("*.conda")), "a piece is not a package"
    assert sorted(p.name for p in output.iterdir()) == ["logs"], "nothing of the piece's scratch output is left"

    plan = json.loads(run(env, "plan", "--platform", "linux-64", "--json").stdout)
    cell_job = next(j for c in plan["flash_attn"] for j in c["include"] if j["cell"] == good["id"])
    link = run(env, "build", good["id"], "--part", "kernels-link", "--output-dir", str(output))
    assert link.returncode == 0, link.stdout + link.stderr
    link_log = (output / "logs" / f"{good['id'].replace('/', '-')}-kernels-link.log").read_text()
    assert "TUs []" in link_log, "the kernels-link job is a whole kernel build"
    [kernels] = output.glob("linux-64/*.conda")
    assert fnmatch(kernels.name, cell_job["kernel-package"]), (
        "the kernel package is the one the plan's cell job expects"
    )

    cell = run(
        env, "build", good["id"], "--part", "cell", "--output-dir", str(output), "--extra-channel", (output).as_uri()
    )
    assert cell.returncode == 0, cell.stdout + cell.stderr
    cell_log = (output / "logs" / f"{good['id'].replace('/', '-')}-cell.log").read_text()
    assert f"channels {output.as_uri()} " in cell_log, "the kernel packages' channel comes first"
    built = output / "linux-64" / cell_job["package"]
    assert built.is_file(), "the cell job makes the package the plan names"
    name, version, build = kernels.name.removesuffix(".conda").rsplit("-", 2)
    assert f"{name} =={version} {build}" in read_package(built).depends, "flash-attn pins exactly its kernel build"


def test_pieces_need_recipe_support_and_bad_parts_or_cells_are_bad_input(project):
    env, output, good, _, _ = project
    # The one-output stand-in (like today's recipe) builds its kernels inside each cell: a kernel job
    # or piece of the plan has nothing to do, says so, and builds nothing.
    pieces = [p.name for p in split_kernels(load_build_cost(), "linux-64", good["cuda_archs"])]
    for part in (pieces[0], "kernels-link"):
        in_cell = run(env, "build", good["id"], "--part", part, "--output-dir", str(output))
        assert (
            in_cell.returncode == 0
            and "has no libflash-attn-kernels output, so each cell's job compiles its kernels" in in_cell.stderr
        )
        assert "in-cell" in in_cell.stdout and not list(output.glob("*/libflash-attn-kernels-*.conda"))
    # A kernel output that ignores FAFORGE_BUILD_TUS would build the whole kernel package in a piece job.
    recipe = Path(env["FAFORGE_ROOT"]) / "recipes" / "flash-attn" / "recipe.yaml"
    recipe.write_text(
        TINY_SPLIT_RECIPE.replace(
            'FAFORGE_BUILD_TUS: ${{ env.get("FAFORGE_BUILD_TUS", default="") }}', 'UNRELATED: "1"'
        )
    )
    refused = run(env, "build", good["id"], "--part", pieces[0], "--output-dir", str(output))
    assert (
        refused.returncode == 2
        and "does not pass FAFORGE_BUILD_TUS" in refused.stderr
        and "Traceback" not in refused.stderr
    )
    unknown_part = run(env, "build", good["id"], "--part", "bwd-9of9", "--output-dir", str(output))
    assert unknown_part.returncode == 2 and "has no such piece" in unknown_part.stderr
    assert (
        f"its kernel package's pieces are {pieces[0]}" in unknown_part.stderr and "Traceback" not in unknown_part.stderr
    )
    unknown = run(env, "build", "linux-64/py399/torch9.9/cu999/abi1", "--output-dir", str(output))
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr


def test_a_whole_build_of_a_split_recipe_makes_the_kernel_package_once_then_each_cell(project):
    """`faforge build CELL...` (part all) as a plain rattler-build would: the kernel package of each kernel
    key first, once for all the cells that share it, then each cell's flash-attn against it; a rerun
    finds both present."""
    env, output, good, _, _ = project
    (Path(env["FAFORGE_ROOT"]) / "recipes" / "flash-attn" / "recipe.yaml").write_text(TINY_SPLIT_RECIPE)
    cells = json.loads(run(env, "matrix", "--platform", "linux-64", "--json").stdout)
    good = next(c for c in cells if c["id"] == good["id"])  # rendered from the split recipe
    sibling = next(
        c
        for c in cells
        if c["id"] != good["id"]
        and c["torch_source"] == good["torch_source"]
        and (c["cuda"], c["cuda_archs"], c["torch"]) == (good["cuda"], good["cuda_archs"], good["torch"])
    )
    result = run(env, "build", good["id"], sibling["id"], "--output-dir", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    parts = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("linux-")]
    assert parts == ["kernels", "cell", "cell"], result.stdout
    [kernels] = output.glob("linux-64/libflash-attn-kernels-*.conda")
    name, version, build = kernels.name.removesuffix(".conda").rsplit("-", 2)
    for cell in (good, sibling):
        package = output / "linux-64" / f"flash-attn-2.8.3.post2-{cell['build_string']}.conda"
        assert f"{name} =={version} {build}" in read_package(package).depends
    again = run(env, "build", good["id"], "--output-dir", str(output))
    assert again.returncode == 0 and [
        line.split()[2] for line in again.stdout.splitlines() if line.startswith("linux-")
    ] == ["present", "present"]

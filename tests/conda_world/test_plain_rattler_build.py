"""The worlds page's plain `rattler-build build` lines for the conda-forge world (linux-64, and the linux-aarch64
cross build from linux-64), run through py-rattler-build's CLI API (render with solve) against the conda
world, their `-c conda-forge` pointing at the stand-in. The cross cell cannot execute here, so solving
its build (linux-64) and host (linux-aarch64) environments is as far as it goes. A render does not build
the recipe's kernel output, which the flash-attn output's host pins exactly, so a channel holding that
kernel build's record comes first, as the output folder does in a real `rattler-build build`.

It also reproduces why CI sets CONDA_OVERRIDE_CUDA: every conda-forge CUDA pytorch depends on `__cuda`, which a
GPU-less runner has only when CONDA_OVERRIDE_CUDA is set, so without it the host environment cannot be solved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from faforge import paths
from faforge.channel.local import assemble, index
from faforge.matrix import load_matrix
from faforge.matrix.render import render_cells
from tests.matrix.test_readme_builds import documented_builds
from tests.support.docs import WORLDS, doc_text
from tests.support.standin_flash_attn import pinned_kernel_record

pytestmark = pytest.mark.slow

CELL_ID = "{target}/py312/torch2.11/cu130/abi1"


def cell_overrides(variant_file, cell_id: str) -> dict[str, str]:
    """The zipped values of one cell of a generated variant file (its header lists the cell ids in the
    zip's order), as `--variant KEY=VALUE` overrides pick it on the command line: read from the file,
    so the test follows every pin the generator changes (python spelling, compiler versions)."""
    text = variant_file.read_text()
    ids = [line[4:].strip() for line in text.splitlines() if line.startswith("#   ") and "/torch" in line]
    data = yaml.safe_load(text)
    at = ids.index(cell_id)
    return {key: data[key][at] for key in data["zip_keys"][0]}


RUN = textwrap.dedent("""
    import json, sys
    from rattler_build import cli_api
    args = json.loads(sys.argv[1])
    cli_api.build_recipes([args["recipe"]], variant_config=[args["variants"]], channel=args["channels"],
                          render_only=True, with_solve=True,
                          variant_overrides={k: [v] for k, v in args["cell"].items()},
                          output_dir=args["out"], build_platform="linux-64", target_platform=args["target"])
""")


def kernel_channel(target: str, folder):
    """A channel holding the kernel build the cell's flash-attn pins, as an earlier build of the recipe's
    kernel output leaves it (a render with solve does not build it; metadata only)."""
    matrix = load_matrix()
    cell = next(c for c in matrix.cells if c.id == CELL_ID.format(target=target))
    (rendered,) = render_cells([cell], matrix.recipe_path, matrix.variants_dir)
    assemble(pinned_kernel_record(rendered.run_requirements, target, cell.cuda), folder)
    index(folder)
    return folder.as_uri()


def plain_build(line, world, tmp_path, cuda_override):
    channels = [
        kernel_channel(line.target_platform, tmp_path / "kernels"),
        *(world.url(c) if c in world.channels else c for c in line.channel),
    ]
    args = {
        "recipe": str(paths.repo_root() / line.recipe / "recipe.yaml"),
        "variants": str(paths.repo_root() / line.variant_config),
        "channels": channels,
        "cell": cell_overrides(paths.repo_root() / line.variant_config, CELL_ID.format(target=line.target_platform)),
        "out": str(tmp_path / "out"),
        "target": line.target_platform,
    }
    env = {**os.environ, "CONDA_OVERRIDE_CUDA": cuda_override}
    return subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", RUN, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def readme_line(target_platform: str):
    lines = [
        args
        for w, args in documented_builds(doc_text(WORLDS, paths.repo_root()))
        if w == "conda-forge" and args.target_platform == target_platform
    ]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def conda_forge_line():
    return readme_line("linux-64")


@pytest.mark.parametrize("target", ["linux-64", "linux-aarch64"])
def test_readme_line_solves_build_and_host_with_cuda_override(target, world, tmp_path):
    line = readme_line(target)
    assert line.channel == ["conda-forge"]
    result = plain_build(line, world, tmp_path, "13.0")
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout)
    (output,) = [o for o in outputs if o["recipe"]["package"]["name"] == "flash-attn"]
    resolved = output["finalized_dependencies"]
    host = {p["name"]: (p["version"], p["subdir"]) for p in resolved["host"]["resolved"]}
    build = {p["name"]: (p["version"], p["subdir"]) for p in resolved["build"]["resolved"]}
    assert host["pytorch"][0] == "2.11.0" and host["python"][0].startswith("3.12") and host["cuda-version"][0] == "13.0"
    assert {subdir for _, subdir in host.values()} <= {target, "noarch"}
    assert {subdir for _, subdir in build.values()} <= {"linux-64", "noarch"}
    assert f"cuda-nvcc_{target}" in build and f"gxx_{target}" in build
    if target == "linux-aarch64":
        assert host["arm-variant"] == ("1.2.0", "noarch") and "cross-python_linux-aarch64" in build
        # The linux-64 build of cuda-nvcc_linux-aarch64 does not depend on cuda-nvcc-impl (cuda-nvcc-feedstock
        # recipe/meta.yaml: `cuda-nvcc-impl  # [target_platform == cross_target_platform]`), so nothing pulls it in.
        assert "cuda-nvcc-impl" not in build, sorted(build)


def test_without_cuda_override_a_gpu_less_runner_cannot_solve(conda_forge_line, world, tmp_path):
    result = plain_build(conda_forge_line, world, tmp_path, "")
    assert result.returncode != 0
    assert "Failed to resolve dependencies" in result.stderr or "__cuda" in result.stderr, result.stderr[-3000:]

"""Solver proof, no compile: real py-rattler solves against real file:// channels.

The channel lists, specs and strict priority are read from README.md and the installing page, as users get them.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from faforge.channel.local import solve
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN_4
from faforge.matrix import load_matrix
from faforge.matrix.render import render_cells
from tests.support.docs import INSTALLING, doc_text, marked_block
from tests.support.docs import README as README_PAGE
from tests.support.standin_channels import build_channels
from tests.support.tiers import slow

GPU_BOX = {"__glibc": "2.36", "__cuda": "13.0", "__linux": "6.1", "__unix": "0"}


@pytest.fixture(scope="module")
@slow("renders every cell and builds stand-in conda channels of them (3 s of CPU, once per worker)")
def channels(tmp_path_factory, repo):
    matrix = load_matrix(repo)
    rendered = render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir)
    return build_channels(tmp_path_factory.mktemp("channels"), rendered)


def readme_install_commands() -> list[tuple[list[str], list[str]]]:
    """(channels, specs) of every flash-attn `conda install` line of README.md and the installing page, each once
    (FlashAttention-4's are the conda world's: tests/fa4/test_documented_lines.py checks their form)."""
    out = []
    for line in dict.fromkeys(doc_text(README_PAGE).splitlines() + doc_text(INSTALLING).splitlines()):
        if line.startswith("conda install ") and f" {FLASH_ATTN_4.package} " not in line:
            words = shlex.split(line)[2:]
            chans = [words[i + 1] for i, w in enumerate(words) if w == "-c"]
            specs = [w for i, w in enumerate(words) if w != "-c" and (i == 0 or words[i - 1] != "-c")]
            out.append((chans, specs))
    return out


def readme_environment() -> dict:
    return yaml.safe_load(marked_block(INSTALLING, "environment.yml: conda-forge", "yaml"))


def local(channels, names):
    missing = [n for n in names if n not in channels]
    assert not missing, f"the docs name channels the test does not stand in: {missing}"
    return [channels[n].as_uri() for n in names]


def test_readme_has_one_install_line_per_world():
    commands = readme_install_commands()
    assert [c for c, _ in commands] == [
        ["faforge", "conda-forge"],
        ["faforge", "pytorch", "nvidia", "conda-forge"],
    ]


@pytest.mark.parametrize("platform", ["linux-64", "linux-aarch64"])
def test_conda_forge_torch_27_gets_the_torch27_build(channels, platform):
    names, specs = readme_install_commands()[0]
    assert specs == ["flash-attn", "pytorch=2.7"]
    solved = solve(local(channels, names), specs, platform, GPU_BOX)
    assert str(solved["pytorch"].version).startswith("2.7.")
    assert re.fullmatch(r"py312_torch2_7_cu\d+_cxx11abi1_h[0-9a-f]{7}_\d+", str(solved["flash-attn"].build))
    cuda_tag = str(solved["flash-attn"].build).split("_")[3].replace("cu", "cuda")
    assert str(solved["pytorch"].build).startswith(cuda_tag), "flash-attn and torch disagree on CUDA"
    assert solved["flash-attn"].channel.endswith("/faforge/") or "faforge" in str(solved["flash-attn"].channel)
    if platform == "linux-aarch64":
        assert str(solved["arm-variant"].build) == "sbsa"


def test_legacy_channel_gets_the_abi0_cu121_build(channels):
    names, specs = readme_install_commands()[1]
    assert specs == ["flash-attn", "pytorch=2.5.1", "pytorch-cuda=12.1"]
    solved = solve(local(channels, names), specs, "linux-64", GPU_BOX)
    assert re.fullmatch(r"py312_torch2_5_cu121_cxx11abi0_h[0-9a-f]{7}_\d+", str(solved["flash-attn"].build))
    assert str(solved["pytorch"].build) == "py3.12_cuda12.1_cudnn9.1.0_0"
    assert "pytorch" in str(solved["pytorch"].channel) and "conda-forge" not in str(solved["pytorch"].channel)
    assert str(solved["pytorch-mutex"].build) == "cuda"


def test_torch27_flash_attn_next_to_torch28_is_unsatisfiable(channels):
    names, _ = readme_install_commands()[0]
    with pytest.raises(FaforgeError) as info:
        solve(local(channels, names), ["flash-attn * *_torch2_7_*", "pytorch 2.8.*"], "linux-64", GPU_BOX)
    assert info.value.exit_code == 1
    # Control: each half alone solves, so the conflict is the pin, not a missing package.
    solve(local(channels, names), ["flash-attn * *_torch2_7_*"], "linux-64", GPU_BOX)
    solve(local(channels, names), ["flash-attn", "pytorch 2.8.*"], "linux-64", GPU_BOX)


def test_jetson_tegra_builds_are_kept_out(channels):
    names, _ = readme_install_commands()[0]
    solved = solve(local(channels, names), ["flash-attn * *_torch2_7_*"], "linux-aarch64", GPU_BOX)
    assert str(solved["arm-variant"].build) == "sbsa"
    with pytest.raises(FaforgeError):
        solve(local(channels, names), ["flash-attn * *_torch2_7_*", "arm-variant * tegra"], "linux-aarch64", GPU_BOX)


def test_legacy_flash_attn_cannot_land_on_conda_forge_torch(channels):
    names, _ = readme_install_commands()[0]
    with pytest.raises(FaforgeError):
        solve(local(channels, names), ["flash-attn * *_cxx11abi0_*", "pytorch=2.7"], "linux-64", GPU_BOX)


def test_readme_environment_yml_solves(channels):
    env = readme_environment()
    specs = [d for d in env["dependencies"] if isinstance(d, str)]
    solved = solve(local(channels, env["channels"]), specs, "linux-64", GPU_BOX)
    assert re.fullmatch(r"py312_torch2_7_cu129_cxx11abi1_h[0-9a-f]{7}_\d+", str(solved["flash-attn"].build))
    assert str(solved["cuda-version"].version) == "12.9"

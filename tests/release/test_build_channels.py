"""`faforge build` points torch worlds at mirrors (--channel-alias, FAFORGE_CHANNEL_ALIAS) and sets
CONDA_OVERRIDE_CUDA for its solves.

The real-build tests run py-rattler-build on a scratch checkout whose recipe is the tiny stand-in
(tests/support/tiny_recipe.py) with one host requirement, `cuda-probe`, that depends on `__cuda`
the way every conda-forge CUDA pytorch does (tests/fixtures/real_packages.yaml: `depends: [__cuda, ...]`).
It exists only in a local file:// channel, so a build that solves its host environment took that
channel through the alias and saw a `__cuda` on this GPU-less machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge import cli
from faforge.channel.local import PackageSpec, assemble, index
from faforge.errors import FaforgeError
from faforge.matrix import load_matrix
from faforge.release.build.steps import channels_for, parse_channel_aliases
from tests.support.tiny_recipe import TINY_RECIPE

REPO = Path(__file__).resolve().parents[2]
KNOWN = {"conda-forge", "pytorch", "nvidia"}


def cell(world: str):
    return next(c for c in reversed(load_matrix(REPO).cells) if c.world == world and c.platform == "linux-64")


def test_channels_for_replaces_only_aliased_names_and_keeps_priority_order():
    legacy, forge = cell("pytorch"), cell("conda-forge")
    aliases = {"conda-forge": "file:///srv/mirror/conda-forge", "nvidia": "https://proxy.example/nvidia"}
    assert channels_for(legacy, aliases) == [
        "pytorch",
        "https://proxy.example/nvidia",
        "file:///srv/mirror/conda-forge",
    ]
    assert channels_for(forge, aliases) == ["file:///srv/mirror/conda-forge"]
    assert channels_for(forge, {}) == ["conda-forge"]
    # A cell's job finds its kernel package in this run's folder or the publish channel, searched first.
    assert channels_for(forge, aliases, ["file:///run/kernels", "https://ch.example/faforge"]) == [
        "file:///run/kernels",
        "https://ch.example/faforge",
        "file:///srv/mirror/conda-forge",
    ]


def test_parse_channel_aliases_accepts_http_https_and_file_urls():
    entries = [
        "conda-forge=https://mirror.example/conda-forge",
        "pytorch=http://10.0.0.1:8080/pytorch",
        "nvidia=file:///srv/nvidia",
    ]
    assert parse_channel_aliases(entries, KNOWN) == {
        "conda-forge": "https://mirror.example/conda-forge",
        "pytorch": "http://10.0.0.1:8080/pytorch",
        "nvidia": "file:///srv/nvidia",
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "conda-forg=https://m.example/cf",
            "unknown channel name 'conda-forg' — name a channel of variants/releases.yaml: "
            "conda-forge, nvidia, pytorch",
        ),
        ("conda-forge", "expected NAME=URL"),
        ("=https://m.example/cf", "expected NAME=URL"),
        ("conda-forge=", "expected NAME=URL"),
        ("conda-forge=ftp://m.example/cf", "is not an http://, https:// or file:/// URL"),
        ("conda-forge=mirror/conda-forge", "is not an http://, https:// or file:/// URL"),
        ("conda-forge=file://relative/cf", "is not an http://, https:// or file:/// URL"),
        ("conda-forge=https:///no-host", "is not an http://, https:// or file:/// URL"),
    ],
)
def test_parse_channel_aliases_rejects_bad_entries(entry, message):
    with pytest.raises(FaforgeError) as raised:
        parse_channel_aliases([entry], KNOWN)
    assert message in raised.value.line()
    assert raised.value.hint, "every rejection says what to do"


def test_a_name_given_twice_is_an_error():
    with pytest.raises(FaforgeError, match="conda-forge is given twice") as raised:
        parse_channel_aliases(["conda-forge=https://a.example/cf", "conda-forge=https://b.example/cf"], KNOWN)
    assert "— keep one conda-forge=URL entry in --channel-alias" in raised.value.line()


def test_escape_sequences_in_an_alias_reach_the_terminal_escaped(monkeypatch, capsys, tmp_path):
    hostile = "conda-forge=\x1b[2J\x1b]0;owned\x07https://m.example/cf"
    monkeypatch.setenv("FAFORGE_CHANNEL_ALIAS", hostile)
    code = cli.main(["build", cell("conda-forge").id, "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "\x1b" not in err and "\x07" not in err, repr(err)
    assert "\\x1b[2J\\x1b]0;owned\\x07https://m.example/cf" in err and " — " in err, err


def faforge(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.parametrize(
    ("args", "env_value", "named"),
    [
        (
            ["--channel-alias", "pypi=https://m.example/pypi"],
            None,
            "--channel-alias pypi=https://m.example/pypi: unknown channel name 'pypi'",
        ),
        (
            [],
            "conda-forge=https://m.example/cf pytorch=gopher://m.example/pt",
            "FAFORGE_CHANNEL_ALIAS pytorch=gopher://m.example/pt: 'gopher://m.example/pt' is not",
        ),
    ],
)
def test_cli_rejects_a_bad_alias_with_one_line_before_building(tmp_path, args, env_value, named):
    env = {k: v for k, v in os.environ.items() if k != "FAFORGE_CHANNEL_ALIAS"}
    if env_value is not None:
        env["FAFORGE_CHANNEL_ALIAS"] = env_value
    result = faforge(env, "build", cell("conda-forge").id, "--output-dir", str(tmp_path / "out"), *args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and named in result.stderr, result.stderr
    assert not (tmp_path / "out").exists(), "nothing is built or created before the input is checked"


@pytest.fixture
def project(tmp_path):
    """Scratch checkout: unchanged variants/ (conda-forge world = channel `conda-forge`), tiny recipe
    with a host requirement that needs __cuda, and a local mirror channel holding it."""
    root = tmp_path / "project"
    for name in ("variants", "recipes"):
        shutil.copytree(REPO / name, root / name)
    recipe = TINY_RECIPE.replace("@FAIL@", "none").replace(
        "requirements:\n", "requirements:\n  host:\n    - cuda-probe\n"
    )
    (root / "recipes" / "flash-attn" / "recipe.yaml").write_text(recipe)
    mirror = tmp_path / "mirror-conda-forge"
    assemble(
        PackageSpec(name="cuda-probe", version="1.0", build="h0_0", subdir="linux-64", depends=("__cuda",)), mirror
    )
    index(mirror)
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_OVERRIDE_CUDA", "FAFORGE_CHANNEL_ALIAS")}
    env["FAFORGE_ROOT"] = str(root)
    return env, mirror, tmp_path / "output"


def test_build_takes_the_mirror_and_sets_conda_override_cuda_to_the_cells_cuda(project):
    env, mirror, output = project
    target = cell("conda-forge")
    result = faforge(
        env, "build", target.id, "--output-dir", str(output), "--channel-alias", f"conda-forge={mirror.as_uri()}"
    )
    log = (output / "logs" / (target.id.replace("/", "-") + ".log")).read_text()
    assert result.returncode == 0, result.stdout + result.stderr + log
    assert f"channels {mirror.as_uri()}\n" in log
    assert f"CONDA_OVERRIDE_CUDA={target.cuda} (unset, so faforge set it to the cell's CUDA" in log
    assert f"CONDA_OVERRIDE_CUDA={target.cuda}" in result.stderr, "the live progress says so too"
    assert f"__cuda={target.cuda}=0" in log, "rattler-build's solver saw the override"
    assert list((output / "linux-64").glob("flash-attn-*.conda"))


def test_the_environment_alias_works_and_a_callers_override_is_kept(project):
    """Control for the __cuda half: with CONDA_OVERRIDE_CUDA set empty by the caller (conda's "no
    CUDA driver"), faforge keeps it and the host environment does not solve."""
    env, mirror, output = project
    target = cell("conda-forge")
    env = {**env, "FAFORGE_CHANNEL_ALIAS": f"conda-forge={mirror.as_uri()}", "CONDA_OVERRIDE_CUDA": ""}
    result = faforge(env, "build", target.id, "--output-dir", str(output))
    log = (output / "logs" / (target.id.replace("/", "-") + ".log")).read_text()
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"channels {mirror.as_uri()}\n" in log
    assert "CONDA_OVERRIDE_CUDA= (set by the caller)" in log
    platform_lines = [line for line in log.splitlines() if "Platform: linux-64 [" in line]
    assert platform_lines and not any("__cuda" in line for line in platform_lines), log[-2000:]
    assert "Failed to resolve dependencies" in log

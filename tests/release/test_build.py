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
from pathlib import Path

import pytest

from faforge.channel.local import index
from faforge.matrix.releases import dump_releases, header_of, load_releases

REPO = Path(__file__).resolve().parents[2]
TINY_RECIPE = """\
schema_version: 1
context:
  torch_minor: ${{ (torch_version | split('.'))[:2] | join('_') }}
  cuda_tag: ${{ cuda_compiler_version | replace('.', '') }}
package:
  name: flash-attn
  version: "2.8.3.post2"
build:
  number: 0
  string: py${{ python | version_to_buildstring }}_torch${{ torch_minor }}_cu${{ cuda_tag }}_cxx11abi${{ cxx11_abi }}_h${{ hash }}_0
  script:
    - echo "stand-in build for torch ${{ torch_version }} (${{ torch_world }}), archs ${{ cuda_archs }}"
    - ${{ "exit 3" if python == "@FAIL@" else "true" }}
    - mkdir -p $PREFIX/share && echo ok > $PREFIX/share/flash-attn-standin.txt
requirements:
  run:
    - python ${{ python }}
"""


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    for name in ("variants", "recipes"):
        shutil.copytree(REPO / name, root / name)
    channel = tmp_path / "conda-forge-local"
    index(channel)
    path = root / "variants" / "releases.yaml"
    table = load_releases(path)
    worlds = {**table.worlds, "conda-forge": replace(table.worlds["conda-forge"], channels=(channel.as_uri(),))}
    path.write_text(dump_releases(replace(table, worlds=worlds), header_of(path.read_text())))
    env = dict(os.environ, FAFORGE_ROOT=str(root))
    cells = [c for c in json.loads(run(env, "matrix", "--platform", "linux-64", "--json").stdout) if c["torch_source"] == "conda-forge"]
    good, bad = cells[-1]["id"], next(c for c in reversed(cells) if c["python"] != cells[-1]["python"])
    (root / "recipes" / "flash-attn" / "recipe.yaml").write_text(TINY_RECIPE.replace("@FAIL@", bad["python"] + ".*"))
    rendered = {c["id"]: c for c in json.loads(run(env, "matrix", "--platform", "linux-64", "--json").stdout)}
    return env, tmp_path / "output", rendered[good], rendered[bad["id"]], channel


def run(env, *args):
    return subprocess.run([sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, timeout=900)


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


def test_pieces_need_recipe_support_and_unknown_cells_are_bad_input(project):
    env, output, good, _, _ = project
    piece = run(env, "build", good["id"], "--part", "bwd-1of2", "--output-dir", str(output))
    assert piece.returncode == 2 and "FAFORGE_BUILD_PART" in piece.stderr and "Traceback" not in piece.stderr
    unknown = run(env, "build", "linux-64/py399/torch9.9/cu999/abi1", "--output-dir", str(output))
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr

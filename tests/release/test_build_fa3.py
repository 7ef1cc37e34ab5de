"""`faforge build` of FlashAttention-3 packages through py-rattler-build, offline, on a
scratch checkout whose recipes/flash-attn-3 is a stand-in: the variant keys and build-string formula of the
real recipe, no compile. Its conda-forge world points at an empty local file:// channel. The real
recipe's render is covered by tests/release/test_plan.py (the plan's build strings are `faforge matrix
--fa3`'s) and its real build by tests/conda_world/test_fa3_in_world.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from faforge.release.package import read_package
from tests.release.test_build import scratch_checkout
from tests.support.tiers import slow

# recipes/flash-attn-3/recipe.yaml's package, build string and variant keys, with a one-line build that
# echoes what it was given; CUDA `@FAIL@` exits 3 (a failing package).
FA3_STAND_IN = """\
schema_version: 1
context:
  cuda_tag: ${{ cuda_compiler_version | replace('.', '') }}
  archs_tag: ${{ cuda_archs | replace(';', '_') | replace('+PTX', 'ptx') }}
package:
  name: flash-attn-3
  version: "3.0.0"
build:
  number: 0
  string: cu${{ cuda_tag }}_sm${{ archs_tag }}_faforge${{ "_trimmed" if fa3_disable else "" }}_h${{ hash }}_0
  script:
    - echo "stand-in flash-attn-3 for CUDA ${{ cuda_compiler_version }}, archs ${{ cuda_archs }}, headers of torch ${{ torch_version }}, serving ${{ fa3_served_torch }}"
    - ${{ "exit 3" if cuda_compiler_version == "@FAIL@" else "true" }}
    - mkdir -p $PREFIX/share && echo ok > $PREFIX/share/flash-attn-3-standin.txt
requirements:
  run:
    - pytorch >=${{ fa3_min_torch }} cuda*
    - cuda-version >=${{ cuda_compiler_version }}
"""  # noqa: E501 (a recipe script line in YAML cannot wrap)


def run(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, timeout=900
    )


@pytest.fixture
@slow("a scratch checkout whose builds run py-rattler-build (1 to 2 s of CPU a test)")
def project(tmp_path):
    root, channel, env = scratch_checkout(tmp_path)
    (root / "recipes" / "flash-attn-3" / "recipe.yaml").write_text(FA3_STAND_IN.replace("@FAIL@", "12.9"))
    env.pop("CONDA_OVERRIDE_CUDA", None)
    plan = json.loads(run(env, "plan", "--platform", "linux-64", "--json").stdout)
    jobs = {j["cell"]: j for chunk in plan["flash_attn_3"] for j in chunk["include"]}
    return env, tmp_path / "output", jobs, channel


def test_an_fa3_package_builds_whole_from_its_generated_variant_file_and_a_rerun_finds_it(project):
    env, output, jobs, channel = project
    good, bad = jobs["linux-64/cu130/sm80_90a"], jobs["linux-64/cu129/sm80_90a"]
    first = run(env, "build", bad["cell"], good["cell"], "--output-dir", str(output))
    assert first.returncode == 1, first.stdout + first.stderr
    rows = {line.split()[0]: line.split() for line in first.stdout.splitlines() if line.startswith("linux-")}
    assert rows[good["cell"]][1:3] == ["all", "built"] and rows[bad["cell"]][1:3] == ["all", "failed"]
    assert "1 of 2 ok, 1 failed" in first.stdout and "[2/2] flash-attn-3 linux-64/cu130/sm80_90a" in first.stderr
    package = output / "linux-64" / good["package"]
    assert package.is_file(), "the package the plan's job names, although the one before it failed"
    facts = read_package(package)
    assert (facts.name, facts.build, facts.package_id, facts.cuda, facts.cuda_archs, facts.torch) == (
        "flash-attn-3",
        good["build-string"],
        good["cell"],
        "13.0",
        "80;90a",
        "2.9",
    )
    log = (output / "logs" / "linux-64-cu130-sm80_90a.log").read_text()
    assert f"channels {channel.as_uri()}" in log, "the FA3 world's channels come from variants/releases.yaml"
    assert "CONDA_OVERRIDE_CUDA=13.0" in log
    assert (
        "stand-in flash-attn-3 for CUDA 13.0, archs 80;90a, headers of torch 2.13.0, serving 2.10,2.11,2.12,2.13" in log
    ), "the variant is the generated file's (variants/flash-attn-3-linux-64-conda-forge.yaml)"
    assert "exit 3" in (output / "logs" / "linux-64-cu129-sm80_90a.log").read_text()

    # The plan's chunk, as build-cells.yml's job runs it: the package is there already.
    chunk = output.parent / "chunk.json"
    chunk.write_text(json.dumps({"include": [good]}))
    before = package.stat().st_mtime_ns
    again = run(env, "build", "--plan", str(chunk), "--output-dir", str(output))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "present" in again.stdout and package.stat().st_mtime_ns == before


def test_an_unknown_id_or_a_part_of_an_fa3_package_is_bad_input_that_says_where_ids_are(project):
    env, output, jobs, _ = project
    known = next(iter(jobs))
    for args, says in (
        (
            [known.replace("sm80_90a", "sm90")],
            f"{known.replace('sm80_90a', 'sm90')}: no flash-attn-3 package of the matrix",
        ),
        ([f"flash-attn-3/{known}"], f"'flash-attn-3/{known}' is not a cell id"),
        ([known, "--part", "cell"], f"--part cell: {known} is a flash-attn-3 package without such a piece"),
    ):
        result = run(env, "build", *args, "--output-dir", str(output))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert says in result.stderr
        if "--part" not in args:
            assert "`faforge matrix --fa3`" in result.stderr and "`faforge plan`" in result.stderr
    assert not output.exists(), "nothing is built or created for a refused request"

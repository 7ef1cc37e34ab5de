"""`faforge test-gpu`, `faforge bench-gpu` and the suite under plain pytest on a GPU-less machine: skipped, exit 3."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource

from faforge.gpu.run_suite import RECIPE_SKIP_MARK, RECIPE_TEST_FILES
from tests.support.recipe_test_envs import recipe_test_site
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "tests" / "schemas"
TEST_GPU_SCHEMA = json.loads((SCHEMAS / "test-gpu.json").read_text())
BENCH_GPU_SCHEMA = json.loads((SCHEMAS / "bench-gpu.json").read_text())
REGISTRY = Registry().with_resources([("test-gpu.json", Resource.from_contents(TEST_GPU_SCHEMA))])


def faforge(*args: str, python: str = sys.executable, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "faforge", *args], capture_output=True, text=True, cwd=REPO, env=env)


def test_test_gpu_exits_3_with_the_reason_and_a_report(tmp_path):
    result = faforge("test-gpu", "--json", "--report-dir", str(tmp_path))
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    jsonschema.validate(summary, TEST_GPU_SCHEMA)
    assert summary["status"] == "skipped" and summary["reason"] == summary["gate"]["reason"]
    assert summary["counts"]["skipped"] == len(summary["tests"]) > 0
    assert {t["message"] for t in summary["tests"]} == {summary["reason"]}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "junit.xml").is_file() and "skipped" in (tmp_path / "pytest.log").read_text()


def test_test_gpu_text_output_ends_with_the_reason():
    result = faforge("test-gpu")
    assert result.returncode == 3
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"SKIPPED: torch is not importable .*|SKIPPED: no CUDA device visible to torch .*", last), last


def recipe_test_folder(root: Path) -> Path:
    """What a recipe's test section ships: RECIPE_TEST_FILES copied out of the checkout, nothing else of faforge."""
    for name in RECIPE_TEST_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "scripts" / name, root / name)
    return root


def test_recipe_test_files_cover_the_gpu_package():
    shipped = set(RECIPE_TEST_FILES)
    needed = {str(p.relative_to(REPO / "scripts")) for p in (REPO / "scripts/faforge/gpu").rglob("*.py")} - {
        "faforge/gpu/bench.py",
        "faforge/gpu/canary.py",
    }  # bench-gpu and the canary: not in a recipe test
    assert needed <= shipped, f"add {sorted(needed - shipped)} to RECIPE_TEST_FILES (and tell the recipe)"


@pytest.mark.slow  # a CUDA torch venv
def test_recipe_test_with_a_cuda_torch_and_no_device(tmp_path):
    """The recipe's test command in a bare folder, with the CUDA 13.0 torch a build machine would have and
    only the packages that recipe test installs (pytest, einops, pyelftools; no faforge): skipped, exit 0
    for the build, marked in the log."""
    try:
        env = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    folder = recipe_test_folder(tmp_path / "faforge_checker")
    command = [
        str(env.python),
        "-m",
        "faforge.gpu.run_suite",
        "--recipe-test",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    pythonpath = f"{folder}:{recipe_test_site(env.python, 'faforge.gpu.run_suite')}"
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": pythonpath})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert result.stdout.splitlines()[-1].startswith(RECIPE_SKIP_MARK)
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["exit_code"] == 3 and summary["reason"] == "no CUDA device visible to torch 2.14.1+cu130 (CUDA 13.0)"
    assert summary["counts"]["passed"] == 0 and summary["counts"]["skipped"] > 0


def test_pytest_shows_the_gpu_tests_as_skipped_with_the_reason():
    """`pytest -m gpu` in this repository collects the suite through tests/gpu/test_flash_attn_suite.py."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "-rs", "-p", "no:cacheprovider",
         "tests/gpu/test_flash_attn_suite.py"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    skipped = re.findall(r"^SKIPPED \[(\d+)\] \S+: (.+)$", result.stdout, re.MULTILINE)
    total = int(re.search(r"^=+ (\d+) skipped in ", result.stdout, re.MULTILINE).group(1))
    assert sum(int(count) for count, _ in skipped) == total > 0
    assert len({reason for _, reason in skipped}) == 1
    assert re.match(r"torch is not importable|no CUDA device visible", skipped[0][1])
    assert " passed" not in result.stdout and " failed" not in result.stdout


def test_bench_gpu_exits_3_with_the_reason():
    text = faforge("bench-gpu")
    assert text.returncode == 3 and text.stdout == ""
    assert text.stderr.startswith("SKIPPED: ")
    result = faforge("bench-gpu", "--json")
    assert result.returncode == 3
    report = json.loads(result.stdout)
    jsonschema.Draft202012Validator(BENCH_GPU_SCHEMA, registry=REGISTRY).validate(report)
    assert report["status"] == "skipped" and report["results"] == []


def test_bench_gpu_rejects_a_malformed_list():
    result = faforge("bench-gpu", "--seqlens", "512,2k")
    assert result.returncode == 2 and "'512,2k' is not a comma-separated list of integers" in result.stderr


def test_cli_starts_without_torch_or_rattler():
    """The GPU machine gets faforge with --no-deps: no py-rattler there (no room to carry it), torch only where
    needed. Every command module must import those lazily, or `faforge test-gpu` cannot even start there."""
    blocked = ("torch", "flash_attn", "rattler", "rattler_build")
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from faforge.cli import main\n"
        "sys.exit(main(['test-gpu', '--help']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "exit 0 all passed, 1 any failure, 3 no usable GPU" in result.stdout.replace("\n", " ")


def test_a_missing_dependency_is_exit_2_with_the_install_command():
    code = "import sys; sys.modules['yaml'] = None; from faforge.cli import main; sys.exit(main(['matrix']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("faforge matrix: error: the Python module 'yaml' is not importable")
    assert "-m pip install pyyaml" in result.stderr and "Traceback" not in result.stderr

"""The installing page's uv project (pip or uv), taken from the page itself and run by real uv:
`uv lock`, `uv add` and `uv sync`. flash-attn, its kernel wheel and flash-attn-3 come only from our index (its
`[tool.uv.sources]`), also when `uv add` drops the local label or the index has no FA3; torch stays what the
project pins. Only the index base URL is swapped for the loopback one, and requires-python for this Python's (the
tiny glue wheels are cp311). The indexes and the PyPI stand-in are test_install_lines_hold_torch's fixtures.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tomllib

from faforge.family import FLASH_ATTN, FLASH_ATTN_3, FLASH_ATTN_4
from faforge.release.pip_env import site_packages
from tests.pipindex.test_install_lines_hold_torch import base, glue_version, standin  # noqa: F401  (module fixtures)
from tests.support import tiny_wheels as tw
from tests.support.docs import INSTALLING, fenced_blocks
from tests.support.held_torch import UV, uv_env

pytestmark = pytest.mark.slow

DOC_INDEX = "https://faforge.github.io/wheels/torch2.14-cu130/"
FA4_PIN = f"{FLASH_ATTN_4.package}=="  # FlashAttention-4's project: tests/pipworld/test_fa4_lines.py locks it
PYPI = "https://pypi.org/simple"


@pytest.fixture(autouse=True)
def _uv():
    if not UV.is_file():
        pytest.skip("uv is not installed beside the test Python (a test extra: pip install -e '.[test]')")


def readme_project(index: str, *, sources: bool = True) -> str:
    """The installing page's pyproject.toml with `index` for ours (its pin follows the index's CUDA), for
    CPython 3.11."""
    blocks = [b for b in fenced_blocks(INSTALLING, "toml") if "[tool.uv.sources]" in b and FA4_PIN not in b]
    assert len(blocks) == 1, f"{INSTALLING}: {len(blocks)} ```toml blocks hold [tool.uv.sources]"
    text = blocks[0]
    assert (
        DOC_INDEX in text
        and 'requires-python = "==3.12.*"' in text
        and f'"{FLASH_ATTN.package}=={glue_version("2.14")}"' in text
    ), text
    cuda = re.search(r"-cu(\d+)/$", index)[1]
    text = (
        text.replace(DOC_INDEX, index)
        .replace('"==3.12.*"', '"==3.11.*"')
        .replace(glue_version("2.14"), glue_version("2.14", cuda))
    )
    return text if sources else text[: text.index("[tool.uv.sources]")]


def uv(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`uv ARGS` in the project: its own [tool.uv] read, no user uv.toml (an empty XDG_CONFIG_HOME)."""
    return subprocess.run(
        [str(UV), *args],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=900,
        check=False,
        env=uv_env(XDG_CONFIG_HOME=str(project / "no-user-config"), **env),
    )


def locked(project: Path) -> dict[str, dict]:
    return {p["name"]: p for p in tomllib.loads((project / "uv.lock").read_text())["package"]}


def project_of(tmp_path: Path, text: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


def test_the_readme_project_takes_flash_attn_its_kernel_and_fa3_from_our_index_only(base, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    ours = f"{base}torch2.14-cu130/"
    project = project_of(tmp_path, readme_project(ours))
    ran = uv(project, "lock")
    assert ran.returncode == 0, ran.stderr[-3000:]
    packages = locked(project)
    assert packages[FLASH_ATTN.package]["version"] == glue_version("2.14")
    for name in (FLASH_ATTN.package, FLASH_ATTN.kernel_package):
        assert packages[name]["source"] == {"registry": ours}, packages[name]
    assert packages["torch"]["source"] == {"registry": PYPI} and packages["torch"]["version"] == "2.14.1", packages[
        "torch"
    ]
    # `uv add flash-attn` drops the local label (a requirement PyPI's sdist meets too); the source keeps it ours.
    for args in (
        ("remove", "--no-sync", FLASH_ATTN.package),
        ("add", "--no-sync", FLASH_ATTN.package),
        ("add", "--no-sync", FLASH_ATTN_3.package),
    ):
        ran = uv(project, *args)
        assert ran.returncode == 0, f"uv {' '.join(args)}\n{ran.stderr[-3000:]}"
    dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"{FLASH_ATTN.package}>={tw.SDIST_VERSION}" in dependencies and "torch==2.14.1" in dependencies, dependencies
    packages = locked(project)
    for name in (FLASH_ATTN.package, FLASH_ATTN.kernel_package, FLASH_ATTN_3.package):
        assert packages[name]["source"] == {"registry": ours}, packages[name]
    assert packages[FLASH_ATTN.package]["version"] == glue_version("2.14") and packages["torch"]["version"] == "2.14.1"


@pytest.mark.parametrize("sources", [True, False], ids=["readme", "without-sources"])
def test_fa3_from_an_index_without_it_is_refused_not_taken_from_pypi(sources, base, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    """torch2.14-cu128 has no FA3. The documented project: uv finds no flash-attn-3 in our index and stops. Without its
    [tool.uv.sources], uv falls through to PyPI's empty flash-attn-3 0.0.0 (yanked, so refused unless pinned)."""
    project = project_of(tmp_path, readme_project(f"{base}torch2.14-cu128/", sources=sources))
    ran = uv(project, "add", "--no-sync", FLASH_ATTN_3.package)
    assert ran.returncode != 0, ran.stderr[-3000:]
    if sources:
        assert (
            f"{FLASH_ATTN_3.package} was not found in the package registry" in ran.stderr and "yanked" not in ran.stderr
        ), ran.stderr
    else:
        assert f"{FLASH_ATTN_3.package}==0.0.0 was yanked" in ran.stderr, ran.stderr


def test_uv_sync_installs_our_wheels_and_a_later_add_keeps_torch(base, standin, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    """`uv lock` and `uv sync` of the documented project into a venv (UV_PROJECT_ENVIRONMENT), PyPI replaced by
    the stand-in holding a tiny torch 2.14.1 (UV_DEFAULT_INDEX, as a mirror is configured); then `uv add
    flash-attn-3` syncs again and leaves torch's installed files as they were."""
    (tmp_path / "project").mkdir()
    project = project_of(tmp_path / "project", readme_project(f"{base}torch2.14-cu130/"))
    venv = tmp_path / "venv"
    env = {"UV_DEFAULT_INDEX": standin, "UV_PROJECT_ENVIRONMENT": str(venv)}
    for args in (("lock",), ("sync",)):
        ran = uv(project, *args, **env)
        assert ran.returncode == 0, f"uv {' '.join(args)}\n{ran.stderr[-3000:]}"
    dist_info = {p.name.split("-")[0]: p for p in site_packages(venv).glob("*.dist-info")}
    assert dist_info["torch"].name == "torch-2.14.1.dist-info" and locked(project)["torch"]["source"] == {
        "registry": standin
    }
    assert dist_info[FLASH_ATTN.dist_name].name == f"{FLASH_ATTN.dist_name}-{glue_version('2.14')}.dist-info", sorted(
        dist_info
    )
    assert FLASH_ATTN.kernel_package.replace("-", "_") in dist_info, sorted(dist_info)
    torch_files = {p: p.stat().st_ino for p in dist_info["torch"].iterdir()}
    ran = uv(project, "add", FLASH_ATTN_3.package, **env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f" + {FLASH_ATTN_3.package}==3.0.0+cu130.sm80.90a" in ran.stderr and " - torch" not in ran.stderr, ran.stderr
    assert {p: p.stat().st_ino for p in dist_info["torch"].iterdir()} == torch_files

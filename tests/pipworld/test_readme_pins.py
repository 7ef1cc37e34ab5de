"""The installing page's pins (pip or uv): its `requirements.txt` and its uv project's
`pyproject.toml`, taken from the page itself, run by real pip and real uv against the loopback index the
pip-world fixtures publish (tests/pipworld/conftest.py). Only the index base URL and the flash-attn version are
swapped (the page's are the real ones; these wheels are the tiny sdist's), and the project's Python is the
published glue's (3.11). PyPI is the default index, reached for real; the torch venvs are the cached ones, so
nothing downloads a torch (uv lock reads torch's metadata only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from faforge.family import FLASH_ATTN, FLASH_ATTN_4
from faforge.release.pip_env import clean_pip_env, site_packages
from tests.pipworld.conftest import ABI1, base_venv
from tests.pipworld.test_x86_64_cells import UV, assert_torch_untouched, run_line, uv_env
from tests.support.docs import INSTALLING, fenced_blocks

pytestmark = pytest.mark.slow

DOC_BASE = "https://faforge.github.io/wheels/"
FA4_PIN = f"{FLASH_ATTN_4.package}=="  # FlashAttention-4's blocks: tests/pipworld/test_fa4_lines.py runs them


def readme_block(language: str, holding: str) -> str:
    """The one fenced block of `language` on the installing page that holds `holding`."""
    blocks = [b for b in fenced_blocks(INSTALLING, language) if holding in b and FA4_PIN not in b]
    assert len(blocks) == 1, f"{INSTALLING}: {len(blocks)} ```{language} blocks hold {holding!r}"
    return blocks[0]


def adapted(text: str, base: str, version: str) -> str:
    """The documented text with our loopback index and the published glue's version in place of the documented ones."""
    pin = re.search(rf"{FLASH_ATTN.package}==([^\s\"\]]+)", text)
    assert DOC_BASE + ABI1.index + "/" in text and pin and pin[1].endswith("+torch2.14.cu130.abi1"), text
    return text.replace(DOC_BASE, base).replace(pin[1], version)


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_the_readme_requirements_file_installs_our_wheels_beside_the_kept_torch(
    installer, published, static_base, tmp_path, venv_of
):
    if installer == "uv" and not UV.is_file():
        pytest.skip(f"uv is not installed beside {sys.executable} (a test extra: pip install -e '.[test]')")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        adapted(readme_block("text", "--only-binary flash-attn\ntorch=="), static_base, published.versions["abi1"])
    )
    base = base_venv(ABI1.torch, ABI1.python)
    with venv_of(base.prefix) as prefix:
        python = prefix / "bin" / "python"
        line = (
            f"{python} -m pip install --disable-pip-version-check -r {requirements}"
            if installer == "pip"
            else f"{UV} pip install --python {python} -r {requirements}"
        )
        ran = run_line(line, installer)
        assert ran.returncode == 0, f"$ {line}\n{ran.output[-4000:]}"
        installed = ran.installed(installer)
        assert installed.get(FLASH_ATTN.package) == published.versions["abi1"], installed
        assert FLASH_ATTN.kernel_package in installed and ran.removed() == [], ran.output[-3000:]
        assert_torch_untouched(prefix, base)
        imported = subprocess.run(
            [str(python), "-I", "-c", f"import {FLASH_ATTN.module}, flash_attn_2_cuda"],
            capture_output=True,
            text=True,
            env=clean_pip_env(),
            timeout=300,
            check=False,
        )
        assert imported.returncode == 0, imported.stderr[-3000:]
        assert (site_packages(prefix) / FLASH_ATTN.module).is_dir()


def test_the_readme_uv_project_locks_flash_attn_from_our_index_and_torch_from_pypi(published, static_base, tmp_path):
    """`uv lock` of the documented project: flash-attn and its kernel wheel from our index (uv's first-index strategy),
    torch and einops from PyPI; the lock holds exactly the published files."""
    if not UV.is_file():
        pytest.skip(f"uv is not installed beside {sys.executable} (a test extra: pip install -e '.[test]')")
    project = adapted(readme_block("toml", "[[tool.uv.index]]"), static_base, published.versions["abi1"])
    assert 'requires-python = "==3.12.*"' in project
    (tmp_path / "pyproject.toml").write_text(
        project.replace('"==3.12.*"', f'"=={ABI1.python}.*"')
    )  # the published glue is cp311
    # The project's own [tool.uv] is configuration that UV_NO_CONFIG would drop (uv then asks PyPI alone for
    # flash-attn); the user's uv.toml stays out through an empty XDG_CONFIG_HOME instead.
    env = {
        **{k: v for k, v in uv_env().items() if k != "UV_NO_CONFIG"},
        "XDG_CONFIG_HOME": str(tmp_path / "no-user-config"),
    }
    result = subprocess.run(
        [str(UV), "lock"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    packages = {p["name"]: p for p in tomllib.loads((tmp_path / "uv.lock").read_text())["package"]}
    ours = f"{static_base}{ABI1.index}/"
    for name in (FLASH_ATTN.package, FLASH_ATTN.kernel_package):
        assert packages[name]["source"] == {"registry": ours}, packages[name]
        assert {Path(w["url"]).name.replace("%2B", "+") for w in packages[name]["wheels"]} <= {
            w.name for w in published.of("abi1")
        }
    assert packages[FLASH_ATTN.package]["version"] == published.versions["abi1"]
    for name in ("torch", "einops"):
        assert packages[name]["source"] == {"registry": "https://pypi.org/simple"}, packages[name]
    assert packages["torch"]["version"] == ABI1.torch

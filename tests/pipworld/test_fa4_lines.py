"""Acceptance (the pip world, FlashAttention-4): real pip and real uv run the page's lines of a known-good set against
a loopback wheel index and real PyPI, beside a real PyPI torch that they must leave untouched.

Upstream's real b40 wheel (PyPI, sha256 of the data file's release row) is repacked by `faforge wheel fa4`'s packer
for every set and published with faforge's publish layer (faforge.pipindex.publish) into one index root, beside tiny
stand-ins of the flash-attn glue wheels of the same indexes (the torch-range rule places a wheel in the indexes the
glue wheels make). Each line runs in a hardlink copy of the cached venv of PyPI's torch of its set (2.14.1 with
CPython 3.11, 2.11.0 with CPython 3.12; CUDA 13.0); the set's packages come from real PyPI (the installers' caches
live in the test cache, so the 200 MB of cutlass-dsl wheels download once per machine). The import runs on this CPU
machine: no driver is needed for it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from faforge.families.flash_attn_4 import page, sets
from faforge.families.flash_attn_4.lines import wheel_version
from faforge.families.flash_attn_4.wheel import repack_fa4_wheel
from faforge.family import FLASH_ATTN, FLASH_ATTN_4
from faforge.matrix import load_matrix
from faforge.pipindex.publish import publish_wheels
from faforge.pipwheel.facts import read_wheel, wheel_contents
from faforge.release.pip_env import clean_pip_env, site_packages
from tests.pipworld.conftest import base_venv
from tests.pipworld.test_x86_64_cells import UV, Ran, assert_torch_untouched, uv_env
from tests.support import tiny_wheels
from tests.support.cache import cache_dir
from tests.support.docs import INSTALLING, fenced_blocks
from tests.support.fa4_upstream import upstream_wheel
from tests.support.pip_index_server import requests, serve_index

pytestmark = pytest.mark.slow

DATA = sets.load()
# (torch minor, PyPI's torch, CPython) of the cached base venvs (tests/pipworld/conftest.py: base_venv), one per set
TORCHES = (("2.14", "2.14.1", "3.11"), ("2.11", "2.11.0", "3.12"))
TORCH, PYTHON = TORCHES[0][1:]
SET = DATA.set_for("2.14", "13.0")
FA4 = canonicalize_name(FLASH_ATTN_4.package)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """The index root, every set's FA4 wheel published beside stand-in glue wheels, served on loopback."""
    work, root = tmp_path_factory.mktemp("fa4-wheels"), tmp_path_factory.mktemp("fa4-index")
    built = {s.id: repack_fa4_wheel(upstream_wheel(), torch=s.torch, cuda=s.cuda, out_dir=work) for s in DATA.sets}
    glues = [tiny_wheels.build_wheel(tiny_wheels.glue(s.torch, python="311", pin_torch=True), work) for s in DATA.sets]
    wheels = [read_wheel(p) for p in [*glues, tiny_wheels.build_wheel(tiny_wheels.kernel(), work)]]
    published = publish_wheels([*wheels, *(b.facts for b in built.values())], root, dry_run=False, force=False)
    placed = {o.wheel.filename: o.indexes for o in published.outcomes}
    assert {placed[b.path.name] for b in built.values()} == {(i,) for i in built}, placed
    checked = subprocess.run(
        [sys.executable, "-m", "faforge", "index", "--pip", "--check", str(root)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert all(
        f"{i}: {FLASH_ATTN.package} (1 files), {FLASH_ATTN_4.package} (1 files)" in checked.stdout for i in built
    )
    log = tmp_path_factory.mktemp("log") / "requests.jsonl"
    with serve_index(root, log) as url:
        yield SimpleNamespace(url=url, log=log, built=built)


def page_entry(url: str, monkeypatch, known: sets.KnownGoodSet = SET, torch: str = TORCH) -> dict:
    """The page's entry of the set, its lines naming the loopback index (FAFORGE_PIP_INDEX, as a deployment sets it)."""
    monkeypatch.setenv("FAFORGE_PIP_INDEX", url)
    [entry] = [e for e in page.entries([], "https://example.org/ch", load_matrix().table) if e["id"] == known.id]
    assert entry["torch"] == torch and entry["wheel_version"] == wheel_version(known)
    return entry


def run(line: str, installer: str) -> tuple[Ran, float]:
    env = uv_env() if installer == "uv" else {**clean_pip_env(), "PIP_CACHE_DIR": str(cache_dir("pip-fa4"))}
    started = time.monotonic()
    result = subprocess.run(shlex.split(line), capture_output=True, text=True, env=env, timeout=1800, check=False)
    return Ran(line, result.returncode, result.stdout + result.stderr), time.monotonic() - started


def for_venv(line: str, installer: str, python: Path) -> str:
    """The page's line as a user runs it in that venv: its python for pip, `--python` for uv."""
    if installer == "pip":
        return line.replace("python -m pip", f"{python} -m pip", 1)
    return line.replace("uv pip install", f"{UV} pip install --python {python}", 1)


def distributions(python: Path) -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    out = subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, env=clean_pip_env(), check=True
    )
    return {canonicalize_name(k): v for k, v in json.loads(out.stdout).items()}


def need_uv(installer: str) -> None:
    if installer == "uv" and not UV.is_file():
        pytest.skip(f"uv is not installed beside {sys.executable} (a test extra: pip install -e '.[test]')")


@pytest.mark.parametrize(("minor", "torch", "cpython"), TORCHES, ids=[f"torch{t[0]}" for t in TORCHES])
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_the_page_line_installs_our_fa4_and_exactly_its_set_beside_the_kept_torch(
    installer, minor, torch, cpython, index, venv_of, monkeypatch, capsys
):
    need_uv(installer)
    known = DATA.set_for(minor, "13.0")
    entry = page_entry(index.url, monkeypatch, known, torch)
    base = base_venv(torch, cpython)
    with venv_of(base.prefix) as prefix:
        python = prefix / "bin" / "python"
        before = distributions(python)
        line = for_venv(entry["pip_install" if installer == "pip" else "uv_install"], installer, python)
        ran, seconds = run(line, installer)
        assert ran.returncode == 0, f"$ {line}\n{ran.output[-4000:]}"
        after = distributions(python)
        assert after[FA4] == entry["wheel_version"], ran.output[-3000:]
        for name, version in known.packages.items():
            pin = SpecifierSet(f"=={version}" if name in DATA.exact else f">={version}")
            assert after.get(name) is not None and after[name] in pin, (name, after.get(name), ran.output[-3000:])
        changed = {n for n in before if before[n] != after.get(n)}
        assert changed <= set(known.packages), f"only packages of the set may change: {changed}"
        assert after["torch"] == before["torch"] == torch
        assert_torch_untouched(prefix, base)
        wheel = index.built[known.id].path
        for member, data in wheel_contents(wheel).items():
            if ".dist-info/" not in member:
                assert (site_packages(prefix) / member).read_bytes() == data, f"{member} is not {wheel.name}'s"
        assert not (site_packages(prefix) / "flash_attn" / "__init__.py").exists(), "FA4 ships no flash_attn/__init__"
        probe = (
            "import importlib.metadata as m, flash_attn, flash_attn.cute as c; "
            f"print(m.version({FLASH_ATTN_4.package!r}), c.__version__, list(flash_attn.__path__))"
        )
        imported = subprocess.run(
            [str(python), "-I", "-c", probe], capture_output=True, text=True, env=clean_pip_env(), timeout=600
        )
        assert imported.returncode == 0, imported.stderr[-3000:]
        version, cute_version, _ = imported.stdout.split(maxsplit=2)
        assert (version, cute_version) == (entry["wheel_version"], "0.0.0"), imported.stdout
    fetched = [r["path"] for r in requests(index.log) if r["path"].endswith(".whl")]
    assert any(p.endswith(wheel.name) for p in fetched), fetched
    with capsys.disabled():
        print(f"\nfa4 {installer} {known.id}: {seconds:.1f} s, changed beside torch: {sorted(changed)}\n  $ {line}")


def test_uv_without_the_pin_takes_flash_attn_4_from_our_index_only(index, venv_of, monkeypatch):
    """A user who drops the pin: uv's first-index strategy still never reads PyPI's flash-attn-4 (b3..b40, yanked
    0.0.1), because our index, named first, has the project."""
    need_uv("uv")
    entry = page_entry(index.url, monkeypatch)
    base = base_venv(TORCH, PYTHON)
    with venv_of(base.prefix) as prefix:
        line = (
            f"{UV} pip install --dry-run --python {prefix / 'bin' / 'python'} --extra-index-url {entry['index_url']} "
        )
        ran, _ = run(line + f"torch=={TORCH} {FLASH_ATTN_4.package}", "uv")
        assert ran.returncode == 0, ran.output[-3000:]
        assert f" + {FLASH_ATTN_4.package}=={entry['wheel_version']}" in ran.output, ran.output[-3000:]
        public = SET.version
        ran, _ = run(line + f"torch=={TORCH} {FLASH_ATTN_4.package}=={public}", "uv")
        assert f" + {FLASH_ATTN_4.package}=={entry['wheel_version']}" in ran.output, ran.output[-3000:]


def test_flash_attn_and_flash_attn_4_share_flash_attn_and_outlive_each_others_uninstall(index, venv_of, monkeypatch):
    """pip installs a flash-attn glue (its stand-in: flash_attn/__init__.py, no flash_attn/cute/) and FA4 side by side;
    `import flash_attn` is then flash-attn's package and flash_attn.cute FA4's; uninstalling either leaves the other
    whole (pip removes only the files of its RECORD)."""
    entry = page_entry(index.url, monkeypatch)
    glue = tiny_wheels.glue(SET.torch, python="311", pin_torch=True)
    base = base_venv(TORCH, PYTHON)
    with venv_of(base.prefix) as prefix:
        python = prefix / "bin" / "python"
        fa2 = f"{FLASH_ATTN.package}=={glue.version}"
        line = for_venv(entry["pip_install"], "pip", python) + f" --only-binary {FLASH_ATTN.package} {fa2}"
        ran, _ = run(line, "pip")
        assert ran.returncode == 0, f"$ {line}\n{ran.output[-4000:]}"
        probe = (
            "import importlib.metadata as m, flash_attn, flash_attn.cute as c; "
            f"print(m.version({FLASH_ATTN.package!r}), m.version({FLASH_ATTN_4.package!r}), "
            "flash_attn.__file__, c.__file__)"
        )
        both = imported(python, probe)
        assert both.split()[:2] == [glue.version, entry["wheel_version"]], both
        site = site_packages(prefix)
        assert both.split()[2:] == [str(site / "flash_attn/__init__.py"), str(site / "flash_attn/cute/__init__.py")]
        cute = sorted(p.relative_to(site) for p in (site / "flash_attn" / "cute").rglob("*.py"))
        uninstall(python, FLASH_ATTN.package)
        assert sorted(p.relative_to(site) for p in (site / "flash_attn" / "cute").rglob("*.py")) == cute
        assert "flash_attn" in imported(python, "import flash_attn.cute, flash_attn; print(flash_attn.__path__)")
        ran, _ = run(line, "pip")
        assert ran.returncode == 0, ran.output[-3000:]
        uninstall(python, FLASH_ATTN_4.package)
        assert not (site / "flash_attn" / "cute").exists() and (site / "flash_attn" / "__init__.py").is_file()
        assert imported(python, f"import importlib.metadata as m, flash_attn; print(m.version({FLASH_ATTN.package!r}))")


def imported(python: Path, code: str) -> str:
    result = subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, env=clean_pip_env(), timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def uninstall(python: Path, project: str) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "uninstall", "-y", project], capture_output=True, text=True, env=clean_pip_env()
    )
    assert result.returncode == 0 and f"Successfully uninstalled {project}" in result.stdout, result.stdout


def test_the_documented_uv_project_locks_fa4_from_our_index_and_its_set_from_pypi(index, tmp_path):
    """`uv lock` of the installing page's FA4 project (only the index URL swapped for the loopback one): flash-attn-4
    from our index alone, its version our wheel's, every package of the set at its version from PyPI, torch kept at
    the project's pin."""
    need_uv("uv")
    [block] = [b for b in fenced_blocks(INSTALLING, "toml") if f'"{FLASH_ATTN_4.package}==' in b]
    ours = f"{index.url}{SET.id}/"
    assert f"https://faforge.github.io/wheels/{SET.id}/" in block, block
    assert 'requires-python = "==3.12.*"' in block, block
    project = block.replace(f"https://faforge.github.io/wheels/{SET.id}/", ours)
    (tmp_path / "pyproject.toml").write_text(project.replace('"==3.12.*"', '"==3.11.*"'))  # this machine's CPython
    # The project's own [tool.uv] is configuration that UV_NO_CONFIG would drop; the user's stays out instead.
    env = {**{k: v for k, v in uv_env().items() if k != "UV_NO_CONFIG"}, "XDG_CONFIG_HOME": str(tmp_path / "none")}
    result = subprocess.run([str(UV), "lock"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    packages = {p["name"]: p for p in tomllib.loads((tmp_path / "uv.lock").read_text())["package"]}
    assert packages[FLASH_ATTN_4.package]["source"] == {"registry": ours}
    assert packages[FLASH_ATTN_4.package]["version"] == wheel_version(SET)
    assert packages["torch"]["version"] == TORCH
    for name, version in SET.packages.items():
        assert packages[name]["source"] == {"registry": "https://pypi.org/simple"}, packages[name]
        if name in DATA.exact:
            assert packages[name]["version"] == version, (name, packages[name]["version"])

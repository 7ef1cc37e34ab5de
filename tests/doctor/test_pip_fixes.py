"""The fixes for environments pip or uv installs into, planned against the real matrix's pip cells: the exact
pip and uv lines of the cell that matches (its index URL under FAFORGE_PIP_INDEX), the plain reason and the
nearest cells where none does, and never a conda line. The environments are facts as the probe reports them
(the real-venv acceptance test, test_pip_fix_real.py, runs the printed lines)."""

from __future__ import annotations

import pytest

from faforge.doctor.examine import situation_from
from faforge.doctor.facts import (
    Distribution,
    EnvFacts,
    ImportOutcome,
    ProbeError,
    PythonFacts,
    SystemFacts,
    TorchRuntime,
)
from faforge.doctor.fixes import plan
from faforge.doctor.installs import environment_kind
from faforge.doctor.situation import ERROR, Problem
from faforge.errors import FaforgeError
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.pipindex import instructions

BASE = "http://127.0.0.1:8000/wheels"
PY = "/home/u/venv/bin/python"


@pytest.fixture(autouse=True)
def pip_index(monkeypatch):
    monkeypatch.setenv("FAFORGE_PIP_INDEX", BASE + "/")  # a trailing slash is one


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def facts(
    *,
    torch: str | None = "2.14.1",
    runtime: str | None = "2.14.1+cu130",
    cuda: str | None = "13.0",
    abi: int | None = 1,
    python: str = "3.11.9",
    machine: str = "x86_64",
    venv: dict | None = None,
    pip: bool = True,
    flash: str | None = "2.3.3",
    torch_installer: str = "pip",
    externally_managed: bool = False,
    imported: bool = True,
) -> EnvFacts:
    site = f"/home/u/venv/lib/python{python[:4]}/site-packages"
    dists = []
    if torch:
        dists.append(Distribution("torch", torch, f"{site}/torch-{torch}.dist-info", site, torch_installer, None, cuda))
    if flash:
        dists.append(Distribution("flash-attn", flash, f"{site}/flash_attn-{flash}.dist-info", site, "pip", None))
    error = (
        ProbeError("ImportError", "undefined symbol: _ZN3c104cuda9SetDeviceEi")
        if flash
        else ProbeError("ModuleNotFoundError", "x")
    )
    return EnvFacts(
        python=PythonFacts(
            PY,
            python,
            "cpython",
            None,
            None,
            "/home/u/venv",
            externally_managed,
            venv if venv is not None else ({} if not externally_managed else None),
            pip,
        ),
        system=SystemFacts("Linux", machine, "2.36", ()),
        site_dirs=(site,),
        conda=None,
        distributions=tuple(dists),
        torch_package=f"{site}/torch" if torch else None,
        extension=None,
        extension_files=(),
        torch=TorchRuntime(
            imported and torch is not None,
            runtime if imported else None,
            cuda if imported else None,
            abi if imported else None,
        ),
        import_outcome=ImportOutcome(True, False, error),
        gpus=(),
        nvidia_smi="not found",
    )


def fixes_for(matrix, f: EnvFacts, *kinds: str) -> list[dict]:
    s = situation_from(f)
    problems = [Problem(k, ERROR, k) for k in kinds]
    return plan(s, problems, matrix, [], pip_builds(matrix, f.system.platform))


def cell_index(index_name: str) -> str:
    return f"{BASE}/{index_name}/"


def test_a_pip_venv_gets_the_pip_line_of_its_cell(matrix):
    [fix] = fixes_for(matrix, facts(), "signature-drift")
    url = cell_index("torch2.14-cu130")
    assert (fix.kind, fix.cell, fix.index_url) == ("pip-install", "pypi/linux-64/py311/torch2.14/cu130/abi1", url)
    assert fix.commands == (
        f"{PY} -m pip uninstall -y flash-attn",
        f"{PY} -m pip install --extra-index-url {url} --only-binary flash-attn torch==2.14.1 "
        "flash-attn==2.8.3.post2+torch2.14.cu130.abi1",
    )
    assert fix.notes[0] == (
        f"or with uv: uv pip install --python {PY} --reinstall-package flash-attn --extra-index-url {url} "
        "--only-binary flash-attn torch==2.14.1 flash-attn==2.8.3.post2+torch2.14.cu130.abi1"
    )
    assert fix.resolves == ("signature-drift",)


@pytest.mark.parametrize("how", ["pyvenv.cfg", "INSTALLER"])
def test_a_uv_venv_gets_the_uv_line(matrix, how):
    f = facts(venv={"uv": "0.13.9"}, pip=False) if how == "pyvenv.cfg" else facts(torch_installer="uv", pip=False)
    assert environment_kind(f) == "uv-venv"
    [fix] = fixes_for(matrix, f, "cxx11-abi-mismatch")
    url = cell_index("torch2.14-cu130")
    assert fix.kind == "uv-install" and fix.index_url == url
    assert fix.commands == (
        (
            f"uv pip install --python {PY} --reinstall-package flash-attn --extra-index-url {url} "
            "--only-binary flash-attn "
            "torch==2.14.1 flash-attn==2.8.3.post2+torch2.14.cu130.abi1"
        ),
    )


def test_the_pin_keeps_a_torch_of_pytorchs_own_index(matrix):
    """torch 2.14.1+cu130 from download.pytorch.org/whl/cu130 is the same build: its cell, pinned by release
    (==2.14.1 is met by the installed 2.14.1+cu130, PEP 440)."""
    [fix] = fixes_for(matrix, facts(torch="2.14.1+cu130", flash=None, pip=False), "flash-attn-missing")
    assert fix.commands[0] == f"{PY} -m ensurepip", "a venv made --without-pip gets pip first"
    assert fix.commands[1].endswith(" torch==2.14.1 flash-attn==2.8.3.post2+torch2.14.cu130.abi1")
    assert len(fix.commands) == 2, "nothing to uninstall"


@pytest.mark.parametrize(
    ("torch", "runtime", "cuda", "abi", "python", "machine", "cell"),
    [
        ("2.5.1", "2.5.1+cu124", "12.4", 0, "3.12.3", "x86_64", "pypi/linux-64/py312/torch2.5/cu124/abi0"),
        ("2.11.0", "2.11.0+cu130", "13.0", 1, "3.12.3", "aarch64", "pypi/linux-aarch64/py312/torch2.11/cu130/abi1"),
        ("2.15.0", "2.15.0+cu132", "13.2", 1, "3.13.1", "x86_64", "pypi/linux-64/py313/torch2.15/cu132/abi1"),
    ],
)
def test_each_torch_minor_cuda_abi_python_and_platform_has_its_cell(
    matrix, torch, runtime, cuda, abi, python, machine, cell
):
    [fix] = fixes_for(
        matrix,
        facts(torch=torch, runtime=runtime, cuda=cuda, abi=abi, python=python, machine=machine),
        "signature-drift",
    )
    minor, tag = cell.split("/")[3], cell.split("/")[4]
    assert fix.cell == cell and fix.index_url == cell_index(f"{minor}-{tag}")
    assert fix.commands[-1].endswith(f" torch=={torch} flash-attn==2.8.3.post2+{minor}.{tag}.abi{abi}")


@pytest.mark.parametrize(
    ("torch", "runtime", "cuda", "reason"),
    [
        (
            "2.14.1+cu126",
            "2.14.1+cu126",
            "12.6",
            "pypi/linux-64/py311/torch2.14/cu126/abi1: pypi's torch 2.14 for linux-64 is built for CUDA 13.0",
        ),
        (
            "2.16.0",
            "2.16.0+cu132",
            "13.2",
            "pypi/linux-64/py311/torch2.16/cu132/abi1: pypi has no CUDA build of torch 2.16 for linux-64",
        ),
        (
            "2.3.1",
            "2.3.1+cu121",
            "12.1",
            "pypi/linux-64/py311/torch2.3/cu121/abi1: pypi has no CUDA build of torch 2.3 for linux-64",
        ),
    ],
)
def test_no_cell_says_why_and_offers_the_nearest_and_a_build(matrix, torch, runtime, cuda, reason):
    fixes = fixes_for(matrix, facts(torch=torch, runtime=runtime, cuda=cuda), "signature-drift")
    assert [f.kind for f in fixes] == ["no-matching-cell", "local-build"]
    missing, build = fixes
    assert missing.title.startswith(f"faforge's wheel index has no wheel for this environment ({reason}")
    assert len(missing.notes) == 3 and all(
        n.startswith("nearest: pypi/linux-64/py311/") and " -m pip install --extra-index-url " in n
        for n in missing.notes
    )
    assert build.commands[0] == f"{PY} -m pip uninstall -y flash-attn"
    words = " ".join(c for f in fixes for c in (*f.commands, *f.notes, f.title))
    assert "conda" not in words, "never a conda line for a pip venv"


@pytest.mark.parametrize(
    ("torch", "runtime", "cuda"), [("2.14.1+cu126", "2.14.1+cu126", "12.6"), ("2.16.0", "2.16.0+cu132", "13.2")]
)
def test_a_nearest_cells_line_never_changes_torch_by_itself(matrix, torch, runtime, cuda):
    """Each nearest cell's install line holds the cell's torch (torch==X); the torch change it needs is a command of its
    own before it, `--force-reinstall torch==X` (a torch of the same release but another CUDA would satisfy the pin)."""
    [missing, _] = fixes_for(matrix, facts(torch=torch, runtime=runtime, cuda=cuda), "signature-drift")
    for note in missing.notes:
        cell_torch = note.split("PyPI's torch ", 1)[1].split(",", 1)[0]
        replace = f"{PY} -m pip install --force-reinstall torch=={cell_torch}"
        line = note.rsplit("then: ", 1)[-1]
        assert f"first replace this torch {torch}: {replace}; then: " in note, note
        assert (
            line.startswith(f"{PY} -m pip install --extra-index-url ") and f" torch=={cell_torch} flash-attn==" in line
        ), note


def test_a_cpu_torch_is_replaced_then_its_cell_installed(matrix):
    fixes = fixes_for(matrix, facts(torch="2.13.0+cpu", runtime="2.13.0+cpu", cuda=None), "cpu-only-torch")
    assert [f.kind for f in fixes] == ["pip", "pip-install"]
    assert fixes[0].commands == (f"{PY} -m pip install --force-reinstall torch==2.13.0",)
    assert fixes[1].cell == "pypi/linux-64/py311/torch2.13/cu130/abi1"
    assert fixes[1].commands[-1].endswith(" torch==2.13.0 flash-attn==2.8.3.post2+torch2.13.cu130.abi1")


def test_no_torch_gets_pypis_newest_torch_and_its_wheel_in_one_line(matrix):
    [fix] = fixes_for(
        matrix, facts(torch=None, runtime=None, cuda=None, abi=None, flash=None), "torch-missing", "flash-attn-missing"
    )
    assert fix.kind == "pip-install" and fix.cell == "pypi/linux-64/py311/torch2.15/cu132/abi1"
    assert fix.title.startswith("install PyPI's torch 2.15.0 (CUDA 13.2) and faforge's wheel")
    assert fix.commands == (
        (
            f"{PY} -m pip install --extra-index-url {cell_index('torch2.15-cu132')} --only-binary flash-attn "
            "torch==2.15.0 flash-attn==2.8.3.post2+torch2.15.cu132.abi1"
        ),
    )


def test_a_torch_without_its_cuda_wheels_is_reinstalled_then_its_cell(matrix):
    f = facts(torch="2.4.0", runtime=None, cuda="12.1", abi=None, imported=False, flash=None)
    fixes = fixes_for(matrix, f, "torch-import-failed", "flash-attn-missing")
    assert [x.kind for x in fixes] == ["pip", "pip-install"]
    assert fixes[0].commands == (f"{PY} -m pip install --force-reinstall torch==2.4.0",)
    assert fixes[1].cell == "pypi/linux-64/py311/torch2.4/cu121/abi0"


def test_an_externally_managed_python_installs_into_a_new_venv(matrix):
    f = facts(torch=None, runtime=None, cuda=None, abi=None, flash=None, externally_managed=True)
    assert environment_kind(f) == "externally-managed"
    [fix] = fixes_for(matrix, f, "torch-missing", "flash-attn-missing")
    venv = fix.commands[0].split()[-1]
    assert fix.commands[0] == f"{PY} -m venv {venv}" and not any(c.startswith(f"{PY} -m pip") for c in fix.commands)
    assert fix.commands[1] == (
        f"{venv}/bin/python -m pip install --extra-index-url {cell_index('torch2.15-cu132')} --only-binary flash-attn "
        "torch==2.15.0 flash-attn==2.8.3.post2+torch2.15.cu132.abi1"
    )


@pytest.mark.parametrize("value", ["", "pypi.example", "ftp://x/y", "http://a b/", " "])
def test_a_bad_index_base_is_named(monkeypatch, value):
    monkeypatch.setenv("FAFORGE_PIP_INDEX", value)
    with pytest.raises(FaforgeError, match=r"\$FAFORGE_PIP_INDEX is not a wheel index URL"):
        instructions.index_base()


def test_the_default_index_base(monkeypatch):
    monkeypatch.delenv("FAFORGE_PIP_INDEX")
    assert instructions.index_url("torch2.11-cu130") == "https://faforge.github.io/wheels/torch2.11-cu130/"

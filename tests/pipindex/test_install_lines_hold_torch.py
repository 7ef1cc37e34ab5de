"""Every pip and uv line faforge prints (faforge.pipindex.instructions: the page, doctor's fixes) and every one the
docs document holds torch: real pip and real uv, asked for a dry run beside an installed torch, would install
our wheels and never another torch, nor build PyPI's flash-attn sdist. And the unpinned line the docs warn
against does what they say: it upgrades torch (pip and uv), and with torch held but no `--only-binary`
pip falls back to PyPI's sdist, whose build fails.

Tiny wheels (tests/support/tiny_wheels.py) published by `faforge publish` into three indexes (torch2.14-cu130,
torch2.11-cu130, and torch2.14-cu128 without FA3), served on loopback; PyPI, reached for real, is the default
index; each torch is a bare dist-info in a venv (tests/support/held_torch.py), so nothing downloads a torch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faforge.family import FLASH_ATTN, FLASH_ATTN_4
from faforge.pipindex import instructions
from tests.pipindex.test_publish_index import publish
from tests.support import tiny_wheels as tw
from tests.support.docs import INSTALLING, doc_text, fenced_blocks, reading_path
from tests.support.held_torch import UV, dry_run, fake_torch_venvs, simple_index
from tests.support.http_server import serve_directory

pytestmark = pytest.mark.slow

TORCHES = (
    "2.11.0",
    "2.14.1",
    "2.14.1+cu130",
)  # the venvs: PyPI's 2.11 and 2.14, and PyTorch's own index's 2.14.1+cu130
DOC_BASES = ("https://faforge.github.io/wheels/", "http://127.0.0.1:8000/", "$FAFORGE_PIP_INDEX/")
# What the docs say of the two unpinned lines, checked beside the measurement (the installing page, pip or uv).
README_SAYS = {
    "upgrade": "both take our\n  2.14 glue and **upgrade torch** to PyPI's 2.14.1",
    "sdist": "pip backtracks from our\n  wheel to PyPI's `flash-attn` sdist, "
    "downloads it and runs its build, which fails with a traceback",
}
KERNEL_128 = f"{tw.SDIST_VERSION}+cu128.sm80.philox64.h0000128"


def glue_version(minor: str, cuda: str = "130") -> str:
    return f"{tw.SDIST_VERSION}+torch{minor}.cu{cuda}.abi1"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The three indexes' loopback base URL (the glue wheels are cp311, as this Python, and need their torch minor)."""
    out, manifest = tmp_path_factory.mktemp("wheels"), tmp_path_factory.mktemp("verification")
    wheels = [
        tw.build_wheel(tw.glue("2.14", python="311", pin_torch=True), out),
        tw.build_wheel(tw.glue("2.11", python="311", pin_torch=True), out),
        tw.build_wheel(tw.kernel(), out),
        tw.build_wheel(tw.fa3(), out),
        tw.build_wheel(tw.glue("2.14", cuda="128", python="311", pin_torch=True, kernel=KERNEL_128), out),
        tw.build_wheel(tw.kernel(KERNEL_128.split("+")[1]), out),
    ]
    for wheel in wheels:
        tw.record_gates(manifest, wheel)
    root = tmp_path_factory.mktemp("index") / "wheels"
    published = publish(wheels, manifest, root)
    assert published.returncode == 0, published.stdout + published.stderr
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [
        "files",
        "torch2.11-cu130",
        "torch2.14-cu128",
        "torch2.14-cu130",
    ]
    with serve_directory(root) as url:
        yield url


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """A stand-in for PyPI holding tiny torch 2.11.0 and 2.14.1 wheels: where a resolver backtracks into torch's own
    candidates (pip does, before it refuses), it fetches these, not PyPI's torch and its 1.3 GB of NVIDIA wheels."""
    out = tmp_path_factory.mktemp("torch")
    wheels = [
        tw.build_wheel(tw.Spec("torch", torch, "py3-none-any", requires_python=">=3.10", package="torch"), out)
        for torch in ("2.11.0", "2.14.1")
    ]
    with serve_directory(simple_index(tmp_path_factory.mktemp("standin"), wheels)) as url:
        yield url


@pytest.fixture(scope="module")
def venvs(tmp_path_factory) -> dict[str, Path]:
    """torch version -> the python of a venv holding it."""
    return fake_torch_venvs(tmp_path_factory.mktemp("venvs"), TORCHES)


def needs_uv(installer: str) -> None:
    if installer == "uv" and not UV.is_file():
        pytest.skip("uv is not installed beside the test Python (a test extra: pip install -e '.[test]')")


def printed(form: str, index: str, pins: tuple[str, ...], python: Path, tmp: Path) -> str:
    """The line faforge prints in `form`, for the venv `python` (a requirements file is installed with `-r`)."""
    if form == "pip":
        return instructions.pip_command(index, pins, str(python))
    if form == "uv":
        return instructions.uv_command(index, pins, str(python))
    if form == "uv-reinstall":  # doctor's uv line where a flash-attn is installed
        return instructions.uv_command(index, pins, str(python), "--reinstall-package", FLASH_ATTN.package)
    requirements = tmp / "requirements.txt"
    requirements.write_text(instructions.requirements_txt(index, pins))
    return (
        f"{python} -m pip install -r {requirements}"
        if form == "requirements-pip"
        else f"uv pip install --python {python} -r {requirements}"
    )


FORMS = ("pip", "uv", "uv-reinstall", "requirements-pip", "requirements-uv")


@pytest.mark.parametrize("installed", ["2.14.1", "2.14.1+cu130"])
@pytest.mark.parametrize("form", FORMS)
def test_every_printed_line_keeps_the_installed_torch_and_adds_only_our_wheels(form, installed, base, venvs, tmp_path):
    """The page's line of a cell (torch==its torch) and doctor's line (torch==the installed torch's release) are the
    same line here: beside torch 2.14.1, or PyTorch's 2.14.1+cu130, pip and uv would install the glue and its kernel
    wheel and keep torch."""
    needs_uv("uv" if "uv" in form else "pip")
    pins = instructions.requirements(glue_version("2.14"), "2.14.1")
    ran = dry_run(
        printed(form, instructions.index_url("torch2.14-cu130", base), pins, venvs[installed], tmp_path), tmp_path
    )
    assert ran.returncode == 0, ran.output[-3000:]
    assert ran.install == {FLASH_ATTN.package: glue_version("2.14"), FLASH_ATTN.kernel_package: tw.KERNEL_VERSION}, (
        ran.output[-3000:]
    )
    assert ran.remove == {}, ran.output[-3000:]


@pytest.mark.parametrize("form", FORMS)
def test_a_printed_line_for_another_minors_index_refuses_and_builds_nothing(form, base, venvs, standin, tmp_path):
    """Doctor's line holds the installed torch (2.11.0); given the index of torch 2.14, pip and uv refuse, with no
    torch installed and no sdist fetched (`--only-binary flash-attn`; uv's first-index strategy). The default index
    is the stand-in: pip downloads the held torch's own wheels from it before it concludes (from PyPI, 1.3 GB)."""
    needs_uv("uv" if "uv" in form else "pip")
    pins = instructions.requirements(glue_version("2.14"), "2.11.0")
    ran = dry_run(
        printed(form, instructions.index_url("torch2.14-cu130", base), pins, venvs["2.11.0"], tmp_path),
        tmp_path,
        standin,
    )
    assert ran.returncode != 0 and ran.install == {}, ran.output[-3000:]
    assert "tar.gz" not in ran.output and "build" not in ran.output.lower(), ran.output[-3000:]
    assert ("No solution found" if "uv" in form else "ResolutionImpossible") in ran.output, ran.output[-3000:]


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_an_unpinned_flash_attn_from_another_minors_index_upgrades_torch(installer, base, venvs, tmp_path):
    """What the installing page warns against, measured: `install flash-attn --extra-index-url <torch 2.14's
    index>` beside torch 2.11.0 does not refuse: pip and uv both replace torch with PyPI's 2.14.1 (a ~4 GB
    download, not done here)."""
    needs_uv(installer)
    index, python = instructions.index_url("torch2.14-cu130", base), venvs["2.11.0"]
    line = (
        f"{python} -m pip install --extra-index-url {index} {FLASH_ATTN.package}"
        if installer == "pip"
        else f"uv pip install --python {python} --extra-index-url {index} {FLASH_ATTN.package}"
    )
    ran = dry_run(line, tmp_path)
    assert ran.returncode == 0, ran.output[-3000:]
    assert ran.torch() == "2.14.1" and ran.install[FLASH_ATTN.package] == glue_version("2.14"), ran.install
    assert installer == "pip" or ran.remove.get("torch") == "2.11.0", ran.output[-3000:]
    assert README_SAYS["upgrade"] in doc_text(INSTALLING), f"{INSTALLING}: say that the unpinned line upgrades torch"


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_with_torch_held_but_no_only_binary_pip_builds_pypis_sdist_and_fails(installer, base, venvs, tmp_path):
    """torch held (torch==2.11.0), flash-attn unpinned, no `--only-binary`: pip backtracks from our wheel to PyPI's
    flash-attn sdist and runs its build, which fails with a traceback; uv (first-index: flash-attn from ours only)
    refuses."""
    needs_uv(installer)
    index, python = instructions.index_url("torch2.14-cu130", base), venvs["2.11.0"]
    line = (
        f"{python} -m pip install --extra-index-url {index} torch==2.11.0 {FLASH_ATTN.package}"
        if installer == "pip"
        else f"uv pip install --python {python} --extra-index-url {index} torch==2.11.0 {FLASH_ATTN.package}"
    )
    ran = dry_run(line, tmp_path)
    assert ran.returncode != 0 and ran.install == {}, ran.output[-3000:]
    if installer == "pip":
        assert f"{FLASH_ATTN.dist_name}-{tw.SDIST_VERSION}.tar.gz" in ran.output and "Traceback" in ran.output, (
            ran.output[-3000:]
        )
    else:
        assert "No solution found" in ran.output and "tar.gz" not in ran.output, ran.output[-3000:]
    assert README_SAYS["sdist"] in doc_text(INSTALLING), f"{INSTALLING}: say that pip builds PyPI's sdist here"


def readme_lines() -> list[str]:
    """Every pip and uv install line of flash-attn README.md and the docs pages document with an index of ours
    (continuations joined, `$ ` dropped, each once), and their requirements.txt (one line: its options and pins).
    FlashAttention-4's lines are tests/fa4/test_documented_lines.py's and tests/pipworld/test_fa4_lines.py's."""
    blocks = [
        block for page in reading_path() for language in ("bash", "text") for block in fenced_blocks(page, language)
    ]
    lines = [
        line.removeprefix("$ ")
        for block in blocks
        for line in block.replace("\\\n", " ").splitlines()
        if re.search(r"pip install .*--extra-index-url", line) and f"{FLASH_ATTN_4.package}==" not in line
    ]
    requirements = [b for b in blocks if b.startswith("--extra-index-url ")]
    assert len(requirements) == 1, requirements
    return [
        *list(dict.fromkeys(re.sub(r"\s+", " ", line).strip() for line in lines)),
        "-r " + " ".join(requirements[0].split()),
    ]


def test_every_readme_install_line_holds_torch_and_takes_only_wheels():
    lines = readme_lines()
    assert len(lines) >= 6, lines
    for line in lines:
        assert re.search(r"\btorch==\d+\.\d+\.\d+(\s|$)", line), f"docs: this line does not hold torch: {line}"
        assert re.search(rf"--only-binary ({FLASH_ATTN.package}|:all:)", line), (
            f"docs: this line may build flash-attn: {line}"
        )
        assert re.search(rf"{FLASH_ATTN.package}=={re.escape(tw.SDIST_VERSION)}\+torch", line), (
            f"docs: flash-attn unpinned: {line}"
        )


def test_every_readme_install_line_keeps_the_torch_it_pins(base, venvs, tmp_path):
    """Each documented line, run as a dry run beside the torch it pins (only the index base swapped for the loopback
    one, and VENV for the venv): our two wheels, and torch kept."""
    for line in readme_lines():
        if "--target" in line:
            continue  # the cross install into an aarch64 site-packages: tests/pipworld/test_aarch64_cell.py runs it
        torch, minor = re.search(r"\btorch==(\S+)", line)[1], re.search(r"torch(\d+\.\d+)-cu", line)[1]
        python = venvs[torch]
        for doc in DOC_BASES:
            line = line.replace(doc, base)
        if line.startswith("-r "):
            requirements = tmp_path / "requirements.txt"
            requirements.write_text("\n".join(re.findall(r"--\S+ \S+|\S+==\S+", line.removeprefix("-r "))) + "\n")
            line = f"{python} -m pip install -r {requirements}"
        line = re.sub(r"^(VENV/bin/)?python ", f"{python} ", line).replace(
            "--python VENV/bin/python", f"--python {python}"
        )
        if line.startswith("uv ") and "--python " not in line:
            line = line.replace("uv pip install ", f"uv pip install --python {python} ", 1)
        if line.startswith("uv "):
            needs_uv("uv")
        ran = dry_run(line, tmp_path)
        assert ran.returncode == 0, f"$ {line}\n{ran.output[-3000:]}"
        assert ran.install == {FLASH_ATTN.package: glue_version(minor), FLASH_ATTN.kernel_package: tw.KERNEL_VERSION}, (
            f"$ {line}\n{ran.output[-3000:]}"
        )

"""`faforge page` in real headless Chromium: load the page from a channel served over HTTP, click a
cell, read the command it shows, and check a screenshot for the selected cell's highlight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.channel.instructions import conda_command, environment_yml, match_spec
from faforge.channel.local import PackageSpec, assemble, index
from faforge.config import public_channel
from faforge.matrix import load_matrix
from faforge.pipindex import instructions
from tests.pipindex.test_publish_index import publish
from tests.support import tiny_wheels
from tests.support.chromium import BrowserUnavailable, Chromium
from tests.support.http_server import serve_directory
from tests.support.pip_index_server import serve_index
from tests.support.png import count_colour

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "page.json").read_text())
VERSION = "2.8.3.post2"
HIGHLIGHT = (0xE8, 0x59, 0x0C)  # `.grid button.selected` in scripts/faforge/release/page.html
# (subdir, build string, torch pin): conda-forge cells and one legacy-channel (ABI 0) cell.
PACKAGES = [
    ("linux-64", "py311_torch2_14_cu130_cxx11abi1_h1111111_0", "pytorch >=2.14.1,<2.15 cuda130*"),
    ("linux-64", "py311_torch2_13_cu129_cxx11abi1_h2222222_0", "pytorch >=2.13.0,<2.14 cuda129*"),
    ("linux-64", "py311_torch2_13_cu130_cxx11abi1_h3333333_0", "pytorch >=2.13.0,<2.14 cuda130*"),
    ("linux-64", "py312_torch2_13_cu130_cxx11abi1_h4444444_0", "pytorch >=2.13.0,<2.14 cuda130*"),
    ("linux-aarch64", "py311_torch2_13_cu130_cxx11abi1_h5555555_0", "pytorch >=2.13.0,<2.14 cuda130*"),
    ("linux-64", "py311_torch2_5_cu121_cxx11abi0_h6666666_0", "pytorch ==2.5.1 py3*"),
]
# flash-attn-3 packages as recipes/flash-attn-3 builds them, and one of another builder's (its build string
# names no faforge package: not listed).
FA3 = [
    ("linux-64", "cu130_sm80_90a_faforge_h7777777_0", "cuda-version >=13.0,<14"),
    ("linux-aarch64", "cu129_sm80_90a_faforge_h8888888_0", "cuda-version >=12.9,<13"),
    ("linux-64", "cuda129_py312_h9999999_0", "cuda-version >=12.9,<13"),
]
FA3_VERSION = "3.0.0"
PICK = "linux-64/py311/torch2.13/cu130/abi1"
PICK_BUILD = "py311_torch2_13_cu130_cxx11abi1_h3333333_0"
# A pip cell with no conda package in the channel above: the grid shows it for its pip and uv lines alone.
PIP_ONLY = "linux-64/py311/torch2.15/cu132/abi1"
PUBLISHED = "pypi/linux-64/py312/torch2.11/cu130/abi1"  # the one glue wheel the wheel index below holds


def pip_lines(cell_id: str, base: str | None = None) -> dict:
    """A pip cell's pip and uv lines, as faforge.pipindex.instructions writes them (the torch its gates ran against)."""
    cell = next(c for c in load_matrix().pip_cells if c.id == cell_id)
    index = instructions.index_url(cell.index_name, base)
    pins = instructions.requirements(
        f"{VERSION}+torch{cell.torch_minor}.{cell.cuda_tag}.abi{cell.cxx11_abi}", cell.torch
    )
    return {
        "index_url": index,
        "pip_install": instructions.pip_command(index, pins),
        "uv_install": instructions.uv_command(index, pins),
        "requirements_txt": instructions.requirements_txt(index, pins),
    }


@pytest.fixture(scope="module")
def channel(tmp_path_factory):
    directory = tmp_path_factory.mktemp("channel")
    for subdir, build, torch in PACKAGES:
        assemble(
            PackageSpec("flash-attn", VERSION, build, subdir, depends=(f"python {build[2]}.{build[3:5]}.*", torch)),
            directory,
        )
    for subdir, build, cuda in FA3:
        assemble(
            PackageSpec(
                "flash-attn-3", FA3_VERSION, build, subdir, depends=("python >=3.10", "pytorch >=2.9 cuda*", cuda)
            ),
            directory,
        )
    index(directory)
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "page", "--channel", str(directory)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return directory


def test_page_data(channel):
    data = json.loads((channel / "flash-attn-builds.json").read_text())
    jsonschema.validate(data, SCHEMA)
    assert sorted(p["build"] for p in data["packages"]) == sorted(b for _, b, _ in PACKAGES)
    legacy = next(p for p in data["packages"] if p["cxx11_abi"] == 0)
    assert legacy["world"] == "pytorch" and legacy["torch"] == "2.5.1"
    # The JSON file cannot learn the URL it is served from, so it names the public channel, never a placeholder.
    assert legacy["install"] == conda_command(
        match_spec("flash-attn", VERSION, legacy["build"]), [public_channel(), "pytorch", "nvidia", "conda-forge"]
    )
    assert "@CHANNEL@" not in json.dumps(data["packages"]) and data["install_channel"] == public_channel()


def test_page_data_lists_the_fa3_packages_beside_the_cells(channel):
    """Each flash-attn-3 package with its build string, the torch range it serves, CUDA and
    platform, and the exact lines that install it from the FA3 world's channels (conda-forge)."""
    data = json.loads((channel / "flash-attn-builds.json").read_text())
    jsonschema.validate(data, SCHEMA)
    fa3 = {p["build"]: p for p in data["flash_attn_3"]}
    assert sorted(fa3) == sorted(b for _, b, _ in FA3[:2]), "another builder's flash-attn-3 is not listed"
    x86 = fa3[FA3[0][1]]
    assert (x86["id"], x86["platform"], x86["cuda"], x86["cuda_archs"], x86["served_torch"], x86["python"]) == (
        "linux-64/cu130/sm80_90a",
        "linux-64",
        "13.0",
        "80;90a",
        "torch >= 2.9",
        ">=3.10",
    )
    spec = match_spec("flash-attn-3", FA3_VERSION, x86["build"])
    assert x86["install"] == conda_command(spec, [public_channel(), "conda-forge"])
    assert x86["environment_yml"] == environment_yml(spec, [public_channel(), "conda-forge"], name="flash-attn-3")
    assert fa3[FA3[1][1]]["id"] == "linux-aarch64/cu129/sm80_90a"
    assert len(data["packages"]) == len(PACKAGES), "the cells' grid is what it was"


def test_page_data_gives_each_pip_cell_its_pip_and_uv_lines(channel):
    """The pip world: every pip cell of the matrix, beside the conda cells, with the exact lines that install its glue
    wheel from its index; without --index nothing says whether it is published (null)."""
    data = json.loads((channel / "flash-attn-builds.json").read_text())
    jsonschema.validate(data, SCHEMA)
    matrix = load_matrix()
    assert sorted(p["cell"] for p in data["pip"]) == sorted(c.id for c in matrix.pip_cells)
    assert data["pip_index"] is None and all(p["published"] is None and p["wheel"] is None for p in data["pip"])
    entry = next(p for p in data["pip"] if p["cell"] == f"pypi/{PICK}")
    assert entry["grid_cell"] == PICK and entry["index_name"] == "torch2.13-cu130" and entry["torch"] == "2.13.0"
    assert {k: entry[k] for k in ("index_url", "pip_install", "uv_install", "requirements_txt")} == pip_lines(
        entry["cell"]
    )
    assert entry["pip_install"] == (
        f"python -m pip install --extra-index-url {instructions.index_base()}/torch2.13-cu130/ --only-binary "
        "flash-attn "
        f"torch==2.13.0 flash-attn=={VERSION}+torch2.13.cu130.abi1"
    )
    abi0 = next(p for p in data["pip"] if p["cell"] == "pypi/linux-64/py311/torch2.5/cu124/abi0")
    assert abi0["uv_install"].endswith(
        f"--only-binary flash-attn torch==2.5.1 flash-attn=={VERSION}+torch2.5.cu124.abi0"
    )


@pytest.fixture(scope="module")
def wheel_index(tmp_path_factory) -> tuple[Path, Path]:
    """A wheel index root: one glue wheel (torch 2.11, CUDA 13.0, cp312) and its kernel wheel, published as CI does."""
    out = tmp_path_factory.mktemp("wheels")
    glue, kernel = (
        tiny_wheels.build_wheel(tiny_wheels.glue("2.11"), out),
        tiny_wheels.build_wheel(tiny_wheels.kernel(), out),
    )
    manifest = tmp_path_factory.mktemp("verification")
    for path in (glue, kernel):
        tiny_wheels.record_gates(manifest, path)
    root = tmp_path_factory.mktemp("index") / "wheels"
    result = publish([glue, kernel], manifest, root)
    assert result.returncode == 0, result.stdout + result.stderr
    return root, glue


def _published(data: dict) -> dict[str, str]:
    return {p["cell"]: p["wheel"] for p in data["pip"] if p["published"]}


def test_page_with_the_wheel_index_folder_says_which_cells_are_published(channel, wheel_index, tmp_path):
    root, glue = wheel_index
    result = _page(tmp_path, "--channel", str(channel), "--out", str(tmp_path / "out"), "--index", str(root))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out" / "flash-attn-builds.json").read_text())
    jsonschema.validate(data, SCHEMA)
    assert _published(data) == {PUBLISHED: glue.name}
    assert data["pip_index"] == str(root) and all(
        p["published"] is False for p in data["pip"] if p["cell"] != PUBLISHED
    )
    assert next(p for p in data["pip"] if p["cell"] == PUBLISHED)["index_url"] == pip_lines(PUBLISHED)["index_url"], (
        "a folder is no URL: the lines name the public base"
    )
    assert f"with the pip and uv lines of {len(data['pip'])} pip cells, 1 published in {root}" in result.stdout


def test_page_with_the_wheel_index_url_reads_it_over_http(channel, wheel_index, tmp_path):
    root, glue = wheel_index
    with serve_index(root, tmp_path / "requests.jsonl") as url:
        result = _page(tmp_path, "--channel", str(channel), "--out", str(tmp_path / "out"), "--index", url)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out" / "flash-attn-builds.json").read_text())
    assert _published(data) == {PUBLISHED: glue.name}
    entry = next(p for p in data["pip"] if p["cell"] == PUBLISHED)
    assert {k: entry[k] for k in ("index_url", "pip_install", "uv_install", "requirements_txt")} == pip_lines(
        PUBLISHED, url
    ), "the URL is the lines' base"


def test_page_for_a_pip_only_user_needs_no_channel(wheel_index, tmp_path):
    """A user with a wheel index and no conda channel gets the page of the pip cells: no channel folder, no
    --channel; the page goes to ./page (not into the wheel index, whose paths are faforge's)."""
    root, glue = wheel_index
    with serve_index(root, tmp_path / "requests.jsonl") as url:
        result = _page(tmp_path, "--index", url)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "page" / "flash-attn-builds.json").read_text())
    assert (tmp_path / "page" / "index.html").is_file() and not (tmp_path / "channel").exists()
    assert data["packages"] == [] and data["flash_attn_3"] == [] and data["pip_index"] == url
    assert sorted(p["cell"] for p in data["pip"]) == sorted(c.id for c in load_matrix().pip_cells)
    assert _published(data) == {PUBLISHED: glue.name}
    assert f"1 published in {url}" in result.stdout and "0 packages" in result.stdout
    local = _page(
        tmp_path, "--index", str(root), "--out", str(tmp_path / "local")
    )  # the index root folder, --out given
    assert local.returncode == 0, local.stderr
    assert _published(json.loads((tmp_path / "local" / "flash-attn-builds.json").read_text())) == {PUBLISHED: glue.name}


def test_page_without_channel_or_index_names_both(tmp_path):
    result = _page(tmp_path, "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "or pass --index" in result.stderr


@pytest.mark.slow  # starts a real headless Chromium (about 10 s)
def test_pick_a_cell_in_headless_chromium(channel, tmp_path):
    try:
        browser = Chromium(width=1000, height=760)
    except BrowserUnavailable as exc:
        pytest.skip(str(exc))
    try:
        with serve_directory(channel) as url:
            browser.open(url)
            assert browser.evaluate("document.querySelectorAll('.grid button').length") >= 1
            before = browser.screenshot(tmp_path / "before.png")
            # Choose python 3.11 on linux-64, ABI 1, then click the torch 2.13 x CUDA 13.0 cell.
            browser.evaluate("""(() => {
                for (const [id, v] of [['platform','linux-64'],['abi','1'],['python','3.11']]) {
                    const s = document.getElementById(id); s.value = v; s.dispatchEvent(new Event('change')); } })()""")
            box = browser.evaluate(f"""(() => {{
                const r = document.querySelector('button[data-cell="{PICK}"]').getBoundingClientRect();
                return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
            browser.click(*box)
            shown = browser.evaluate("document.getElementById('install-command').textContent")
            yml = browser.evaluate("document.getElementById('environment-yml').textContent")
            picked = browser.evaluate("document.getElementById('picked').textContent")
            hash_ = browser.evaluate("window.location.hash")
            after = browser.screenshot(tmp_path / "after.png")
            fa3_rows = browser.evaluate(
                "[...document.querySelectorAll('#fa3-table tr[data-fa3]')].map((r) => "
                "[r.dataset.fa3, r.cells[3].textContent, r.querySelector('pre').textContent])"
            )
            pip_shown = {
                k: browser.evaluate(f"document.getElementById('{k}').textContent")
                for k in ("pip-command", "uv-command", "requirements-txt")
            }
            pip_status = browser.evaluate("document.getElementById('pip-status').textContent")
            # A cell only a pip cell fills: its pip and uv lines, and no conda lines.
            browser.evaluate(f"""document.querySelector('button[data-cell="{PIP_ONLY}"]').click()""")
            pip_only = {
                k: browser.evaluate(f"document.getElementById('{k}').textContent")
                for k in ("picked", "pip-command", "uv-command")
            }
            conda_hidden = browser.evaluate("document.getElementById('conda-details').hidden")
    finally:
        browser.close()
    spec = match_spec("flash-attn", VERSION, PICK_BUILD)
    assert picked == PICK and hash_ == f"#cell={PICK}"
    assert shown == conda_command(spec, [url, "conda-forge"]), (
        "the page must show the exact command for the clicked package"
    )
    assert yml == environment_yml(spec, [url, "conda-forge"])
    assert sorted(fa3_rows) == sorted(
        [
            [
                f"{subdir}/{build[:5]}/sm80_90a",
                "torch >= 2.9",
                conda_command(match_spec("flash-attn-3", FA3_VERSION, build), [url, "conda-forge"]),
            ]
            for subdir, build, _ in FA3[:2]
        ]
    ), "every FA3 package in its own row, with the install command for the served channel"
    assert count_colour(before, HIGHLIGHT) == 0
    assert count_colour(after, HIGHLIGHT) > 500, "the clicked cell is not highlighted in the screenshot"
    lines = pip_lines(f"pypi/{PICK}")
    assert pip_shown == {
        "pip-command": lines["pip_install"],
        "uv-command": lines["uv_install"],
        "requirements-txt": lines["requirements_txt"],
    }
    assert "not read" in pip_status, pip_status
    only = pip_lines(f"pypi/{PIP_ONLY}")
    assert pip_only == {"picked": PIP_ONLY, "pip-command": only["pip_install"], "uv-command": only["uv_install"]}
    assert conda_hidden is True, "no conda package in the channel for this cell"


def _page(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", "page", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_page_before_anything_is_published_says_publish_first(tmp_path):
    result = _page(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "./channel (the default --channel, where `faforge publish` writes) does not exist yet" in result.stderr
    assert "publish first" in result.stderr and "or pass --channel URL" in result.stderr
    assert "anaconda.org" not in result.stderr


def test_page_defaults_to_the_local_channel_folder(tmp_path):
    subdir, build, torch = PACKAGES[0]
    assemble(PackageSpec("flash-attn", VERSION, build, subdir, depends=("python 3.11.*", torch)), tmp_path / "channel")
    index(tmp_path / "channel")
    result = _page(tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "channel" / "flash-attn-builds.json").read_text())["packages"][0]["build"] == build


def test_an_owner_name_stays_an_anaconda_org_channel(tmp_path):
    """CI passes an owner name or URL (.github/workflows/build.yml); offline, a network error, not a missing folder."""
    (tmp_path / "channel").mkdir()  # even with a local ./channel, a name given with --channel is remote
    result = _page(tmp_path, "--channel", "faforge-owner-that-does-not-exist")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "conda.anaconda.org/faforge-owner-that-does-not-exist" in result.stderr


def test_an_empty_channel_is_refused(tmp_path):
    result = _page(tmp_path, "--channel", "")
    assert result.returncode == 2 and "--channel '': empty" in result.stderr
    assert not (tmp_path / "index.html").exists()


def test_a_file_given_as_the_channel_folder_is_named_as_such(tmp_path):
    (tmp_path / "notes.txt").write_text("not a channel\n")
    result = _page(tmp_path, "--channel", str(tmp_path / "notes.txt"))
    assert (
        result.returncode == 2 and "is a file, not a folder" in result.stderr and "does not exist" not in result.stderr
    )


def test_two_pages_of_one_channel_are_the_same_bytes_under_source_date_epoch(tmp_path):
    subdir, build, torch = PACKAGES[0]
    assemble(PackageSpec("flash-attn", VERSION, build, subdir, depends=("python 3.11.*", torch)), tmp_path / "channel")
    index(tmp_path / "channel")
    made = []
    for out in ("one", "two"):
        result = _page(tmp_path, "--out", out, env={"SOURCE_DATE_EPOCH": "1796083200"})
        assert result.returncode == 0, result.stderr
        made.append({p.name: p.read_bytes() for p in (tmp_path / out).iterdir()})
    assert made[0] == made[1] and len(made[0]) == 2
    assert json.loads(made[0]["flash-attn-builds.json"])["generated"] == "2026-12-01T00:00:00+00:00"


@pytest.mark.parametrize("epoch", ["yesterday", "-5", "1e9", "9" * 40])
def test_a_source_date_epoch_that_is_no_count_of_seconds_is_named(tmp_path, epoch):
    subdir, build, torch = PACKAGES[0]
    assemble(PackageSpec("flash-attn", VERSION, build, subdir, depends=("python 3.11.*", torch)), tmp_path / "channel")
    index(tmp_path / "channel")
    result = _page(tmp_path, env={"SOURCE_DATE_EPOCH": epoch})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "SOURCE_DATE_EPOCH=" in result.stderr and "is not a count of seconds since 1970" in result.stderr

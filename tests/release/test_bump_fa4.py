"""`faforge bump` finds a new flash-attn-4 release on a loopback PyPI and proposes its rows.

The loopback server serves PyPI's real JSON API page of flash-attn-4 (tests/fixtures/fa4/, recorded) and the
real 4.0.0b40 wheel at the path the page names; the scratch checkout's data file is trimmed to 4.0.0b39, the
release before it. The proposed sets are resolved with real uv against PyPI (slow) and must be the committed
4.0.0b40 sets, so a wrong resolution fails. Hostile pages (oversized, cut short, not JSON, wrong types, a wheel
on another host or with another digest, a yanked release) are each an error naming the page, or a skip of that
release, never a traceback.
"""

from __future__ import annotations

import datetime
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from urllib.parse import urljoin

import jsonschema
import pytest
from packaging.version import Version

from faforge.errors import DataError, FaforgeError, RemoteError
from faforge.families.flash_attn_4 import bump, gate, sets
from faforge.wheelfetch import FetchError, download_checked
from tests.support.cache import cache_dir
from tests.support.hostile_server import serve_hostile
from tests.support.http_server import serve_directory
from tests.support.tiers import slow

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "bump.json").read_text())
PAGE = json.loads((REPO / "tests" / "fixtures" / "fa4" / "pypi-flash-attn-4.json").read_text())
RECORDED_FROM = "https://pypi.org/pypi/flash-attn-4/json"
B40 = "4.0.0b40"
B39 = ("4.0.0b39", "9c5e6f4479d81317a0d7da84d0cc33fe942f78d64c60a01bc409fc78d6aa8ea3", "2026-11-11")
# uv reads this itself: the resolution sees PyPI as it was when the committed rows were resolved.
AS_OF = {"UV_EXCLUDE_NEWER": "2026-12-07T00:00:00Z"}
GATE_DISK = 8 << 30


def b40_file(page: dict) -> dict:
    return next(f for f in page["releases"][B40] if f["filename"].endswith(".whl"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A scratch checkout whose flash-attn-4 data ends at 4.0.0b39 (its real wheel, digest and date)."""
    root = tmp_path / "project"
    for name in ("variants", "recipes"):
        shutil.copytree(REPO / name, root / name)
    data = root / "variants" / "flash-attn-4.yaml"
    release = sets.load(REPO / "variants" / "flash-attn-4.yaml").releases[0]
    version, sha, day = B39
    text = data.read_text().replace(B40, version).replace(release.sha256, sha)
    data.write_text(text.replace(f'published: "{release.published}"', f'published: "{day}"'))
    assert [r.version for r in sets.load(data).releases] == [version]
    return root


def serve_tree(root: Path, page: dict | bytes, wheel: bytes | None = None) -> Path:
    """root/pypi/flash-attn-4/json and, if given, the wheel at the relative URL the page names for b40."""
    body = page if isinstance(page, bytes) else json.dumps(page).encode()
    (root / "pypi" / "flash-attn-4").mkdir(parents=True, exist_ok=True)
    (root / "pypi" / "flash-attn-4" / "json").write_bytes(body)
    if wheel is not None:
        where = root / urljoin("pypi/flash-attn-4/json", b40_file(PAGE)["url"])
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(wheel)
    return root


def faforge(project: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    extra = {"FAFORGE_ROOT": str(project), "FAFORGE_CACHE_DIR": str(project.parent / "cache"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "faforge", "bump", "--source", "flash-attn-4", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **extra),
        timeout=1200,
    )


def bumped(project: Path, url: str, *args: str, env: dict | None = None) -> tuple[int, dict]:
    """Exit status and the --json report (a report or an error, as the schema says); never a traceback."""
    result = faforge(project, "--channel-url", url, "--json", *args, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return result.returncode, data


@pytest.fixture(scope="module")
@slow("downloads flash-attn-4 4.0.0b40's wheel from PyPI (570 KB, cached)")
def b40_wheel() -> Path:
    entry = b40_file(PAGE)
    target = cache_dir("fa4-wheels") / entry["filename"]
    if not target.is_file():
        try:
            download_checked(
                urljoin(RECORDED_FROM, entry["url"]),
                entry["digests"]["sha256"],
                target,
                lambda got: RemoteError(f"{entry['filename']}: sha256 {got}"),
            )
        except FetchError as exc:
            pytest.skip(f"PyPI is not reachable ({exc})")
    return target


@pytest.mark.slow  # resolves both sets with real uv against PyPI (about 2 minutes)
def test_bump_proposes_the_committed_b40_rows_and_writes_them(project, tmp_path, b40_wheel) -> None:
    data_file = project / "variants" / "flash-attn-4.yaml"
    before = data_file.read_text()
    with serve_directory(serve_tree(tmp_path / "served", PAGE, b40_wheel.read_bytes())) as url:
        code, report = bumped(project, url + "pypi", "--write", env=AS_OF)
        if code == 4 and "uv cannot resolve" in report.get("error", {}).get("message", ""):
            pytest.skip(f"PyPI is not reachable for uv: {report['error']['message'][:300]}")
        assert code == 0, report
        (family,) = report["family_releases"]
        assert family["family"] == "flash-attn-4" and family["releases"] == [B40]
        assert family["skipped"] == [], "0.0.1 (yanked) and b36 are older than b39: not even looked at"
        assert report["written"] == [str(data_file)]
        again = faforge(project, "--channel-url", url + "pypi")
    assert again.returncode == 0 and "no flash-attn-4 releases missing" in again.stdout, again.stdout

    committed = sets.load(REPO / "variants" / "flash-attn-4.yaml")
    written = sets.load(data_file)
    release = written.releases[-1]
    # the wheel's URL is the page's (here the loopback mirror's), the same PyPI path under it
    assert release.url.startswith(url) and release.url.endswith(committed.releases[0].url.split("/packages/", 1)[1])
    assert replace(release, url=committed.releases[0].url) == committed.releases[0], "its METADATA, as committed"
    assert len(written.sets) == 4 and [s.version for s in written.sets[2:]] == [B40, B40]
    for proposed in written.sets[2:]:
        kept = committed.set_for(proposed.torch, proposed.cuda, B40)
        assert kept is not None and (proposed.python, proposed.platforms) == (kept.python, kept.platforms)
        assert proposed.packages.keys() == kept.packages.keys()
        for name, version in kept.packages.items():
            if name in committed.exact:  # the compiled stack, pinned exactly: resolved to the committed versions
                assert proposed.packages[name] == version, (proposed.id, name)
            else:  # a floor: the committed value is a floor, the resolution takes the newest
                assert Version(proposed.packages[name]) >= Version(version), (proposed.id, name)
        assert proposed.proofs == (), "not gated: no proof is claimed"
    # every hand-kept line is still there, in order: the rows were added, nothing rewritten
    edits = difflib.SequenceMatcher(None, before.splitlines(), data_file.read_text().splitlines()).get_opcodes()
    assert {tag for tag, *_ in edits} == {"equal", "insert"}, edits
    proposed_rows = [r for r in family["rows"] if "set" in r]
    assert [r["set"]["resolved_with_torch"] for r in proposed_rows] == ["2.11.0", "2.14.1"]


def test_a_yanked_release_is_skipped_with_its_reason(project, tmp_path) -> None:
    page = json.loads(json.dumps(PAGE))
    for entry in page["releases"][B40]:
        entry["yanked"], entry["yanked_reason"] = True, "broken import"
    before = (project / "variants" / "flash-attn-4.yaml").read_text()
    with serve_directory(serve_tree(tmp_path / "served", page)) as url:
        code, report = bumped(project, url + "pypi", "--write")
    assert code == 0, report
    assert report["family_releases"][0]["releases"] == []
    assert report["family_releases"][0]["skipped"] == [f"{B40}: yanked (broken import)"]
    assert (project / "variants" / "flash-attn-4.yaml").read_text() == before


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda p: p.update(releases=list(p["releases"])), "not a PyPI JSON API page"),
        (
            lambda p: b40_file(p).update(url="https://elsewhere.example/flash_attn_4-4.0.0b40-py3-none-any.whl"),
            "points to another host",
        ),
        (lambda p: b40_file(p).update(url="//127.0.0.2/x.whl"), "points to another host"),
    ],
    ids=["releases-a-list", "wheel-on-another-host", "wheel-on-another-loopback-host"],
)
def test_a_page_that_is_not_pypis_is_refused(project, tmp_path, change, says) -> None:
    page = json.loads(json.dumps(PAGE))
    change(page)
    with serve_directory(serve_tree(tmp_path / "served", page)) as url:
        code, report = bumped(project, url + "pypi")
    assert code == 4 and says in report["error"]["message"], report


@pytest.mark.parametrize(
    ("change", "skipped"),
    [
        (lambda p: b40_file(p).update(size="big"), "its size big is not a number"),
        (lambda p: b40_file(p).update(digests={"md5": "0" * 32}), "has no sha256 digest"),
        (lambda p: p["releases"].update({B40: "files"}), "its files are not a list"),
        (
            lambda p: p["releases"].update({B40: [f for f in p["releases"][B40] if f["packagetype"] == "sdist"]}),
            "no flash_attn_4-4.0.0b40-py3-none-any.whl among its 1 files",
        ),
    ],
    ids=["size-a-string", "no-sha256", "files-a-string", "sdist-only"],
)
def test_a_malformed_release_is_skipped_with_the_reason(project, tmp_path, change, skipped) -> None:
    page = json.loads(json.dumps(PAGE))
    change(page)
    with serve_directory(serve_tree(tmp_path / "served", page)) as url:
        code, report = bumped(project, url + "pypi")
    assert code == 0, report
    (line,) = report["family_releases"][0]["skipped"]
    assert line.startswith(f"{B40}: ") and skipped in line, line


def test_a_wheel_whose_bytes_are_not_the_pages_digest_is_refused(project, tmp_path) -> None:
    fake = b"PK\x05\x06" + bytes(b40_file(PAGE)["size"] - 4)  # the size the page says, other bytes
    with serve_directory(serve_tree(tmp_path / "served", PAGE, fake)) as url:
        code, report = bumped(project, url + "pypi")
    assert code == 4 and "but the page says" in report["error"]["message"], report
    assert not list((tmp_path / "cache").rglob("*.whl")), "a wheel with another digest is never kept"


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("huge", "more than the cap"),
        ("short", "bytes short of its Content-Length"),
        ("cut", "before its last chunk"),
        ("badjson", "is not valid JSON"),
    ],
)
def test_a_hostile_server_is_an_error_naming_the_page(project, mode, says) -> None:
    with serve_hostile() as url:
        code, report = bumped(project, f"{url}/{mode}/pypi")
    assert code == 4, report
    assert says in report["error"]["message"] and "flash-attn-4/json" in report["error"]["message"], report


def test_a_page_of_wrong_types_is_an_error(project, tmp_path) -> None:
    with serve_directory(serve_tree(tmp_path / "served", b"[1, 2, 3]")) as url:
        code, report = bumped(project, url + "pypi")
    assert code == 4 and "not a PyPI JSON API page" in report["error"]["message"], report


def test_rows_are_added_only_to_the_files_own_shape(tmp_path) -> None:
    data = sets.load(REPO / "variants" / "flash-attn-4.yaml")
    release = data.releases[0]
    text = (REPO / "variants" / "flash-attn-4.yaml").read_text()
    moved = text.replace("\npins:", "\nzzz: 1\npins:")
    with pytest.raises(DataError, match="top-level keys"):
        bump.added(moved, [release], [], [], data)
    # the committed file itself: a release it already has would not read back (two sets with the same key)
    with pytest.raises(DataError):
        bump.added(text, [release], list(data.sets), ["2.11.0", "2.14.1"], data)


def test_the_gate_refuses_a_machine_the_set_does_not_serve(tmp_path) -> None:
    kgs = sets.load(REPO / "variants" / "flash-attn-4.yaml").set_for("2.14", "13.0")
    assert kgs is not None
    elsewhere = replace(kgs, python=("3.99",))
    with pytest.raises(FaforgeError, match=r"not among the set torch2\.14-cu130's"):
        gate.run(elsewhere, "2.14.1", tmp_path / "no.whl")


@pytest.mark.slow  # a clean venv: pip installs torch 2.14.1 and the set (this machine's wheels, else PyPI: minutes)
def test_the_gate_imports_the_committed_set_here_and_says_so(b40_wheel) -> None:
    kgs = sets.load(REPO / "variants" / "flash-attn-4.yaml").set_for("2.14", "13.0", B40)
    assert kgs is not None
    where, python = gate.here()
    if where not in kgs.platforms or python not in kgs.python:
        pytest.skip(f"the gate runs on a platform and Python the set serves, not {where} {python}")
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < GATE_DISK:  # torch 2.14.1 with its CUDA libraries unpacked: about 6 GB
        pytest.skip(f"{free / 2**30:.1f} GiB free in {tempfile.gettempdir()}, the gate's venv needs ~6 GiB")
    proof = gate.run(kgs, "2.14.1", b40_wheel)
    assert (proof.level, proof.platform, proof.python, proof.by) == ("import-gated", where, python, gate.BY)
    assert proof.date == datetime.date.today().isoformat() and proof.where


def test_a_gated_set_row_reads_back_with_its_proof(project) -> None:
    trimmed = sets.load(project / "variants" / "flash-attn-4.yaml")
    committed = sets.load(REPO / "variants" / "flash-attn-4.yaml")
    proof = sets.Proof("import-gated", "linux-64", "3.11", "build-7.example", "2026-12-07", gate.BY)
    kgs = replace(committed.sets[-1], proofs=(proof,))
    text = trimmed.path.read_text()
    rows, new_text = bump.added(text, [committed.releases[0]], [kgs], ["2.14.1"], trimmed)
    assert new_text.startswith(text.split("\npins:")[0]) and new_text.endswith(rows.split("  # proposed")[-1])
    project_file = trimmed.path
    project_file.write_text(new_text)
    assert sets.load(project_file).sets[-1] == kgs and sets.load(project_file).sets[-1].level == "import-gated"
    assert '        python: "3.11"\n' in rows and '        date: "2026-12-07"\n' in rows

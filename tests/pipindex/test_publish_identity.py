"""One wheel, one file: `faforge publish --index` never publishes two different files of one wheel in one
call, its report names exactly what the index then holds (sha256 included), a wheel it accepts is one
the index's reader (`index --pip`) accepts, and a wheel whose RECORD is missing or lies never reaches the
index. Real `faforge` processes on small real wheels; real pip shows what an installer does with a lying
RECORD (which is why publish must refuse it)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.pipindex.test_publish_index import publish
from tests.release.test_publish import faforge
from tests.support import hostile_wheels as hw
from tests.support import tiny_wheels as tw


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def held(root: Path) -> dict[str, str]:
    folder = root / "files"
    return {p.name: sha(p) for p in folder.iterdir() if p.suffix == ".whl"} if folder.is_dir() else {}


def report(result) -> dict:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def two_files(tmp_path) -> tuple[Path, Path]:
    one = tw.build_wheel(tw.kernel(), tmp_path / "one")
    two = tw.build_wheel(tw.kernel(payload="y = 2\n"), tmp_path / "two")
    assert one.name == two.name and sha(one) != sha(two)
    return one, two


def test_two_files_of_one_name_in_one_publish_are_both_refused(tmp_path, two_files):
    manifest, root = tmp_path / "verification", tmp_path / "index"
    for wheel in two_files:
        tw.record_gates(manifest, wheel)
    result = publish(two_files, manifest, root, "--json")
    data = report(result)
    assert result.returncode == 1, result.stderr
    assert [p["action"] for p in data["packages"]] == ["refused", "refused"]
    assert {p["sha256"] for p in data["packages"]} == {sha(w) for w in two_files}
    assert all("another file of this wheel" in p["detail"] for p in data["packages"])
    assert held(root) == {}


def test_two_names_pip_takes_for_one_wheel_are_refused(tmp_path, two_files):
    """Flash_Attn-… and flash_attn-… are one wheel to pip (normalised name, lowercase tags)."""
    manifest, root = tmp_path / "verification", tmp_path / "index"
    one, two = two_files
    renamed = tmp_path / "renamed" / one.name.replace("libflash_attn_kernels", "LibFlash_Attn_Kernels")
    renamed.parent.mkdir()
    renamed.write_bytes(two.read_bytes())
    for wheel in (one, renamed):
        tw.record_gates(manifest, wheel)
    result = publish([one, renamed], manifest, root, "--json")
    assert result.returncode == 1 and [p["action"] for p in report(result)["packages"]] == ["refused", "refused"]
    assert held(root) == {}


def test_one_file_given_twice_is_published_once(tmp_path, two_files):
    manifest, root = tmp_path / "verification", tmp_path / "index"
    one = two_files[0]
    tw.record_gates(manifest, one)
    result = publish([one, one], manifest, root, "--json")
    data = report(result)
    assert result.returncode == 0, result.stderr
    assert [(p["package"], p["sha256"], p["action"]) for p in data["packages"]] == [(one.name, sha(one), "published")]
    assert held(root) == {one.name: sha(one)}


def test_the_report_names_the_sha256_the_index_holds(tmp_path, two_files):
    manifest, root = tmp_path / "verification", tmp_path / "index"
    one, two = two_files
    for wheel in two_files:
        tw.record_gates(manifest, wheel)
    assert publish([one], manifest, root).returncode == 0
    result = publish([two], manifest, root, "--json")
    row = report(result)["packages"][0]
    assert result.returncode == 1 and row["action"] == "exists" and sha(one)[:12] in row["detail"]
    assert held(root) == {one.name: sha(one)}
    forced = report(publish([two], manifest, root, "--json", "--force"))["packages"][0]
    assert (
        forced["action"] == "published" and held(root) == {two.name: forced["sha256"]} and forced["sha256"] == sha(two)
    )


def respelled(wheel: Path, folder: Path, dist_info: str) -> Path:
    """The wheel with its .dist-info folder spelled `dist_info` (another case or normalisation of its name)."""
    with zipfile.ZipFile(wheel) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    old = next(n.split("/")[0] for n in members if ".dist-info/" in n)
    moved = {n.replace(old, dist_info, 1) if n.startswith(old + "/") else n: b for n, b in members.items()}
    record = f"{dist_info}/RECORD"
    moved[record] = hw._record({n: b for n, b in moved.items() if n != record}, record)
    out = folder / wheel.name
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in moved.items():
            archive.writestr(name, data)
    return out


@pytest.mark.parametrize(
    "dist_info",
    [
        "LibFlash_Attn_Kernels-2.8.3.post2.dist-info",
        "libflash.attn-kernels-2.8.3.post2.dist-info",
        "libflash_attn_kernels-2.8.3.post2+cu130.sm80.90.100.120ptx.philox64.ha5d2e90.dist-info",
    ],
)
def test_a_wheel_publish_accepts_is_one_the_index_reader_accepts(tmp_path, dist_info):
    manifest, root = tmp_path / "verification", tmp_path / "index"
    kernel = respelled(tw.build_wheel(tw.kernel(), tmp_path / "k"), tmp_path / "kernel", dist_info)
    glue = tw.build_wheel(tw.glue(), tmp_path / "glue")
    for wheel in (kernel, glue):
        tw.record_gates(manifest, wheel)
    result = publish([kernel, glue], manifest, root, "--json")
    assert result.returncode == 0, (result.stdout, result.stderr)
    check = faforge("index", "--pip", str(root), "--check")
    assert check.returncode == 0 and "not listed" not in check.stdout, check.stdout + check.stderr
    metadata = (root / "files" / f"{kernel.name}.metadata").read_bytes()
    assert b"Name: libflash-attn-kernels" in metadata


@pytest.mark.parametrize("how", hw.RECORD_LIES)
def test_a_wheel_whose_record_is_missing_or_lies_never_reaches_the_index(tmp_path, how):
    manifest, root = tmp_path / "verification", tmp_path / "index"
    wheel = hw.record_lie(tw.build_wheel(tw.kernel(), tmp_path / "good"), tmp_path / "bad", how)
    tw.record_gates(manifest, wheel)
    result = publish([wheel], manifest, root)
    assert result.returncode == 2 and str(wheel) in result.stderr and "RECORD" in result.stderr, (
        result.stdout,
        result.stderr,
    )
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert held(root) == {}


@pytest.mark.parametrize("how", hw.RECORD_LIES)
def test_what_real_pip_does_with_such_a_wheel(tmp_path, how):
    """Ground truth, pip as installed here: it refuses a wheel without RECORD and installs one whose RECORD
    lies, so the index is the last place such a file can be stopped."""
    wheel = hw.record_lie(tw.build_wheel(tw.kernel(), tmp_path / "good"), tmp_path / "bad", how)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(tmp_path / "site"),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (result.returncode != 0) == (how == "no-record"), result.stdout + result.stderr

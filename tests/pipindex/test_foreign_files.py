"""`faforge index --pip` and `publish --index` rewrite or remove only paths of their own layout that faforge
wrote: a foreign file or folder in the root (a README, a hand-made index folder, someone's index.html in
a subfolder, a hand-edited page) is reported and left byte for byte as it was. Real `faforge` processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipindex.test_publish_index import publish
from tests.release.test_publish import faforge
from tests.support import tiny_wheels as tw

HAND_MADE = b"<html><body><a href='https://example.invalid/x.whl'>x.whl</a></body></html>\n"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("wheels")
    manifest = tmp_path_factory.mktemp("verification")
    built = tw.build_wheel(tw.glue("2.11"), folder), tw.build_wheel(tw.kernel(), folder)
    for wheel in built:
        tw.record_gates(manifest, wheel)
    return *built, manifest


def snapshot(root: Path, rels: list[str]) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in rels}


def plant(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_foreign_files_beside_the_layout_are_reported_and_kept(tmp_path, wheels):
    glue, kernel, manifest = wheels
    root = tmp_path / "index"
    foreign = {
        "README.md": b"our wheels\n",
        "torch2.10-cu130/index.html": HAND_MADE,
        "torch2.11-cu130/docs/index.html": HAND_MADE,
        "torch2.11-cu130/notes.txt": b"notes\n",
    }
    plant(root, foreign)
    result = publish([glue, kernel], manifest, root)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert (root / "torch2.11-cu130" / "flash-attn" / "index.html").is_file()
    for rel in ["README.md", "torch2.10-cu130/index.html", "torch2.11-cu130/docs", "torch2.11-cu130/notes.txt"]:
        assert f"{root}/{rel}" in result.stdout, result.stdout
    healed = faforge("index", "--pip", str(root))
    assert healed.returncode == 1 and "not written by faforge" in healed.stdout, healed.stdout + healed.stderr
    assert snapshot(root, list(foreign)) == foreign


def test_a_foreign_page_where_faforge_writes_stops_publish_before_any_write(tmp_path, wheels):
    glue, kernel, manifest = wheels
    root = tmp_path / "index"
    plant(root, {"torch2.11-cu130/index.html": HAND_MADE})
    for extra in ([], ["--dry-run"]):
        result = publish([glue, kernel], manifest, root, *extra)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stdout + result.stderr
        assert f"{root}/torch2.11-cu130/index.html" in result.stderr and "Traceback" not in result.stderr
    assert not (root / "files").exists() or not any((root / "files").iterdir())
    assert (root / "torch2.11-cu130" / "index.html").read_bytes() == HAND_MADE


def test_healing_removes_its_own_pages_only(tmp_path, wheels):
    """The index loses its wheels: faforge's pages go, a hand-edited one of its folder too (the folder is
    faforge's: its other pages are its rendering); a foreign file in it stays, reported, and so the folder."""
    glue, kernel, manifest = wheels
    root = tmp_path / "index"
    assert publish([glue, kernel], manifest, root).returncode == 0
    edited = root / "torch2.11-cu130" / "flash-attn" / "index.json"
    edited.write_bytes(edited.read_bytes() + b"\n")
    plant(root, {"torch2.11-cu130/flash-attn/notes.txt": b"notes\n", "torch2.10-cu130/index.html": HAND_MADE})
    (root / "files" / glue.name).unlink()
    result = faforge("index", "--pip", str(root))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert not (root / "torch2.11-cu130" / "index.html").exists()  # faforge's own, no longer listed: removed
    assert not edited.exists() and not (root / "torch2.11-cu130" / "flash-attn" / "index.html").exists()
    assert (root / "torch2.11-cu130" / "flash-attn" / "notes.txt").read_bytes() == b"notes\n"
    assert (root / "torch2.10-cu130" / "index.html").read_bytes() == HAND_MADE
    assert "flash-attn/notes.txt" in result.stdout and "torch2.10-cu130/index.html" in result.stdout, result.stdout

"""The docs stay a house people can enter: README.md is the front door (at most 200 lines), and the site under
docs/ builds strict and offline, so a broken link or anchor, or a page left out of mkdocs.yml's nav, fails here
instead of on a reader. The last test breaks a copy of the docs on purpose, so the strictness itself is checked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docs import README, REPO, doc_text, nav_pages, reading_path

MKDOCS = Path(sys.executable).with_name("mkdocs")
README_MAX_LINES = 200


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the site whose mkdocs.yml is in `root`, into `site`."""
    if not MKDOCS.is_file():
        pytest.fail(f"{MKDOCS} is missing: the `test` extra installs Material for MkDocs (pip install -e '.[test]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_the_readme_is_a_front_door():
    lines = len(doc_text(README).splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move the detail into a page under docs/"


def test_the_site_builds_strict_offline(tmp_path):
    result = build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    for page in nav_pages():
        built = Path(page).relative_to("docs").with_suffix("")
        target = tmp_path / "site" / (built.parent if built.name == "index" else built) / "index.html"
        assert target.is_file(), f"{page}: not built ({target})"


def test_no_page_names_an_issue_number():
    """History lives in CHANGELOG.md; a page names the concept ("the pip world"), not the ticket that measured it."""
    for page in reading_path():
        found = re.findall(r"\bissues? [0-9]+", doc_text(page), re.IGNORECASE)
        assert not found, f"{page}: {found}"


@pytest.mark.slow  # two more whole site builds (about 10 s of CPU): the strict build above stays in the fast tier
def test_a_broken_link_or_a_page_outside_the_nav_fails_the_build(tmp_path):
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(REPO / "docs", copy / "docs")
    installing = copy / "docs" / "installing.md"
    installing.write_text(installing.read_text() + "\nSee [the old page](no-such-page.md).\n")
    broken = build(copy, tmp_path / "broken")
    assert broken.returncode != 0 and "no-such-page.md" in broken.stdout + broken.stderr, broken.stdout + broken.stderr

    installing.write_text(doc_text("docs/installing.md"))
    (copy / "docs" / "orphan.md").write_text("# A page nobody can reach\n")
    orphan = build(copy, tmp_path / "orphan")
    assert orphan.returncode != 0 and "orphan.md" in orphan.stdout + orphan.stderr, orphan.stdout + orphan.stderr

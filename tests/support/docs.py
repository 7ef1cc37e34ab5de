"""The docs as the tests read them: README.md, the front door, and the pages under docs/ that mkdocs.yml builds
into the site. A test names the page its text lives on by one of the constants below, so a page that moves or
splits is a change here, never a search through the suite for "README.md"."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

README = "README.md"
INSTALLING = "docs/installing.md"
HOSTING = "docs/hosting.md"
DOCTOR = "docs/doctor.md"
WORLDS = "docs/design/worlds.md"
PIPELINE = "docs/maintaining/pipeline.md"
EXIT_CODES = "docs/reference/exit-codes.md"
ARCHITECTURE = "docs/architecture.md"
CLI_REFERENCE = "docs/reference/cli.md"  # generated from the parsers: its usage lines are not commands to walk


def doc_text(page: str, root: Path = REPO) -> str:
    """The text of one page, named by its path in the repository ('README.md', 'docs/installing.md')."""
    path = root / page
    assert path.is_file(), f"{page}: no such page under {root} (tests/support/docs.py names the pages)"
    return path.read_text()


def nav_pages(root: Path = REPO) -> list[str]:
    """Every page of mkdocs.yml's nav, in the order a reader meets them, as paths in the repository."""
    config = yaml.safe_load((root / "mkdocs.yml").read_text())
    docs_dir = config.get("docs_dir", "docs")

    def walk(items) -> list[str]:
        pages = []
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                pages += walk(value) if isinstance(value, list) else [value]
        return pages

    return [f"{docs_dir}/{page}" for page in walk(config["nav"])]


def reading_path(root: Path = REPO) -> list[str]:
    """README.md, then the site's pages in nav order (the generated CLI reference left out): a newcomer's path."""
    return [README, *(page for page in nav_pages(root) if page != CLI_REFERENCE)]


def all_text(root: Path = REPO) -> str:
    """Every page of the reading path, one after the other."""
    return "\n".join(doc_text(page, root) for page in reading_path(root))


def section(page: str, heading: str, root: Path = REPO) -> str:
    """The text under the heading titled `heading` (any level), up to the next heading of its level or above."""
    lines, out, level, fence = doc_text(page, root).splitlines(), None, 0, False
    for line in lines:
        fence = fence != line.startswith("```")
        found = None if fence or line.startswith("```") else re.match(r"(#+) (.*)", line)
        if out is None:
            if found and found[2].strip() == heading:
                out, level = [], len(found[1])
            continue
        if found and len(found[1]) <= level:
            break
        out.append(line)
    assert out is not None, f"{page}: no heading {heading!r}"
    return "\n".join(out) + "\n"


def fenced_blocks(page: str, language: str, root: Path = REPO) -> list[str]:
    """The bodies of the page's fenced blocks of `language` (```bash, ```toml ...), in order."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", doc_text(page, root), re.MULTILINE | re.DOTALL)


def bash_blocks(page: str, root: Path = REPO) -> list[str]:
    return fenced_blocks(page, "bash", root)


def marked_block(page: str, marker: str, language: str, root: Path = REPO) -> str:
    """The one fenced block right under `<!-- marker -->`, which the tests that run it look for."""
    match = re.search(
        rf"<!-- {re.escape(marker)} -->\n```{re.escape(language)}\n(.*?)^```",
        doc_text(page, root),
        re.MULTILINE | re.DOTALL,
    )
    assert match, f"{page} lost its `{marker}` block"
    return match.group(1)

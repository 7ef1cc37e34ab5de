"""The names of a wheel index root, the only paths faforge writes there (faforge.sandbox keeps them):

ROOT/files/W                          every wheel exactly once (W a plain *.whl name)
ROOT/files/W.metadata                 its METADATA (PEP 658), beside it
ROOT/torch2.11-cu130/index.html       PEP 503 root page of that index
ROOT/torch2.11-cu130/index.json       its PEP 691 JSON
ROOT/torch2.11-cu130/PROJECT/index.*  one project's page (PROJECT normalised, PEP 503)
ROOT/.faforge.lock                    the writers' lock
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from faforge.sandbox import PART_SUFFIX, Sandbox

FILES = "files"
WHEEL_SUFFIX = ".whl"
METADATA_SUFFIX = ".metadata"  # PEP 658: the core metadata file is the wheel's URL plus .metadata
LOCK_FILE = ".faforge.lock"
HTML_PAGE = "index.html"
JSON_PAGE = "index.json"
PAGES = (HTML_PAGE, JSON_PAGE)
HTML_TYPE = "text/html"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"  # PEP 691
API_VERSION = "1.1"  # PEP 700: sizes and the versions list
INDEX_NAME = re.compile(r"torch(?P<torch>[0-9]+\.[0-9]+)-cu(?P<cuda>[0-9]+)")
LINK_HINT = (
    "faforge follows no link inside a wheel index; replace the link with the real folder or file "
    "(or point --index at the real index folder)"
)


def index_name(torch_minor: str, cuda: str) -> str:
    """'2.11', '130' -> 'torch2.11-cu130', as PyTorch names its per-CUDA indexes (download.pytorch.org/whl/cu130/)."""
    return f"torch{torch_minor}-cu{cuda}"


def parse_index_name(name: str) -> tuple[str, str] | None:
    """'torch2.11-cu130' -> ('2.11', '130'); None for any other folder name."""
    match = INDEX_NAME.fullmatch(name)
    return (match["torch"], match["cuda"]) if match else None


def sandbox(root: Path) -> Sandbox:
    return Sandbox(root, "wheel index", LINK_HINT)


def index_folders(root: Path) -> list[str]:
    """The index folders below `root` (real folders only: check_links refuses linked ones first)."""
    if not root.is_dir():
        return []
    return sorted(
        n for n in os.listdir(root) if parse_index_name(n) and (root / n).is_dir() and not (root / n).is_symlink()
    )


def check_links(root: Path) -> None:
    """Exit 2 for a link anywhere faforge reads or writes below `root`: files/ and what is in it, every index
    folder, its pages, its project folders and their pages, the lock file (before any write)."""
    if not root.is_dir():
        return
    box = sandbox(root)
    for name in sorted(os.listdir(root)):
        if name == FILES or name == LOCK_FILE or parse_index_name(name):
            box.refuse_link(root / name)
    if (root / FILES).is_dir():
        for name in sorted(os.listdir(root / FILES)):
            box.refuse_link(root / FILES / name, regular=name.endswith((WHEEL_SUFFIX, METADATA_SUFFIX, PART_SUFFIX)))
    for index in index_folders(root):
        check_index_links(root, index)


def check_index_links(root: Path, index: str) -> None:
    """Exit 2 for a link in one index folder of `root` (the folder itself, its pages, its project folders and
    their pages) or a page that is not a regular file: what every reader of the index refuses before reading."""
    box = sandbox(root)
    box.refuse_link(root / index)
    for name in sorted(os.listdir(root / index)):
        path = root / index / name
        box.refuse_link(path, regular=name in PAGES or name.endswith(PART_SUFFIX))
        if path.is_dir():
            for page in sorted(os.listdir(path)):
                box.refuse_link(path / page, regular=page in PAGES or page.endswith(PART_SUFFIX))

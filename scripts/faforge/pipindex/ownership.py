"""What in a wheel index root faforge wrote, and may therefore rewrite or remove (faforge.pipindex.folder).

A root is shared: someone may keep a README beside the indexes, a hand-made index folder, a page of their
own in a subfolder. faforge touches only paths of its own layout (faforge.pipindex.layout) that it wrote:
- an index folder is faforge's when one of its pages (INDEX/index.*, or INDEX/PROJECT/index.* of a project
  the index serves) is byte for byte what faforge renders (faforge.pipindex.pages) for the links it
  holds. Pages are pure functions of their links, so this needs no marker and no ledger. Every page of
  such a folder is faforge's to rewrite (a cut or tampered one is healed) or remove; a folder whose pages
  are all someone else's (a hand-made index folder) is foreign, page by page.
- anything else beside the layout (another file or folder in the root, in an index folder or in a
  project folder) is foreign. Foreign things are reported (folder.BadFile), never removed or rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path

from faforge.errors import FaforgeError
from faforge.pipindex import layout, pages
from faforge.pipindex.parse import PageError, parse_html, parse_json
from faforge.pipindex.placement import PROJECTS
from faforge.pipwheel.filename import parse_wheel_filename
from faforge.sandbox import PART_SUFFIX

FOREIGN = "not written by faforge (not part of the index layout it writes): left as it is"
FOREIGN_PAGE = "a page faforge did not write (not its rendering of the links it holds): left as it is"


def rendered(rel: str, data: bytes) -> bool:
    """Whether `data`, at INDEX/index.* or INDEX/PROJECT/index.* (`rel`), is byte for byte faforge's page."""
    *folders, name = rel.split("/")
    url = "http://index.invalid/" + "".join(f"{f}/" for f in folders)
    project = folders[1] if len(folders) == 2 else None
    try:
        page = (parse_json if name == layout.JSON_PAGE else parse_html)(data, url, project=project)
        if project is None:
            projects = list(page.projects)
            return data == (
                pages.root_json(projects) if name == layout.JSON_PAGE else pages.root_html(folders[0], projects)
            )
        links = [
            pages.Link(
                filename=f.filename,
                sha256=f.hashes.get("sha256", ""),
                size=f.size or 0,
                version=parse_wheel_filename(f.filename).version,
                requires_python=f.requires_python,
                metadata_sha256=f.core_metadata if isinstance(f.core_metadata, str) else None,
            )
            for f in page.files
        ]
        return data == (pages.project_json if name == layout.JSON_PAGE else pages.project_html)(project, links)
    except (PageError, FaforgeError, ValueError, TypeError):
        return False


def foreign_pages(present: dict[str, bytes]) -> frozenset[str]:
    """The pages of `present` (relative path -> bytes, files/ aside) in index folders that are not faforge's."""
    pages_of: dict[str, list[str]] = {}
    for rel in present:
        if not rel.startswith(f"{layout.FILES}/"):
            pages_of.setdefault(rel.split("/")[0], []).append(rel)
    return frozenset(
        rel for index, rels in pages_of.items() if not any(rendered(r, present[r]) for r in rels) for rel in rels
    )


def foreign_entries(root: Path) -> list[tuple[str, str]]:
    """(path relative to the root, why) for every entry beside the layout: in the root, in an index folder,
    in a project folder (files/ is judged by the survey, which reads what is there)."""
    if not root.is_dir():
        return []
    out = []
    indexes = set(layout.index_folders(root))
    for name in sorted(os.listdir(root)):
        if name not in (layout.FILES, layout.LOCK_FILE) and name not in indexes:
            out.append((name, FOREIGN))
    for index in sorted(indexes):
        for name in sorted(os.listdir(root / index)):
            path = root / index / name
            if name in PROJECTS and path.is_dir():
                out += [
                    (f"{index}/{name}/{page}", FOREIGN) for page in sorted(os.listdir(path)) if not _ours_by_name(page)
                ]
            elif not _ours_by_name(name):
                out.append((f"{index}/{name}", FOREIGN))
    return out


def _ours_by_name(name: str) -> bool:
    return name in layout.PAGES or (name.startswith(".") and name.endswith(PART_SUFFIX))


def refuse_blocked(root: Path, blocked: list[str]) -> None:
    """Exit 2 before any write when a page faforge must write stands where a foreign one is."""
    if blocked:
        raise FaforgeError(
            f"{root}/{blocked[0]} is a page faforge did not write, where the index's own page goes; "
            "faforge never rewrites or removes it",
            input=f"{root}/{blocked[0]}",
            hint="move it (or its folder) out of the wheel index root, then run the command again",
        )

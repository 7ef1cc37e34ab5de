"""The channel page: which flash-attn builds a channel holds, as static HTML plus JSON.

Users pick platform, C++ ABI and python, then a torch x CUDA cell, and copy the exact
install lines (faforge.channel.instructions) for that package. Each family gives its own list of
entries through its `page` namespace (PageFamily): flash-attn's cells make the grid, another family's
packages are listed beside it, each with its own install lines. The lines are computed here and in the
families, not in the page's script; the page only fills in its own URL when it is served from the
channel folder itself (install channel `here`).

Beside the conda lines stand each family's pip and uv lines (PageFamily.pip_entries): for flash-attn, those
of the matrix's pip cells for PyPI's torch of that minor, CUDA, ABI and python, each installed from the wheel
index of its torch minor and CUDA (faforge.pipindex.instructions). Given the wheel index (a local root or its
base URL), each entry says whether its wheel is published there yet.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from faforge.channel.instructions import conda_command, environment_yml, match_spec
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix
from faforge.matrix.releases import ReleaseTable
from faforge.release.package import PackageFacts, facts_from_metadata

if TYPE_CHECKING:
    from rattler import RepoDataRecord  # py-rattler loads only where a page is written

PAGE_VERSION = 1
TEMPLATE = Path(__file__).with_name("page.html")
DATA_FILE = f"{FLASH_ATTN.package}-builds.json"
HERE = "here"
# Stands for the page's own channel URL until the page's script replaces it (install channel `here`).
CHANNEL_PLACEHOLDER = "@CHANNEL@"


class PageFamily(Protocol):
    """A family's part of the page (its module's `page`)."""

    @property
    def key(self) -> str:
        """Its list's key in the page's JSON."""
        ...

    @property
    def conda_packages(self) -> tuple[str, ...]:
        """The conda packages of it the page asks the channel for."""
        ...

    def entries(self, packages: Sequence[PackageFacts], channel: str, table: ReleaseTable) -> list[dict]:
        """Its entries, in the page's order, for these packages of the channel (those named conda_packages),
        each with its install lines from `channel` (install_lines); a package it cannot list is left out."""
        ...

    def pip_entries(self, matrix: Matrix, base: str, index: str | None) -> list[dict]:
        """Its pip, uv and requirements.txt lines, from the wheel indexes under `base`; with `index` (a wheel
        index's root folder or base URL, read), whether each entry's wheel is published there (None: not read)."""
        ...

    def summary(self, entries: list[dict]) -> str | None:
        """What `faforge page` says it listed ("12 packages"); None: nothing worth saying."""
        ...


class _HasPage(Protocol):
    @property
    def page(self) -> PageFamily: ...


def install_lines(facts: PackageFacts, channels: list[str]) -> dict:
    """The exact install lines of one package, from these channels in this order."""
    spec = match_spec(facts.name, facts.version, facts.build)
    return {
        "install": conda_command(spec, channels),
        "environment_yml": environment_yml(spec, channels, name=facts.name),
    }


def page_data(
    records: Iterable[RepoDataRecord],
    table: ReleaseTable,
    install_channel: str,
    families: Sequence[_HasPage],
    pip: list[dict] | None = None,
    pip_index: str | None = None,
) -> dict:
    """The page's data: each family's entries under its key (PageFamily), then the families' pip entries
    (PageFamily.pip_entries) and the wheel index `pip_index` they were read from (None: not read)."""
    channel = CHANNEL_PLACEHOLDER if install_channel == HERE else install_channel
    facts = [
        facts_from_metadata(
            path=Path(record.file_name),
            name=record.name.normalized,
            version=str(record.version),
            build=str(record.build),
            subdir=str(record.subdir),
            depends=[str(d) for d in record.depends],
            sha256=record.sha256.hex() if record.sha256 else "",
        )
        for record in records
    ]
    listed = {
        f.page.key: f.page.entries([p for p in facts if p.name in f.page.conda_packages], channel, table)
        for f in families
    }
    return {
        "version": PAGE_VERSION,
        "generated": generated_at(),
        "install_channel": None if install_channel == HERE else install_channel,
        "channel_placeholder": CHANNEL_PLACEHOLDER,
        **listed,
        "pip_index": pip_index,
        "pip": pip or [],
    }


def generated_at() -> str:
    """When the page was made: now, or SOURCE_DATE_EPOCH when set, so two builds of one channel's page are
    byte for byte the same (https://reproducible-builds.org/specs/source-date-epoch/)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        return datetime.now(timezone.utc).isoformat(timespec="seconds")
    if not epoch.isdecimal() or len(epoch) > 12:
        raise FaforgeError(
            f"SOURCE_DATE_EPOCH={epoch[:40]!r} is not a count of seconds since 1970",
            hint="set it to a whole number such as `git log -1 --format=%ct`, or unset it",
        )
    return datetime.fromtimestamp(int(epoch), timezone.utc).isoformat(timespec="seconds")


def with_channel(data: dict, channel: str, keys: Sequence[str]) -> dict:
    """The data with the page's placeholder replaced in the install lines of the lists under `keys` (the
    families'): a JSON file, unlike the page, cannot learn its own URL."""
    if data["install_channel"] is not None:
        return data
    fill = lambda text: text.replace(CHANNEL_PLACEHOLDER, channel)  # noqa: E731 (a one-line helper)
    filled = {
        key: [{**p, "install": fill(p["install"]), "environment_yml": fill(p["environment_yml"])} for p in data[key]]
        for key in keys
    }
    return {**data, "install_channel": channel, **filled}


def write_page(data: dict, out_dir: Path, file_channel: str, keys: Sequence[str]) -> tuple[Path, Path]:
    """index.html (which fills in its own URL for `here`) and the JSON file (which names `file_channel` instead
    in the lists under `keys`, the families')."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data_path = out_dir / DATA_FILE
    data_path.write_text(json.dumps(with_channel(data, file_channel, keys), indent=2) + "\n")
    # Embedded too, so the page also works opened from disk (file://), where fetch() is blocked.
    embedded = json.dumps(data).replace("</", "<\\/")
    text = (
        TEMPLATE.read_text()
        .replace("@DATA@", embedded)
        .replace("@TITLE@", html.escape(f"{FLASH_ATTN.package} builds ({len(data['packages'])})"))
    )
    page_path = out_dir / "index.html"
    page_path.write_text(text)
    return page_path, data_path


def conda_version(text: str) -> object:
    """A package version as conda orders it (py-rattler, loaded only where a page is written)."""
    from rattler import Version  # noqa: PLC0415 (py-rattler loads only where a page is written)

    return Version(text)

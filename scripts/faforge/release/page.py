"""The channel page: which flash-attn builds a channel holds, as static HTML plus JSON.

Users pick platform, C++ ABI and python, then a torch x CUDA cell, and copy the exact
install lines (faforge.channel.instructions) for that package. The lines are computed here,
not in the page's script; the page only fills in its own URL when it is served from the
channel folder itself (install channel `here`).
"""

from __future__ import annotations

import html
import json
from datetime import datetime, timezone
from pathlib import Path

from rattler import Version

from faforge.channel.instructions import conda_command, environment_yml, match_spec
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.matrix.releases import ReleaseTable
from faforge.release.package import facts_from_metadata
from faforge.versions import vtuple

PAGE_VERSION = 1
TEMPLATE = Path(__file__).with_name("page.html")
DATA_FILE = f"{FLASH_ATTN.package}-builds.json"
HERE = "here"
# Stands for the page's own channel URL until the page's script replaces it (install channel `here`).
CHANNEL_PLACEHOLDER = "@CHANNEL@"


def world_for_abi(table: ReleaseTable, abi: int):
    for world in table.worlds.values():
        if world.cxx11_abi == abi:
            return world
    raise FaforgeError(f"no torch world in {table.path} uses C++ ABI {abi}", hint="the channel holds a package this checkout's release table does not know")


def page_data(records, table: ReleaseTable, install_channel: str) -> dict:
    channel = CHANNEL_PLACEHOLDER if install_channel == HERE else install_channel
    packages = []
    for record in records:
        facts = facts_from_metadata(
            path=Path(record.file_name), name=record.name.normalized, version=str(record.version), build=str(record.build),
            subdir=str(record.subdir), depends=[str(d) for d in record.depends], sha256=record.sha256.hex() if record.sha256 else "",
        )
        if facts.cell_id is None:
            continue  # not a faforge cell build (no python/torch/CUDA/ABI in its build string)
        world = world_for_abi(table, facts.cxx11_abi)
        channels = [channel, *world.channels]
        spec = match_spec(facts.name, facts.version, facts.build)
        packages.append({
            "cell": facts.cell_id,
            "platform": facts.subdir,
            "python": facts.python,
            "torch": facts.torch,
            "torch_minor": facts.torch_minor,
            "cuda": facts.cuda,
            "cxx11_abi": facts.cxx11_abi,
            "world": world.name,
            "filename": facts.filename,
            "version": facts.version,
            "build": facts.build,
            "sha256": facts.sha256,
            "install": conda_command(spec, channels),
            "environment_yml": environment_yml(spec, channels),
        })
    # Newest flash-attn first, so the page's grid shows the newest build of each cell.
    packages.sort(key=lambda p: (p["platform"], vtuple(p["torch"]), vtuple(p["cuda"]), p["python"], Version(p["version"])), reverse=True)
    return {
        "version": PAGE_VERSION,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "install_channel": None if install_channel == HERE else install_channel,
        "channel_placeholder": CHANNEL_PLACEHOLDER,
        "packages": packages,
    }


def with_channel(data: dict, channel: str) -> dict:
    """The data with the page's placeholder replaced: a JSON file, unlike the page, cannot learn its own URL."""
    if data["install_channel"] is not None:
        return data
    fill = lambda text: text.replace(CHANNEL_PLACEHOLDER, channel)  # noqa: E731
    packages = [{**p, "install": fill(p["install"]), "environment_yml": fill(p["environment_yml"])} for p in data["packages"]]
    return {**data, "install_channel": channel, "packages": packages}


def write_page(data: dict, out_dir: Path, file_channel: str) -> tuple[Path, Path]:
    """index.html (which fills in its own URL for `here`) and the JSON file (which names `file_channel` instead)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data_path = out_dir / DATA_FILE
    data_path.write_text(json.dumps(with_channel(data, file_channel), indent=2) + "\n")
    # Embedded too, so the page also works opened from disk (file://), where fetch() is blocked.
    embedded = json.dumps(data).replace("</", "<\\/")
    text = TEMPLATE.read_text().replace("@DATA@", embedded).replace("@TITLE@", html.escape(f"{FLASH_ATTN.package} builds ({len(data['packages'])})"))
    page_path = out_dir / "index.html"
    page_path.write_text(text)
    return page_path, data_path

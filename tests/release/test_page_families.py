"""The page asks each family for its list (faforge.release.page.PageFamily): a next family, here a pure-Python
noarch package whose install lines pin its compiled dependencies, gets its own list and its own lines by
being handed to the page, with no edit to the page's code; the JSON file names the channel in its lines too."""

from __future__ import annotations

import json
from types import SimpleNamespace

from faforge.channel.instructions import conda_command, match_spec
from faforge.channel.local import PackageSpec, assemble, index
from faforge.channel.repodata import query
from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from faforge.release.page import CHANNEL_PLACEHOLDER, HERE, install_lines, page_data, write_page

NEXT = "flash-attn-4"
PINS = ("cuda-python ==13.0.1", "nvidia-cutlass-dsl ==4.2.1")  # its known-good dependency set


def next_entries(packages, channel, table):
    return [
        {"build": p.build, "pins": list(PINS), **install_lines(p, [channel, "conda-forge"])}
        for p in sorted(packages, key=lambda p: p.build)
    ]


NEXT_FAMILY = SimpleNamespace(
    page=SimpleNamespace(
        key="flash_attn_4",
        conda_packages=(NEXT,),
        entries=next_entries,
        # Its pip line installs the beta with its dependency set held by a constraints file.
        pip_entries=lambda matrix, base, index: [
            {"pip_install": f"python -m pip install {NEXT}==4.0.0b1 -c {base}/{NEXT}/constraints.txt"}
        ],
        summary=lambda found: f"{len(found)} {NEXT} packages",
    )
)


def test_a_next_family_gets_its_list_and_lines(tmp_path):
    channel = tmp_path / "channel"
    build = "py_faforge_h1234567_0"
    assemble(PackageSpec(NEXT, "4.0.0b1", build, "noarch", depends=("python >=3.10", *PINS)), channel)
    index(channel)
    families = [*FAMILIES, NEXT_FAMILY]
    names = [name for f in families for name in f.page.conda_packages]
    records = query(str(channel), names, ["linux-64"])
    matrix = load_matrix()
    pip = [e for f in families for e in f.page.pip_entries(matrix, "https://example.org/wheels", None)]
    data = page_data(records, matrix.table, HERE, families, pip)
    assert list(data)[4:] == ["packages", "flash_attn_3", "flash_attn_4", "pip_index", "pip"]
    assert data["packages"] == data["flash_attn_3"] == []
    assert data["pip"][-1]["pip_install"].endswith("-c https://example.org/wheels/flash-attn-4/constraints.txt")
    assert len(data["pip"]) == len(matrix.pip_cells) + 1, "flash-attn's pip cells, then the next family's"
    [entry] = data["flash_attn_4"]
    spec = match_spec(NEXT, "4.0.0b1", build)
    assert entry["install"] == conda_command(spec, [CHANNEL_PLACEHOLDER, "conda-forge"])
    keys = [f.page.key for f in families]
    _, data_file = write_page(data, tmp_path / "page", "https://example.org/ch", keys)
    written = json.loads(data_file.read_text())
    assert written["flash_attn_4"][0]["install"] == conda_command(spec, ["https://example.org/ch", "conda-forge"])
    assert [f.page.summary(data[f.page.key]) for f in families] == ["0 packages", None, f"1 {NEXT} packages"]

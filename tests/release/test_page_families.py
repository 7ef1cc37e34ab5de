"""The page asks each family for its list (faforge.release.page.PageFamily): flash-attn-4, a pure-Python noarch
package whose install lines pin its compiled dependencies, gets its own list, one entry per known-good set, by being a
family of the registry, with no edit to the page's code; the JSON file names the channel in its lines too."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from faforge.channel.instructions import conda_command, match_spec
from faforge.channel.local import PackageSpec, assemble, index
from faforge.channel.repodata import query
from faforge.families.flash_attn_4 import sets
from faforge.families.flash_attn_4.lines import pins, pip_line, uv_line
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN_4
from faforge.matrix import load_matrix
from faforge.release.page import CHANNEL_PLACEHOLDER, HERE, page_data, write_page

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "page.json").read_text())
BASE = "https://example.org/wheels"


def test_flash_attn_4_gets_its_list_of_sets_with_conda_and_pip_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("FAFORGE_PIP_INDEX", BASE)
    data_file = sets.load()
    known = data_file.set_for("2.14", "13.0")
    channel = tmp_path / "channel"
    build = f"torch{known.torch}_cu{known.cuda.replace('.', '')}_pyh1234567_0"
    depends = ("python >=3.10,<3.13", "pytorch >=2.14,<2.15.0a0 cuda130*", "nvidia-cutlass-dsl ==4.8.1")
    assemble(PackageSpec(FLASH_ATTN_4.package, known.version, build, "noarch", depends=depends), channel)
    index(channel)
    names = [name for f in FAMILIES for name in f.page.conda_packages]
    records = query(str(channel), names, ["linux-64"])
    matrix = load_matrix()
    pip = [e for f in FAMILIES for e in f.page.pip_entries(matrix, BASE, None)]
    data = page_data(records, matrix.table, HERE, FAMILIES, pip)
    jsonschema.validate(data, SCHEMA)
    assert list(data)[4:] == ["packages", "flash_attn_3", "flash_attn_4", "pip_index", "pip"]
    assert data["packages"] == data["flash_attn_3"] == []
    assert len(data["pip"]) == len(matrix.pip_cells), "the pip list stays the grid's pip cells"
    listed = {e["id"]: e for e in data["flash_attn_4"]}
    assert sorted(listed) == sorted(s.id for s in data_file.sets)
    entry, other = listed[known.id], next(e for i, e in listed.items() if i != known.id)
    spec = match_spec(FLASH_ATTN_4.package, known.version, build)
    assert entry["install"] == conda_command(spec, [CHANNEL_PLACEHOLDER, "conda-forge"]) and entry["build"] == build
    assert other["install"] == "" and other["filename"] is None, "no package of that set in the channel"
    index_url = f"{BASE}/{known.id}/"
    assert entry["pip_install"] == pip_line(index_url, pins(known, entry["torch"]))
    assert entry["uv_install"] == uv_line(index_url, pins(known, entry["torch"]))
    assert entry["pip_install"].endswith(f"torch=={entry['torch']} {FLASH_ATTN_4.package}==4.0.0b40+cu130.torch2.14")
    assert "--pre" not in entry["pip_install"] + entry["uv_install"], "an exact pin admits the pre-release"
    assert entry["requires"] == data_file.requirements(known) and entry["level"] == known.level
    keys = [f.page.key for f in FAMILIES]
    _, written_file = write_page(data, tmp_path / "page", "https://example.org/ch", keys)
    written = {e["id"]: e for e in json.loads(written_file.read_text())["flash_attn_4"]}
    assert written[known.id]["install"] == conda_command(spec, ["https://example.org/ch", "conda-forge"])
    summaries = [f.page.summary(data[f.page.key]) for f in FAMILIES]
    assert summaries == ["0 packages", None, f"{len(listed)} {FLASH_ATTN_4.package} sets (1 in the channel)"]

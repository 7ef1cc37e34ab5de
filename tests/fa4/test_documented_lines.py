"""FlashAttention-4's install lines in README.md and the installing page are the page's (faforge page: its entry of
each known-good set), so the docs cannot drift from the lines tests/pipworld/test_fa4_lines.py runs with real pip
and uv; every set is in the installing page's table, and the conda lines name a set's torch minor."""

from __future__ import annotations

import re
import shlex

import pytest

from faforge.families.flash_attn_4 import page, sets
from faforge.family import FLASH_ATTN_4
from faforge.matrix import load_matrix
from tests.support.docs import INSTALLING, README, doc_text, fenced_blocks

DATA = sets.load()
PIN = f"{FLASH_ATTN_4.package}=="


def documented(page_name: str) -> list[str]:
    """The bash lines of a page that install FA4 (continuations joined, spaces collapsed)."""
    lines = [line for block in fenced_blocks(page_name, "bash") for line in block.replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in lines if FLASH_ATTN_4.package in line and "install" in line]


@pytest.fixture(scope="module")
def entries() -> list[dict]:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("FAFORGE_PIP_INDEX", raising=False)  # the published base, as the docs name it
        return page.entries([], "faforge", load_matrix().table)


@pytest.mark.parametrize("page_name", [README, INSTALLING])
def test_each_documented_pip_and_uv_line_is_a_page_line(page_name, entries):
    lines = [line for line in documented(page_name) if PIN in line]
    assert {line.split()[0] for line in lines} == {"python", "uv"}, lines
    printed = {e[key] for e in entries for key in ("pip_install", "uv_install")}
    for line in lines:
        assert line in printed, f"{page_name}: {line!r} is none of the page's lines"
        assert "--pre" not in shlex.split(line) and re.search(r"\btorch==\d+\.\d+\.\d+ ", line), line


@pytest.mark.parametrize("page_name", [README, INSTALLING])
def test_each_documented_conda_line_names_a_sets_torch_minor(page_name):
    lines = [line for line in documented(page_name) if line.startswith("conda install")]
    assert lines, f"{page_name}: no conda line for {FLASH_ATTN_4.package}"
    for line in lines:
        words = shlex.split(line)
        assert words[2:6] == ["-c", "faforge", "-c", "conda-forge"] and FLASH_ATTN_4.package in words, line
        torch = next(w for w in words if w.startswith("pytorch="))
        assert torch.removeprefix("pytorch=") in {s.torch for s in DATA.sets}, line


def test_the_installing_page_lists_every_set(entries):
    text = doc_text(INSTALLING)
    for entry in entries:
        assert f"`{PIN}{entry['wheel_version']}`" in text and entry["index_url"] in text, entry["id"]

"""The architecture page's repository layout and layers match the tree: every package of scripts/faforge/ has
its line, in the layer tests/test_layers.py gives it, and every top-level module is named."""

from __future__ import annotations

import re

from tests.support.docs import ARCHITECTURE, REPO, section
from tests.test_layers import BASE, LAYERS

PACKAGE = REPO / "scripts" / "faforge"


def layout_rows() -> list[tuple[str, list[str]]]:
    layers = section(ARCHITECTURE, "Layers: the rooms of `scripts/faforge/`")
    rows = re.findall(r"^\| (\w+) \| (.+?) \| .+ \|$", layers, re.MULTILINE)
    return [(layer, re.findall(r"`(\w+)/?`", names)) for layer, names in rows if layer != "layer"]


def test_every_package_has_its_line_in_its_layer():
    listed = {name: layer for layer, names in layout_rows() for name in names}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert packages | {"cli"} <= set(listed), sorted(packages - set(listed))
    assert modules - {"cli"} <= {n for n, layer in listed.items() if layer == "base"}, sorted(modules - set(listed))
    for row, units in enumerate(LAYERS[1:], start=1):  # LAYERS[0] is __main__
        for unit in units:
            assert listed[unit] == str(row), (
                f"{unit}: {ARCHITECTURE} says layer {listed[unit]}, tests/test_layers.py {row}"
            )
    assert {n for n, layer in listed.items() if layer == "base"} <= set(BASE)


def test_every_named_path_exists():
    block = section(ARCHITECTURE, "Repository layout").split("```")[1]
    for line in block.strip().splitlines():
        assert (REPO / line.split()[0]).exists(), line

"""The conda subdir <-> machine table has one home, faforge.abi.platforms: a second copy in another module
drifts (one had ppc64le, another not), so a literal that pairs a subdir with its machine fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from faforge.abi.platforms import MACHINE_PLATFORM, PLATFORM_MACHINE, PLATFORMS, SUBDIR_MACHINE

PRODUCT = Path(__file__).resolve().parents[2] / "scripts" / "faforge"
HOME = PRODUCT / "abi" / "platforms.py"


def copies(path: Path) -> list[str]:
    """'path:line' for each dict literal of the module that pairs a conda subdir with its machine, either way."""
    pairs = {*SUBDIR_MACHINE.items(), *((m, s) for s, m in SUBDIR_MACHINE.items())}
    return [
        f"{path}:{node.lineno}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Dict)
        and any(
            isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and (k.value, v.value) in pairs
            for k, v in zip(node.keys, node.values, strict=True)
        )
    ]


def test_no_module_copies_the_platform_table():
    found = [line for path in sorted(PRODUCT.rglob("*.py")) if path != HOME for line in copies(path)]
    assert not found, "read faforge.abi.platforms instead:\n" + "\n".join(found)


def test_the_check_finds_a_copy_either_way(tmp_path):
    module = tmp_path / "copy.py"
    module.write_text('A = {"linux-64": "x86_64"}\nB = {"aarch64": "linux-aarch64"}\nC = {"linux-64": "cu129"}\n')
    assert copies(module) == [f"{module}:1", f"{module}:2"]


def test_a_built_platform_maps_to_its_machine_and_back():
    assert set(PLATFORMS) <= set(SUBDIR_MACHINE)
    assert {MACHINE_PLATFORM[machine] for machine in PLATFORM_MACHINE.values()} == set(PLATFORMS)
    assert list(PLATFORM_MACHINE) == list(PLATFORMS)  # listings, choices and error messages keep this order

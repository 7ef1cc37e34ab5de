"""A family's names are spelled once, in faforge/family.py: a second family (FA3)
then comes as a second `Family` row, not as a hunt for string tests on package names.

Every string constant of a product module under scripts/faforge/ counts, docstrings excepted; an
f-string's literal parts count too, so a help text names a family through its `Family` fields."""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from faforge.family import Family, families
from faforge.matrix.render import recipe_output_names

REPO = Path(__file__).resolve().parents[1]
PRODUCT = REPO / "scripts" / "faforge"
DEFINITION = PRODUCT / "family.py"


def family_names() -> set[str]:
    return {
        getattr(family, f.name)
        for family in families()
        for f in fields(family)
        if isinstance(getattr(family, f.name), str)
    }


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, nodes)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }


def spelled_names(path: Path, names: set[str]) -> list[str]:
    """'path:line: literal' for each string constant of the module that contains a family name."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = _docstrings(tree)
    return [
        f"{path}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and any(name in node.value for name in names)
    ]


def product_modules() -> list[Path]:
    return [p for p in sorted(PRODUCT.rglob("*.py")) if p != DEFINITION]


def test_no_product_module_spells_a_family_name():
    names = family_names()
    found = [line for path in product_modules() for line in spelled_names(path, names)]
    assert not found, 'spell these through faforge.family (e.g. f"{FLASH_ATTN.package} ..."):\n' + "\n".join(found)


def test_the_check_finds_a_literal_and_spares_docstrings_and_references(tmp_path):
    module = tmp_path / "synthetic.py"
    module.write_text(
        '"""Builds libflash-attn-kernels."""\n'
        "from faforge.family import FLASH_ATTN\n"
        "HINT = f'pass a {FLASH_ATTN.package} sdist'\n"
        "def kernels():\n"
        '    """The flash-attn kernel package."""\n'
        "    return 'libflash-attn-kernels'  # a literal\n"
    )
    assert spelled_names(module, family_names()) == [f"{module}:6: 'libflash-attn-kernels'"]


@pytest.mark.parametrize("family", families(), ids=lambda f: f.package)
def test_a_family_names_what_its_recipe_and_data_hold(family: Family):
    recipe = REPO / family.recipe_dir
    assert (recipe / family.build_script).is_file()
    outputs = {
        family.package,
        getattr(family, "kernel_package", family.package),
    }  # a stable-ABI family has no kernel package
    data = yaml.safe_load((recipe / "recipe.yaml").read_text())
    single = data.get("package", {}).get("name", "").replace("${{ name }}", str(data.get("context", {}).get("name")))
    assert outputs <= set(recipe_output_names(recipe / "recipe.yaml") or [single])
    assert family.key in yaml.safe_load((REPO / "variants" / "matrix.yaml").read_text())


def test_no_plain_string_holds_a_family_field_placeholder():
    """A family name spelled through its field must be in an f-string: `"build {FLASH_ATTN.package}"` without
    the f (one half of an implicit concatenation with an f-string) printed the braces to users of doctor."""
    found = []
    for path in [*product_modules(), DEFINITION]:
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))].lower()
            if token.type == tokenize.STRING and "f" not in prefix and "{FLASH_ATTN" in token.string:
                found.append(f"{path}:{token.start[0]}: {token.string[:80]}")
    assert not found, "add the f prefix:\n" + "\n".join(found)

"""A family's names are spelled once, in faforge/family.py: a second family (FA3)
then comes as a second `Family` row, not as a hunt for string tests on package names.

Every string constant of a product module under scripts/faforge/ counts, docstrings excepted; an
f-string's literal parts count too, so a help text names a family through its `Family` fields.

A family's behaviour lives in its package, scripts/faforge/families/<name>/, behind the stages' protocols: outside
it (and family.py) no product module names a family other than flash-attn 2 in any token (identifier, string,
comment, docstring), nor branches on flash-attn 2. flash-attn 2's names as the project's own words (`flash-attn`)
do not count; they are spelled through faforge.family (the test above)."""

from __future__ import annotations

import ast
import io
import re
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
FAMILIES = PRODUCT / "families"
# A family package's module path (faforge.families.flash_attn_3.cost, .../families/flash_attn_3/gpu_suite) is where
# its behaviour lives, named as an import names it, not a spelling of the family's names.
FAMILY_PACKAGE = re.compile(r"families[./][a-z0-9_]+")

# Another family than flash-attn 2, named: FlashAttention-3 and -4 in their spellings, and FA3's source folder.
# "fa3" stands alone or starts a name (`fa3_jobs`, `Fa3Estimator`), not inside a longer number (`0fa3b`, `fa30`).
OTHER_FAMILY = re.compile(
    r"(?<![a-z0-9])fa[34](?![0-9])|flash[-_]?attn[-_]?[34](?![0-9])|flashattention-?[34](?![0-9])|hopper/", re.I
)
FLASH_ATTN_2 = "FLASH_ATTN"  # flash-attn 2's row in faforge.family: comparing a family with it is a branch on it


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
        and any(name in FAMILY_PACKAGE.sub("", node.value) for name in names)
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
    # a pure-Python family installs upstream's wheel in the recipe itself: no build script of its own
    assert getattr(family, "build_script", None) is None or (recipe / family.build_script).is_file()
    outputs = {
        family.package,
        getattr(family, "kernel_package", family.package),
    }  # a stable-ABI family has no kernel package
    data = yaml.safe_load((recipe / "recipe.yaml").read_text())
    single = data.get("package", {}).get("name", "").replace("${{ name }}", str(data.get("context", {}).get("name")))
    assert outputs <= set(recipe_output_names(recipe / "recipe.yaml") or [single])
    # its rows: a section of variants/matrix.yaml, or a data file of its own (a pure-Python family's sets)
    data_file = getattr(family, "data_file", None)
    assert (
        (REPO / data_file).is_file()
        if data_file
        else family.key in yaml.safe_load((REPO / "variants" / "matrix.yaml").read_text())
    )


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


# Product modules (paths under scripts/faforge/) outside the family packages that may name a family, each with
# why; scripts/faforge/family.py, where every family's names are spelled, is outside this check by design.
EXCEPTIONS: dict[str, str] = {}


def _is_flash_attn_2(node: ast.expr) -> bool:
    """`FLASH_ATTN` or `FLASH_ATTN.key`: the family itself, not one of its names a check compares a file with."""
    if isinstance(node, ast.Attribute) and node.attr == "key":
        node = node.value
    return isinstance(node, ast.Name) and node.id == FLASH_ATTN_2


def family_mentions(path: Path) -> list[str]:
    """'path:line: what' for each token that names another family than flash-attn 2, and each comparison with
    flash-attn 2's row (`family is FLASH_ATTN`, `FLASH_ATTN.key == key`): the module decides per family."""
    source = path.read_text()
    found = [
        f"{path}:{token.start[0]}: {match.group(0)!r} in {token.string[:60]!r}"
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT)
        for match in OTHER_FAMILY.finditer(token.string)
    ]
    found += [
        f"{path}:{node.lineno}: a branch on flash-attn 2 ({ast.unparse(node)[:60]})"
        for node in ast.walk(ast.parse(source, str(path)))
        if isinstance(node, ast.Compare) and any(_is_flash_attn_2(side) for side in (node.left, *node.comparators))
    ]
    return found


def outside_the_families() -> list[Path]:
    return [p for p in product_modules() if not p.is_relative_to(FAMILIES)]


def test_only_the_family_packages_name_a_family():
    mentions = {p.relative_to(PRODUCT).as_posix(): family_mentions(p) for p in outside_the_families()}
    naming = {module for module, found in mentions.items() if found}
    unlisted = sorted(naming - set(EXCEPTIONS))
    stale = sorted(set(EXCEPTIONS) - naming)
    assert not unlisted, "ask the family through faforge.families (its module's stage namespaces), or list it:\n" + (
        "\n".join(line for module in unlisted for line in mentions[module])
    )
    assert not stale, f"these no longer name a family: remove them from EXCEPTIONS: {stale}"


def test_at_most_three_modules_outside_the_families_name_one():
    assert len(EXCEPTIONS) <= 3, sorted(EXCEPTIONS)


def test_the_boundary_check_finds_comments_identifiers_strings_and_branches(tmp_path):
    module = tmp_path / "stage.py"
    module.write_text(
        "from faforge.family import FLASH_ATTN\n"
        "# FlashAttention-3 packs its own wheel\n"
        "def fa3_jobs(family):\n"
        "    if family is FLASH_ATTN:\n"
        "        return 'hopper/setup.py'\n"
        "    return FLASH_ATTN.key == family.key\n"
    )
    assert [line.split(": ", 1)[0] for line in family_mentions(module)] == [f"{module}:{n}" for n in (2, 3, 5, 4, 6)]


def test_the_boundary_check_spares_a_module_that_asks_the_family(tmp_path):
    module = tmp_path / "stage.py"
    module.write_text(
        '"""Every family\'s packages, in its own words; a digest is no name: 0fa3b2, fa30b2."""\n'
        "def keys(families):\n"
        '    return [f"{family.spec.key}_packages" for family in families if family.spec.gates]\n'
    )
    assert family_mentions(module) == []

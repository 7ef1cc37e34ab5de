"""Layers import downward only (docs/contributing/style.md, "Layout and boundaries").

Every module under scripts/faforge is parsed with `ast` (nothing is imported, so this is fast) and
mapped to its unit: the top-level package or one-file module it belongs to. Each faforge import it
makes, at the top or inside a function, must go to its own unit or to a lower row of LAYERS, as in an
import-linter "layers" contract. Units sharing a row are independent of each other, except in the
base row, whose one-file helpers may use one another. Code under `if __name__ == "__main__":` is a
script entry (`python -m faforge.bench.build_cost` is `faforge bench-build`), not part of the module
other modules import, so it is skipped.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "scripts" / "faforge"

# Top to bottom. A new package or module of scripts/faforge goes into the row it belongs to.
LAYERS = (
    ("__main__",),  # `python -m faforge`
    ("cli",),  # the console entry and its parser
    ("commands",),  # one module per subcommand: parse, call the layers below, print
    ("bench",),  # bench-build's measurements and the build-cost studies; nothing below imports them
    ("buildcost",),  # build-cost measurements and their reports (faforge bench-build)
    ("families",),  # one package per family behind the stages' protocols (faforge.families)
    ("release", "doctor"),  # the release pipeline, the installed-env diagnosis
    ("costmodel",),  # the build-cost model the plan and the families' plans use (measurements and their fits)
    ("pipindex",),  # the pip wheel index (PEP 503/691 pages, publish, read, validate); reads wheels with pipwheel.facts
    (
        "channel",
        "gpu",
        "matrix",
        "pipwheel",
    ),  # conda channels, the GPU gate, the build matrix, qemu for a foreign interpreter, wheels for pip
    ("kernels", "backend"),  # the kernel library (shim, TUs, tags, Philox layout, torch-free check); the build backend
    ("abi",),  # ELF reading and the ABI gate
)
BASE = (  # one-file helpers every layer may use
    "__init__",
    "atomic",
    "cli_reference",
    "config",
    "datafile",
    "errors",
    "family",
    "httpclient",
    "httpwatch",
    "interrupts",
    "membercaps",
    "options",
    "packagefile",
    "paths",
    "progress",
    "sandbox",
    "streams",
    "table",
    "untrusted",
    "versions",
    "wheelfetch",
    "wheelnames",
)
ROW = {unit: row for row, units in enumerate(LAYERS) for unit in units} | {unit: len(LAYERS) for unit in BASE}


def source_modules(package: Path = PACKAGE) -> dict[str, str]:
    """'faforge.kernels.tus' (a package as 'faforge.kernels') -> its source, for every .py under `package`."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = (package.name, *path.relative_to(package).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = path.read_text()
    return modules


def unit_of(module: str, units: set[str]) -> str:
    """'faforge.kernels.tus' -> 'kernels'; 'faforge' -> '__init__'; 'faforge.__version__' (a name) -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in units else "__init__"


def _is_main_block(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators)
    )


def _statements(body: list[ast.stmt]):
    """Every statement in `body` and in the blocks nested in it (imports are statements; expressions,
    most of a tree, are not visited, which keeps this test fast)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, field, None) or [])


def imported_modules(module: str, source: str, *, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every faforge module or name `module` imports, outside its script entry."""
    tree = ast.parse(source)
    nodes = _statements([top for top in tree.body if not _is_main_block(top)])
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name == "faforge" or name.startswith("faforge.")]


def violations(modules: dict[str, str], packages: set[str] = frozenset()) -> list[str]:
    """Each import of `modules` (dotted name -> source; `packages`: the names that are __init__ files)
    that goes up, or sideways into another unit of its row; empty when the layering holds."""
    units = {name.split(".")[1] for name in modules if "." in name} | set(ROW)
    found = []
    for module, source in sorted(modules.items()):
        unit = unit_of(module, units)
        for line, target in imported_modules(module, source, is_package=module in packages):
            other = unit_of(target, units)
            if other == unit or (ROW[other] == ROW[unit] == len(LAYERS)) or ROW[other] > ROW[unit]:
                continue
            where = "beside" if ROW[other] == ROW[unit] else "above"
            found.append(
                f"{module}:{line} imports {target}: {other!r} is {where} {unit!r} in tests/test_layers.py LAYERS; "
                f"move what both need down a layer, or have the upper layer call it"
            )
    return found


def test_every_unit_of_the_package_has_one_row():
    units = {name.split(".")[1] if "." in name else "__init__" for name in source_modules()}
    assert sorted(units - set(ROW)) == [], (
        "add these to LAYERS or BASE in tests/test_layers.py, in the row they belong to"
    )
    assert sorted(set(ROW) - units) == [], "these are in LAYERS but no longer in scripts/faforge"
    assert len(ROW) == sum(map(len, LAYERS)) + len(BASE), "a unit is in two rows"


def test_no_module_imports_a_higher_layer():
    packages = {".".join(("faforge", *p.parent.relative_to(PACKAGE).parts)) for p in PACKAGE.rglob("__init__.py")}
    assert violations(source_modules(), packages) == []


@pytest.mark.parametrize(
    ("module", "source", "target"),
    [
        ("faforge.kernels.tus", "from faforge.buildcost import samples\n", "faforge.buildcost.samples"),
        ("faforge.abi.elf", "import faforge.matrix.cells\n", "faforge.matrix.cells"),
        ("faforge.bench.build_cost", "def main():\n    from faforge.cli import main\n", "faforge.cli.main"),
        (
            "faforge.channel.index",
            "from faforge.release.package import sha256_of\n",
            "faforge.release.package.sha256_of",
        ),
        ("faforge.release.build.steps", "from faforge.doctor import facts\n", "faforge.doctor.facts"),
        ("faforge.kernels.torchfree", "from ..gpu import gate\n", "faforge.gpu.gate"),
        ("faforge.errors", "from faforge import abi\n", "faforge.abi"),
    ],
)
def test_a_new_upward_or_sideways_import_is_reported(module, source, target):
    found = violations({module: source})
    assert len(found) == 1 and found[0].startswith(f"{module}:") and f" imports {target}: " in found[0], found


def test_downward_imports_and_script_entries_pass():
    modules = {
        "faforge.commands.build": (
            "from faforge.release.build.steps import build_cell\nfrom faforge import errors, paths\n"
        ),
        "faforge.bench.build_cost": "from faforge.kernels import tus\nif __name__ == '__main__':\n"
        "    from faforge.cli import main\n",
        "faforge.kernels": "from . import tus\nfrom faforge.abi.elf import read_elf\n",
        "faforge.paths": "from faforge.untrusted import load_json\nfrom faforge import __version__\n",
    }
    assert violations(modules, packages={"faforge.kernels"}) == []


# Inside the release pipeline, its stages in the same way, top to bottom; its one-file modules (package facts,
# records, clean environments, the reporter) sit below every stage. The cost model is below release altogether
# (faforge.costmodel), so the plan needs no estimate handed in.
RELEASE_STAGES = (("publish", "bump", "page"), ("verify",), ("build",), ("plan",))
STAGE_ROW = {stage: row for row, stages in enumerate(RELEASE_STAGES) for stage in stages}


def stage_of(module: str) -> str | None:
    """'faforge.release.plan.jobs' -> 'plan'; a shared module of release/ -> 'shared'; outside release -> None."""
    parts = module.split(".")
    if parts[:2] != ["faforge", "release"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in STAGE_ROW else "shared"


def stage_violations(modules: dict[str, str], packages: set[str] = frozenset()) -> list[str]:
    found = []
    for module, source in sorted(modules.items()):
        stage = stage_of(module)
        if stage is None:
            continue
        for line, target in imported_modules(module, source, is_package=module in packages):
            other = stage_of(target)
            if other is None or other == stage or other == "shared":
                continue
            if stage == "shared" or STAGE_ROW[other] <= STAGE_ROW[stage]:
                found.append(
                    f"{module}:{line} imports {target}: the release stage {other!r} is not below {stage!r} "
                    "(tests/test_layers.py RELEASE_STAGES)"
                )
    return found


def test_the_release_stages_import_downward():
    packages = {".".join(("faforge", *p.parent.relative_to(PACKAGE).parts)) for p in PACKAGE.rglob("__init__.py")}
    assert stage_violations(source_modules(), packages) == []


def test_a_stage_importing_a_later_stage_is_reported():
    modules = {
        "faforge.release.plan.jobs": "from faforge.release.build.steps import build_step\n",
        "faforge.release.package": "from faforge.release.verify import gates\n",
        "faforge.release.page": "from faforge.release.bump.releases import bump\n",
        "faforge.release.verify.run": (
            "from faforge.release.build.steps import x\nfrom faforge.release import package\n"
        ),
    }
    found = stage_violations(modules)
    assert [f.split(":")[0] for f in found] == [
        "faforge.release.package",
        "faforge.release.page",
        "faforge.release.plan.jobs",
    ]

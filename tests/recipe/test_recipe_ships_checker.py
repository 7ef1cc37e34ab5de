"""The recipe's test sections run faforge's checkers from the files the recipe copies next to the
package (`faforge_checker/`); a module the GPU or ABI gate imports but the recipe does not copy
fails the recipe's tests on every build machine (seen in the conda world, issue 11)."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from faforge import paths
from faforge.gpu.run_suite import RECIPE_TEST_FILES

CHECKER = "faforge_checker"


def shipped_files() -> set[str]:
    """Every faforge file the recipe's `source:` puts under faforge_checker/, as faforge/... paths."""
    recipe_dir = paths.recipe_dir()
    shipped = set()
    for source in yaml.safe_load((recipe_dir / "recipe.yaml").read_text())["source"]:
        target = source.get("target_directory", "")
        if "path" not in source or not target.startswith(CHECKER + "/"):
            continue
        origin = (recipe_dir / source["path"]).resolve()
        into = Path(target).relative_to(CHECKER)
        files = [p for p in origin.rglob("*.py")] if origin.is_dir() else [origin]
        for path in files:
            shipped.add((into / (path.relative_to(origin) if origin.is_dir() else path.name)).as_posix())
    return shipped


def test_recipe_ships_every_file_the_gpu_gate_imports():
    missing = sorted(set(RECIPE_TEST_FILES) - shipped_files())
    assert not missing, f"recipes/flash-attn/recipe.yaml does not copy {missing} into {CHECKER}/"


def faforge_imports(path: Path) -> set[str]:
    """Every faforge module `path` imports, at the top or inside a function, as faforge/... file paths."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "faforge":
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names if alias.name.split(".")[0] == "faforge")
    files = set()
    for module in modules:
        base = paths.repo_root() / "scripts" / Path(*module.split("."))
        if (base / "__init__.py").is_file():
            files.add((Path(*module.split(".")) / "__init__.py").as_posix())
        elif base.with_suffix(".py").is_file():
            files.add(Path(*module.split(".")).with_suffix(".py").as_posix())
    return files


def test_recipe_ships_every_module_the_build_script_and_its_backend_import():
    """The build script runs faforge.backend from the recipe's copy; a backend module importing faforge code the
    recipe does not copy would work in a local build (the repo's copy) and fail in every recipe build."""
    shipped = shipped_files()
    backend = sorted((paths.repo_root() / "scripts/faforge/backend").glob("*.py"))
    needed = faforge_imports(paths.recipe_dir() / "build_flash_attn.py").union(*(faforge_imports(p) for p in backend))
    assert {f"faforge/backend/{p.name}" for p in backend} <= shipped
    missing = sorted(needed - shipped)
    assert not missing, f"recipes/flash-attn/recipe.yaml does not copy {missing} into {CHECKER}/"

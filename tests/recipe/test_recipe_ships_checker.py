"""The recipe's test sections run faforge's checkers from the files the recipe copies next to the
package (`faforge_checker/`); a module the GPU or ABI gate imports but the recipe does not copy
fails the recipe's tests on every build machine (seen in the conda world)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from faforge import paths
from faforge.gpu.run_suite import RECIPE_TEST_FILES

CHECKER = "faforge_checker"


def shipped_sources() -> dict[str, Path]:
    """Every faforge file the recipe's `source:` puts under faforge_checker/: faforge/... path -> the file."""
    recipe_dir = paths.recipe_dir()
    shipped = {}
    for source in yaml.safe_load((recipe_dir / "recipe.yaml").read_text())["source"]:
        target = source.get("target_directory", "")
        if "path" not in source or not target.startswith(CHECKER + "/"):
            continue
        origin = (recipe_dir / source["path"]).resolve()
        into = Path(target).relative_to(CHECKER)
        files = [p for p in origin.rglob("*.py")] if origin.is_dir() else [origin]
        for path in files:
            shipped[(into / (path.relative_to(origin) if origin.is_dir() else path.name)).as_posix()] = path
    return shipped


def shipped_files() -> set[str]:
    """Every faforge file the recipe's `source:` puts under faforge_checker/, as faforge/... paths."""
    return set(shipped_sources())


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


def test_each_checker_the_recipe_runs_imports_from_the_shipped_files_alone(tmp_path):
    """`python -m faforge.X --help` for every checker module a test script of the recipe runs, from a
    folder holding only what the recipe ships (the kernel package's torch-free check moved to
    faforge.kernels, the kernel library's own package; a module it imports but the recipe leaves out fails here)."""
    for name, origin in shipped_sources().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin, tmp_path / name)
    modules = sorted(
        set(
            re.findall(
                r"PYTHONPATH=faforge_checker python -m (faforge[\w.]+)",
                (paths.recipe_dir() / "recipe.yaml").read_text(),
            )
        )
    )
    assert "faforge.kernels.torchfree" in modules, modules
    for module in modules:
        result = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0 and "usage:" in result.stdout, f"{module}: {result.stderr}"

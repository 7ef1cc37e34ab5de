"""The recipe's test sections run faforge's checkers from the files the recipe copies next to the
package (`faforge_checker/`); a module the GPU or ABI gate imports but the recipe does not copy
fails the recipe's tests on every build machine (seen in the conda world, issue 11)."""

from __future__ import annotations

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

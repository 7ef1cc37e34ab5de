"""recipes/flash-attn/build_flash_attn.py loaded as a module.

The build script runs inside bare conda host environments, so it cannot import faforge; faforge
imports it instead, so that planning and benchmarks use the build's own arch parser, job count and
compiler-cache setup rather than copies of them.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from faforge import paths
from faforge.family import FLASH_ATTN


@lru_cache(maxsize=1)
def load() -> ModuleType:
    path = paths.recipe_dir() / FLASH_ATTN.build_script
    spec = importlib.util.spec_from_file_location(f"faforge_{Path(FLASH_ATTN.build_script).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

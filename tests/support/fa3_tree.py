"""A tiny FlashAttention-3-shaped source tree: upstream's layout with one-line kernels, for the second family's builds.

hopper/ holds the TUs hopper/setup.py would compile for a feature set (faforge.families.flash_attn_3.backend.sources),
each a one-line kernel, and as its glue the stable-ABI stand-in of tests/fixtures/stable_abi; beside it
csrc/cutlass/include, the flash_attn_3 package, flash_attn_interface.py and the LICENSE the recipe
ships. The build script and the recipe build it in seconds, as the tiny sdist stands in for flash-attn 2.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from faforge import paths
from faforge.families.flash_attn_3 import backend as fa3
from faforge.family import FLASH_ATTN_3

GLUE = paths.repo_root() / "tests" / "fixtures" / "stable_abi" / "stable_op.cpp"


def fa3_shaped_tree(root: Path, disabled: frozenset[str]) -> Path:
    hopper = root / FLASH_ATTN_3.source_dir
    for tu in fa3.sources(disabled):
        path = hopper / tu
        path.parent.mkdir(parents=True, exist_ok=True)
        if tu == fa3.STABLE_GLUE:
            shutil.copy2(GLUE, path)
        else:
            path.write_text(f"__global__ void kernel_{Path(tu).stem}(float* out) {{ out[threadIdx.x] = 1.0f; }}\n")
    (root / "csrc/cutlass/include").mkdir(parents=True)
    (hopper / FLASH_ATTN_3.module).mkdir()
    (hopper / FLASH_ATTN_3.module / "__init__.py").write_text('__version__ = "3.0.0"\n')
    (hopper / f"{FLASH_ATTN_3.interface_module}.py").write_text(f"import {FLASH_ATTN_3.extension}  # noqa: F401\n")
    (root / "LICENSE").write_text("BSD-3-Clause (test stand-in)\n")
    return root


def fa3_shaped_tarball(folder: Path, disabled: frozenset[str], top: str = "flash-attention-standin") -> Path:
    """The tree as a .tar.gz with one top-level folder, as GitHub serves a commit's archive."""
    tree = fa3_shaped_tree(folder / top, disabled)
    tarball = folder / f"{top}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(tree, arcname=top)
    return tarball

"""The cells the conda world builds for real, and what each one's build and user environment hold.

One entry per torch world: the conda-forge world's CUDA 13.0 cell and the legacy channel's CUDA 12.4,
pre-C++11-ABI cell (the legacy cell). The end-to-end tests (test_recipe_in_world.py) run once per entry;
test_legacy_cell.py adds what only the legacy cell has to prove.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorldCell:
    id: str
    channels: tuple[str, ...]  # the world's channels the cell builds and installs from, in priority order
    torch: str  # torch.__version__ in the user's environment
    cuda: str  # the __cuda virtual package of the user's solve
    cxx11_abi: int
    run_names: frozenset[str]  # what the flash-attn package must depend on (from run and run_exports)

    @property
    def slug(self) -> str:
        return self.id.replace("/", "-")


CU130 = WorldCell(
    "linux-64/py312/torch2.11/cu130/abi1",
    ("conda-forge",),
    "2.11.0+cu130",
    "13.0",
    1,
    frozenset({"cuda-cudart", "pytorch", "libtorch", "python", "python_abi", "libstdcxx", "libgcc"}),
)
LEGACY = WorldCell(
    "linux-64/py312/torch2.5/cu124/abi0",
    ("pytorch", "nvidia", "conda-forge"),
    "2.5.1+cu124",
    "12.4",
    0,
    frozenset({"cuda-cudart", "pytorch", "pytorch-cuda", "pytorch-mutex", "python", "libstdcxx", "libgcc"}),
)
CELLS = (CU130, LEGACY)

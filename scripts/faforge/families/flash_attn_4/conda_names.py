"""The known-good set's packages as conda-forge names them: the conda package's run requirements (matrix) and what
doctor compares in a conda prefix (doctor) read the same table."""

from __future__ import annotations

# The set's PyPI names under conda-forge's (None: no conda package of its own). conda-forge spells typing-extensions
# `typing_extensions` (its pytorch depends on `typing_extensions >=4.10.0`, tests/fixtures/real_packages.yaml) and
# triton `triton` (the same record: `triton 3.6.0`). conda-forge's nvidia-cutlass-dsl is one package per CUDA built
# from NVIDIA's redist tarballs, its libraries inside it and its libcute-dsl-runtime outputs
# (conda-forge/staged-recipes#34803; conda-forge/nvidia-cutlass-dsl-feedstock recipe/meta.yaml), so PyPI's split
# libs-base/-core/-cu12/-cu13 wheels have no conda names: `nvidia-cutlass-dsl ==V` with cuda-version picks them.
# cuda-bindings and cuda-pathfinder are conda-forge/cuda-python-feedstock's outputs; torch-c-dlpack-ext is
# conda-forge/staged-recipes#34022; quack-kernels and apache-tvm-ffi (too old on conda-forge) are built here
# (recipes/quack-kernels, recipes/apache-tvm-ffi).
CONDA_NAMES: dict[str, str | None] = {
    "nvidia-cutlass-dsl": "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-base": None,
    "nvidia-cutlass-dsl-libs-core": None,
    "nvidia-cutlass-dsl-libs-cu12": None,
    "nvidia-cutlass-dsl-libs-cu13": None,
    # Not pinned by the conda package: conda-forge's nvidia-cutlass-dsl depends on cuda-python, whose 13.4.x
    # metapackage pins cuda-bindings >=13.4.x,<13.5.0a0 (conda-forge/cuda-python-feedstock recipe.yaml: pin_subpackage
    # upper_bound x.x), and no cuda-python 13.5 exists (PyPI's newest is 13.4.4), so the sets' cuda-bindings 13.5.0
    # would make the package unsolvable on conda-forge. That chain chooses them (13.4.4 and its cuda-pathfinder).
    "cuda-bindings": None,
    "cuda-pathfinder": None,
    "quack-kernels": "quack-kernels",
    "apache-tvm-ffi": "apache-tvm-ffi",
    "torch-c-dlpack-ext": "torch-c-dlpack-ext",
    "triton": "triton",
    "einops": "einops",
    "typing-extensions": "typing_extensions",
    "packaging": "packaging",
}


def conda_pinned(name: str) -> bool:
    """Whether the conda package pins this package of the set itself (else conda-forge's chain chooses it)."""
    return CONDA_NAMES.get(name) is not None

"""variants/torch-sources.yaml's build-string patterns read every shape of torch build string each
world has published, not only today's.

conda-forge's pytorch build string changed twice (conda-forge/pytorch-cpu-feedstock, recipe/meta.yaml):
- until 2024-12-12 (e.g. "Update to 2.4.1", 054fb3175af2e6326738a03a61ba65110364d1af, line 186):
  cuda{NNN}_py{XY}h{hash}_{n}, no BLAS part, no `_` before the hash;
- 035021762353c007fb556aa0fe5c11370539ee1d "Add missing {{ blas_impl }} to CUDA build strings":
  cuda{NNN}_{blas}_py{XY}h{hash}_{n};
- 2eef9004f2424d5b65785cb9231185ee31ca6290 "Add more underscores to build strings for readability"
  (same day): cuda{NNN}_{blas}_py{XY}_h{hash}_{n}, today's shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from faforge.release.bump.releases import cuda_and_python, load_sources

REPO = Path(__file__).resolve().parents[2]
SOURCES = load_sources(REPO / "variants" / "torch-sources.yaml")
REAL_PACKAGES = yaml.safe_load((REPO / "tests" / "fixtures" / "real_packages.yaml").read_text())["packages"]


def real_torch_builds(channel: str) -> list[str]:
    """The pytorch build strings of tests/fixtures/real_packages.yaml (each one cited there)."""
    return sorted({p["build"] for p in REAL_PACKAGES if p["name"] == "pytorch" and p["channel"] == channel})


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        # The old shape: conda-forge/linux-64::pytorch-2.4.1-cuda120_py313h6ccb88c_302, as conda printed
        # it when installing conda-forge's CUDA 12.0 build of torch 2.4.1 (a torch our matrix builds for);
        # the feedstock's template at 054fb31 line 186 spells exactly this shape.
        ("cuda120_py313h6ccb88c_302", ("12.0", "3.13")),
        # The shape of the few hours between 0350217 and 2eef900 (from the template; no record seen).
        ("cuda126_mkl_py312h0123abc_306", ("12.6", "3.12")),
    ],
)
def test_conda_forge_pattern_reads_older_build_strings(build, expected):
    assert cuda_and_python(SOURCES["conda-forge"], build) == expected


def test_conda_forge_pattern_reads_every_real_build_in_the_fixture():
    builds = real_torch_builds("conda-forge")
    assert builds, "tests/fixtures/real_packages.yaml lists conda-forge pytorch records"
    for build in builds:
        cuda, python = cuda_and_python(SOURCES["conda-forge"], build)
        assert build.startswith(f"cuda{cuda.replace('.', '')}_") and f"_py{python.replace('.', '')}" in build


def test_legacy_pattern_reads_every_real_build_in_the_fixture():
    builds = real_torch_builds("pytorch")
    assert builds
    for build in builds:
        cuda, python = cuda_and_python(SOURCES["pytorch"], build)
        assert build.startswith(f"py{python}_cuda{cuda}_")


@pytest.mark.parametrize(
    "build",
    [
        "cpu_mkl_py312_h0123abc_100",  # CPU builds are not rows
        "cpu_mkl_py313hbc6f0e9_102",  # ... in the old shape too
        "cuda120py310h783a43a_203",  # pytorch-gpu's metapackage string, not a pytorch build
    ],
)
def test_conda_forge_pattern_ignores_what_is_not_a_cuda_torch_build(build):
    assert cuda_and_python(SOURCES["conda-forge"], build) is None

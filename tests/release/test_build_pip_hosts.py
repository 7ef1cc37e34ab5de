"""Which machine builds which pip cell's glue (the pip world): a machine builds its own platform's cells natively,
against PyPI's torch in a venv (CI's wheel job: linux-64 on an x86_64 runner, linux-aarch64 on GitHub's arm64 runner);
an x86_64 machine also cross-builds linux-aarch64 cells given --torch-site and --target-python. Anything else is bad
input naming the cell, this machine and where to build it, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from faforge.errors import EXIT_BAD_INPUT, FaforgeError
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.release.build.pip_target import cross_target

NO_TOOLKIT = Path("/nonexistent-cuda")  # never read on these paths: no cross build is asked for


@pytest.fixture(scope="module")
def by_platform():
    builds = pip_builds(load_matrix())
    return {
        platform: [b for b in builds if b.cell.platform == platform][:3] for platform in ("linux-64", "linux-aarch64")
    }


@pytest.mark.parametrize(("machine", "platform"), [("x86_64", "linux-64"), ("aarch64", "linux-aarch64")])
def test_a_machine_builds_its_own_platforms_cells_natively(by_platform, machine, platform):
    assert cross_target(by_platform[platform], None, None, NO_TOOLKIT, machine=machine) is None


def test_an_aarch64_machine_does_not_build_linux_64_cells(by_platform):
    with pytest.raises(FaforgeError) as caught:
        cross_target(by_platform["linux-64"], None, None, NO_TOOLKIT, machine="aarch64")
    line = caught.value.line()
    assert caught.value.exit_code == EXIT_BAD_INPUT and by_platform["linux-64"][0].cell.id in line
    assert "built on an x86_64 machine (this is aarch64)" in line, line


def test_a_native_aarch64_build_takes_no_cross_inputs(by_platform, tmp_path):
    with pytest.raises(FaforgeError) as caught:
        cross_target(by_platform["linux-aarch64"], tmp_path, None, NO_TOOLKIT, machine="aarch64")
    assert "--torch-site is for cross-building linux-aarch64 pip cells on x86_64" in caught.value.line()


def test_an_x86_64_machine_still_asks_for_the_cross_inputs_of_an_aarch64_cell(by_platform):
    with pytest.raises(FaforgeError) as caught:
        cross_target(by_platform["linux-aarch64"], None, None, NO_TOOLKIT, machine="x86_64")
    assert "is cross-built, and --torch-site is not given" in caught.value.line()


def test_another_machine_builds_no_pip_glue(by_platform):
    with pytest.raises(FaforgeError) as caught:
        cross_target(by_platform["linux-64"], None, None, NO_TOOLKIT, machine="ppc64le")
    assert "pip glue builds run on an x86_64 or aarch64 machine (this is ppc64le)" in caught.value.line()

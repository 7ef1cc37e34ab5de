"""The build script for real with `--compiler-cache ccache`: each TU is compiled once per build, and a
second build of the same sources in another work directory takes its objects from the cache (torch's
ninja file runs $PYTORCH_NVCC, the headers come through the include view, paths are relative to
CCACHE_BASEDIR)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faforge.buildcost import reuse
from faforge.errors import FaforgeError
from tests.recipe.test_build_script_real import _run, _tiny_sdist, build_python  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def test_second_build_in_another_work_dir_hits_the_cache(build_python, tmp_path, monkeypatch):  # noqa: F811
    try:
        ccache = reuse.find_ccache()
    except FaforgeError as exc:
        pytest.skip(str(exc))
    python, env = build_python
    env = dict(env, FAFORGE_COMPILER_CACHE="ccache", CCACHE_DIR=str(tmp_path / "ccache"),
               PATH=f"{Path(ccache).parent}:{env['PATH']}")
    logs = []
    for work in ("work-a", "work-b"):
        src = _tiny_sdist(tmp_path / work)
        result = _run((python, env), src, "1", tmp_path / work)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert (src.parent / "build-abi1" / "include-view" / "torch").is_symlink()
        logs.append(result.stdout)
    counts = [tuple(map(int, re.search(r"compiler cache: (\d+) hits, (\d+) misses", log).groups())) for log in logs]
    # The first build compiles each TU once (bdist_wheel's second build_ext must find ninja up to
    # date, not recompile); the second build, in another work dir, only hits.
    assert counts[0][0] == 0 and counts[0][1] >= 1
    assert counts[1][0] >= 1 and counts[1][1] == 0
    for log in logs:
        assert log.count("nvcc -MD") == 1, "a kernel TU was compiled more than once in one build"

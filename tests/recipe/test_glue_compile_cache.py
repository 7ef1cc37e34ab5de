"""tests/support/compile_cache.py: the run's `c++` wrapper really shares objects between builds in
different tmp dirs, and ignores the ccache settings the build script exports for its kernel compiles."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from faforge.backend.ccache import CCACHE_HIT_COUNTERS, ccache_counts
from faforge.bench.cache_reuse import find_ccache
from faforge.errors import FaforgeError
from tests.support.compile_cache import cxx_through_ccache

SOURCE = "#include <vector>\nint three() { return static_cast<int>(std::vector<int>(3).size()); }\n"


@pytest.mark.slow  # c++ compiles through ccache
def test_the_same_compile_in_another_tmp_dir_is_a_hit(tmp_path):
    try:
        ccache = find_ccache()
    except FaforgeError as exc:
        pytest.skip(str(exc))
    cxx = shutil.which("c++")
    if cxx is None:
        pytest.skip("no c++ on PATH")
    wrapper = cxx_through_ccache(tmp_path / "run", tmp_path, ccache, cxx)
    # What the build script leaves in the environment in ccache mode; the wrapper must not key on it.
    env = dict(
        os.environ,
        PATH=f"{wrapper}:{os.environ['PATH']}",
        CCACHE_COMPILERCHECK="string:other",
        CCACHE_DIR=str(tmp_path / "theirs"),
    )
    objects = []
    for build in ("a", "b"):
        (tmp_path / build / "build").mkdir(parents=True)
        (tmp_path / build / "t.cpp").write_text(SOURCE)
        # As torch's ninja file runs it: from the build dir, with a depfile, on an absolute source path.
        subprocess.run(
            ["c++", "-MMD", "-MF", "t.o.d", "-O2", "-c", str(tmp_path / build / "t.cpp"), "-o", "t.o"],
            cwd=tmp_path / build / "build",
            env=env,
            check=True,
        )
        objects.append((tmp_path / build / "build/t.o").read_bytes())
    assert objects[0] == objects[1]
    stats = ccache_counts(ccache, dict(os.environ, CCACHE_DIR=str(tmp_path / "run/ccache")))
    assert sum(stats.get(k, 0) for k in CCACHE_HIT_COUNTERS) == 1 and stats["cache_miss"] == 1, stats
    assert not (tmp_path / "theirs").exists(), "the glue's cache is the run's own, never a test's CCACHE_DIR"

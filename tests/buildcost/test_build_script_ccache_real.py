"""The build script for real with `--compiler-cache ccache`: each kernel TU is compiled once per build,
and a second build of the same sources in another work directory takes its objects from the cache
(the kernel library's ninja file runs ccache in front of nvcc, paths are relative to CCACHE_BASEDIR).
The same mechanism carries a kernel library too long for one job: its pieces (`--only-tus`) compile
shares of the kernels in separate jobs, and the final full build finds every kernel object in their
merged caches."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from faforge.bench import cache_reuse as reuse
from faforge.errors import FaforgeError
from tests.recipe.test_build_script_real import _run, _tiny_sdist, build_python  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def ccache_env(build_python, ccache_dir: Path) -> dict:  # noqa: F811 (an imported fixture, requested by name)
    try:
        ccache = reuse.find_ccache()
    except FaforgeError as exc:
        pytest.skip(str(exc))
    _, env = build_python
    return dict(
        env, FAFORGE_COMPILER_CACHE="ccache", CCACHE_DIR=str(ccache_dir), PATH=f"{Path(ccache).parent}:{env['PATH']}"
    )


def cache_counts(log: str) -> tuple[int, int]:
    return tuple(map(int, re.search(r"compiler cache: (\d+) hits, (\d+) misses", log).groups()))


def kernel_compiles(log: str) -> list[str]:
    """The kernel TUs ninja compiled, from its progress lines ("[1/4] nvcc .../flash_fwd_x_sm80.cu")."""
    return re.findall(r"^\[\d+/\d+\] nvcc \S*/(\S+\.cu)$", log, re.MULTILINE)


def test_second_build_in_another_work_dir_hits_the_cache(build_python, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    python, _ = build_python
    env = ccache_env(build_python, tmp_path / "ccache")
    logs = []
    for work in ("work-a", "work-b"):
        src = _tiny_sdist(tmp_path / work)
        result = _run((python, env), src, "1", tmp_path / work)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert (src.parent / "build-abi1" / "include-view" / "torch").is_symlink()
        logs.append(result.stdout)
    counts = [cache_counts(log) for log in logs]
    # The first build compiles each TU once; the second build, in another work dir, only hits.
    assert counts[0][0] == 0 and counts[0][1] >= 1
    assert counts[1][0] >= 1 and counts[1][1] == 0
    for log in logs:
        assert kernel_compiles(log) == ["flash_fwd_tiny_sm80.cu"], (
            "a kernel TU was compiled more than once in one build"
        )


def test_pieces_in_separate_jobs_fill_the_cache_for_the_final_build(build_python, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    python, _ = build_python
    kernels = ("flash_fwd_tiny_a_sm80.cu", "flash_bwd_tiny_b_sm80.cu")
    for job, kernel in zip(("piece-a", "piece-b"), kernels, strict=True):
        env = ccache_env(build_python, tmp_path / job / "ccache")
        src = _tiny_sdist(tmp_path / job, kernels)
        result = _run((python, env), src, "1", tmp_path / job, "--only-tus", kernel)
        log = result.stdout + result.stderr
        assert result.returncode == 0, log[-3000:]
        assert cache_counts(log) == (0, 1), "a piece compiles its own TU and nothing else"
        assert kernel_compiles(log) == [kernel] and "flash_api.cpp" not in log and "running build_ext" not in log
        assert "nothing linked" in log
        assert not list((tmp_path / job).glob("dist-abi1/*.whl"))
    # The final job restores both pieces' caches into one (CI: download-artifact with merge-multiple).
    merged = tmp_path / "final" / "ccache"
    for job in ("piece-a", "piece-b"):
        shutil.copytree(tmp_path / job / "ccache", merged, dirs_exist_ok=True)
    src = _tiny_sdist(tmp_path / "final", kernels)
    result = _run((python, ccache_env(build_python, merged)), src, "1", tmp_path / "final")
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    # Both kernels come from the pieces; the library's own error path (kernel_errors.cpp, compiled
    # through the cache too) and the glue are the final job's work.
    assert cache_counts(log) == (2, 1), "every kernel object of the final build comes from the pieces"
    assert "verified: flash_attn_2_cuda" in log
    assert list((tmp_path / "final").glob("dist-abi1/flash_attn-0.0.1-*.whl"))


def test_a_piece_naming_a_tu_the_sdist_lacks_is_refused(build_python, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    src = _tiny_sdist(tmp_path)
    result = _run(build_python, src, "1", tmp_path, "--only-tus", "flash_fwd_hdim999_fp16_sm80.cu")
    assert result.returncode == 2
    assert "not a kernel TU of this source tree and feature set: flash_fwd_hdim999_fp16_sm80.cu" in result.stderr
    assert "Traceback" not in result.stderr

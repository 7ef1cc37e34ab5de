"""Integration: a real ccache in front of a real nvcc, across two rattler-build-like python variants.

A tiny kernel TU stands in for flash-attn's (the measured run on real TUs is the benchmark,
`faforge bench-build --measure`). It includes a "torch" header from the python-versioned
site-packages and a CUDA header that only the host prefix has, as conda-forge's cuda-cudart-dev
puts it there; the second variant must be served from the cache the first filled, and must not be
without the build script's include view.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from faforge.backend import ccache as compiler_cache
from faforge.bench import cache_reuse as reuse
from faforge.buildcost.layout import LayoutSources, make_layout
from faforge.buildcost.measure import CompileSpec
from faforge.errors import FaforgeError
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home

pytestmark = pytest.mark.slow

TU = "flash_fwd_hdim32_fp16_sm80.cu"
KERNEL = """#include <c10/faforge_fixture.h>
#include <faforge_host_only.h>
__global__ void k(float* x) { x[threadIdx.x] = FIXTURE_TORCH + FIXTURE_HOST; }
void launch(float* x) { k<<<1, 32>>>(x); }
"""


@pytest.fixture
def variants(tmp_path):
    try:
        reuse.find_ccache()
    except FaforgeError as exc:
        pytest.skip(str(exc))
    try:
        toolkit = cuda_home()
    except NoCudaToolkit as exc:
        pytest.skip(str(exc))
    torch = tmp_path / "torch/include/c10"
    torch.mkdir(parents=True)
    (torch / "faforge_fixture.h").write_text("#define FIXTURE_TORCH 1.0f\n")
    sdist = tmp_path / "sdist"
    (sdist / "csrc/flash_attn/src").mkdir(parents=True)
    (sdist / "csrc/cutlass/include").mkdir(parents=True)
    (sdist / "csrc/flash_attn/src" / TU).write_text(KERNEL)
    py_include = Path(sysconfig.get_paths()["include"])
    out = []
    for build_id, placeholder, python in (("1780000001", 60, "3.11"), ("1780004242", 97, "3.12")):
        sources = LayoutSources(
            cuda_home=toolkit, torch_include=tmp_path / "torch/include", python_include=py_include, sdist=sdist
        )
        layout = make_layout(
            tmp_path / "out",
            build_id=build_id,
            placeholder_length=placeholder,
            python_version=python,
            sources=sources,
            tus=[TU],
            triplet="x86_64-linux",
        )
        (layout.host_env / "targets/x86_64-linux/include/faforge_host_only.h").write_text("#define FIXTURE_HOST 2.0f\n")
        out.append((f"py{python}", layout))
    return out


def compile_both(variants, tmp_path, **kwargs):
    spec = CompileSpec(archs="80", cxx_std="c++17", cxx11_abi=1)
    return [
        run
        for name, layout in variants
        for run in reuse.compile_variant(
            name, layout, [TU], spec, ccache=reuse.find_ccache(), cache_dir=tmp_path / "ccache", nice=0, **kwargs
        )
    ]


def test_second_python_variant_hits_the_cache_the_first_filled(variants, tmp_path):
    first, second = compile_both(variants, tmp_path)
    assert (first.hits, first.misses) == (0, 1)
    assert (second.hits, second.misses) == (1, 0)
    objects = [layout.temp_dir / "flash_fwd_hdim32_fp16_sm80.o" for _, layout in variants]
    assert objects[0].read_bytes() == objects[1].read_bytes()


def test_without_the_include_view_the_second_variant_misses(variants, tmp_path, monkeypatch):
    # Spell every include dir by its real path, as torch's ninja file does without the view.
    monkeypatch.setattr(compiler_cache, "through_view", lambda dirs, mapping: [str(Path(d).resolve()) for d in dirs])
    _, second = compile_both(variants, tmp_path)
    assert (second.hits, second.misses) == (0, 1)

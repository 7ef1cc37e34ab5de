"""faforge.backend.glue: what the glue's link and the wheel take from this Python and its torch."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from faforge.backend import glue
from faforge.backend.errors import BuildError


def test_python_link_args_name_this_pythons_libpython_or_say_what_to_use():
    ldlibrary = sysconfig.get_config_var("LDLIBRARY") or ""
    libdir = sysconfig.get_config_var("LIBDIR")
    if not (libdir and (Path(libdir) / ldlibrary).exists() and ".so" in ldlibrary):
        with pytest.raises(BuildError, match="--enable-shared"):
            glue.python_link_args()
        return
    flags, library = glue.python_link_args()
    assert flags[0] == f"-L{libdir}" and flags[1].startswith("-lpython") and library == ldlibrary


def test_torchs_headers_are_beside_its_package():
    fake = SimpleNamespace(__file__="/env/lib/python3.12/site-packages/torch/__init__.py")
    assert glue.torch_include_dir(fake) == "/env/lib/python3.12/site-packages/torch/include"


def test_the_wheel_carries_the_library_beside_the_module():
    assert glue.WHEEL_LIBS_DIR == "flash_attn_2_cuda.libs"


def test_the_module_finds_torchs_libraries_by_itself_in_either_layout():
    """The legacy pytorch channel keeps libc10.so, libtorch*.so in site-packages/torch/lib, not in the
    environment's lib/: the first real legacy build's recipe test failed at `import flash_attn_2_cuda`
    (libc10.so: cannot open shared object file) unless torch was imported first (the aarch64 cross build). The module,
    in site-packages, names torch's folder; conda-forge's torch/lib links into lib/, so both layouts
    resolve, and the kernel library stays found through the packager's RUNPATH or the carried copy."""
    assert glue.glue_runpath(carry_library=False) == ["-Wl,-rpath,$ORIGIN/torch/lib"]
    assert glue.glue_runpath(carry_library=True) == [
        f"-Wl,-rpath,$ORIGIN/{glue.WHEEL_LIBS_DIR}",
        "-Wl,-rpath,$ORIGIN/torch/lib",
    ]


def test_the_glue_wheel_leaves_out_another_familys_package_nested_in_flash_attn(tmp_path):
    """Upstream's sdist carries an old flash_attn/cute/ at flash-attn 4's paths: setuptools' package list of the
    glue wheel (and so of the conda package, which pip-installs it) leaves it out, and keeps everything else."""
    from faforge.backend.glue import nested_family_modules  # noqa: PLC0415
    from faforge.family import FLASH_ATTN_4  # noqa: PLC0415

    for package in ("flash_attn", "flash_attn/layers", "flash_attn/cute", "flash_attn/cute/sub", "flash_attn/ops"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    assert FLASH_ATTN_4.module in nested_family_modules()
    # setuptools in a child: imported here, its distutils shim would warn in every later pip import of this worker
    script = (
        "from setuptools import find_packages; "
        f"print(sorted(find_packages(include=['flash_attn*'], exclude={nested_family_modules()!r})))"
    )
    found = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "['flash_attn', 'flash_attn.layers', 'flash_attn.ops']"

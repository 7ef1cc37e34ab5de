"""faforge.backend.glue: what the glue's link and the wheel take from this Python and its torch."""

from __future__ import annotations

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

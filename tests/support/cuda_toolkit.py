"""The CUDA toolkit the tests compile against.

`nvcc` on PATH can be a wrapper script (on this machine /usr/local/bin/nvcc execs
/usr/local/cuda-13.0/bin/nvcc), so the directory above it is not the toolkit: deriving
CUDA_HOME from it gave -I/usr/local/include and "cuda_runtime.h: No such file" in CI.
nvcc itself knows where it lives (`--dryrun` prints TOP=).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path


class NoCudaToolkit(Exception):
    """No usable toolkit here; tests skip with this text."""


def _is_toolkit(root: Path) -> bool:
    return (root / "bin" / "nvcc").is_file() and (root / "include" / "cuda_runtime.h").is_file()


@cache
def cuda_home() -> Path:
    """$CUDA_HOME when it holds a toolkit, else the toolkit of the nvcc on PATH."""
    if os.environ.get("CUDA_HOME"):
        root = Path(os.environ["CUDA_HOME"])
        if not _is_toolkit(root):
            raise NoCudaToolkit(f"CUDA_HOME={root} has no bin/nvcc and include/cuda_runtime.h")
        return root
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise NoCudaToolkit("nvcc is not on PATH and CUDA_HOME is not set")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "empty.cu").write_text("")
        dry = subprocess.run([nvcc, "--dryrun", "-c", "empty.cu"], cwd=tmp, capture_output=True, text=True)
    match = re.search(r"^#\$ TOP=(.+)$", dry.stdout + dry.stderr, re.MULTILINE)
    if not match:
        raise NoCudaToolkit(f"`{nvcc} --dryrun` did not say where its toolkit is (no TOP= line)")
    root = Path(match.group(1).strip()).resolve()
    if not _is_toolkit(root):
        raise NoCudaToolkit(f"{nvcc} runs from {root}, which has no include/cuda_runtime.h")
    return root

"""What `faforge bump` measures a kernel-abi row from, laid out for a run that reads nothing remote.

faforge.kernels.measure_abi reads the torch headers from FAFORGE_CACHE_DIR/torch-headers/<wheel>/ and
flash.h from FAFORGE_CACHE_DIR/flash-attn-sdist/ before it fetches anything, and the wheel's name,
URL and sha256 from the PEP 691 index $FAFORGE_SIMPLE_INDEX. These put both on disk: the real sdist's
headers (tests/gpu/flash_attn_sdist.py) and the include folders a test gives, and a page for the index.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from faforge.matrix import load_matrix
from faforge.wheelfetch import RemoteFile
from tests.gpu.flash_attn_sdist import SdistUnavailable, flash_attn_sdist

OFFLINE = "http://127.0.0.1:9"  # a closed port as every proxy: any request not to loopback fails
OFFLINE_ENV = {
    "http_proxy": OFFLINE,
    "https_proxy": OFFLINE,
    "HTTP_PROXY": OFFLINE,
    "HTTPS_PROXY": OFFLINE,
    "no_proxy": "127.0.0.1",
    "NO_PROXY": "127.0.0.1",
}


def measure_cache(root: Path, headers: dict[str, Path]) -> Path:
    """root as a faforge cache: the real flash-attn sdist's headers and, per wheel file name, its
    torch/include folder (copied from `headers`). Skips without g++ or the sdist."""
    if not shutil.which("g++"):
        pytest.skip("needs g++")
    try:
        flash = flash_attn_sdist() / "csrc" / "flash_attn" / "src"
    except SdistUnavailable as exc:
        pytest.skip(str(exc))
    version = load_matrix().policy.flash_attn_version
    shutil.copytree(
        flash,
        root / "flash-attn-sdist" / f"flash_attn-{version}" / "csrc" / "flash_attn" / "src",
        ignore=lambda folder, names: [n for n in names if not n.endswith(".h") and not (Path(folder) / n).is_dir()],
    )
    for wheel, include in headers.items():
        shutil.copytree(include, root / "torch-headers" / wheel / "torch" / "include")
    return root


def simple_page(root: Path, files: list[RemoteFile]) -> Path:
    """root/simple/torch/index.html: a PEP 691 JSON page listing `files` (serve root over http)."""
    page = root / "simple" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        json.dumps(
            {
                "meta": {"api-version": "1.0"},
                "name": "torch",
                "files": [
                    {"filename": f.filename, "url": f.url, "hashes": {"sha256": f.sha256}, "size": f.size}
                    for f in files
                ],
            }
        )
    )
    return page

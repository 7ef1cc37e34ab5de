"""FlashAttention-3's GPU canary (tests/gpu/canary/flash-attn-3/): the trimmed real build as a wheel.

The build is `recipes/flash-attn-3/build_flash_attn_3.py` on upstream's pinned commit
with everything but head dim 128, fp16/bf16, forward and backward disabled, for sm_90a, installed into a
folder; this module packs that folder into the wheel pip installs on the GPU machine
(flash_attn_3-3.0.0-cp310-abi3-linux_x86_64.whl, members stored, then xz) and writes its manifest:

    python -m tests.gpu.fa3_canary SITE BUILD_COMMAND

SITE holds flash_attn_3/ (with _C.abi3.so), flash_attn_interface.py and flash_attn_config.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import lzma
import sys
import zipfile
from datetime import date
from pathlib import Path

from faforge.family import FLASH_ATTN_3
from faforge.packagefile import sha256_of

FOLDER = Path(__file__).resolve().parent / "canary" / FLASH_ATTN_3.package
TAG = "cp310-abi3-linux_x86_64"
VERSION = "3.0.0"
DIST = f"{FLASH_ATTN_3.module}-{VERSION}"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_from_site(site: Path, out_dir: Path) -> Path:
    """The .whl.xz of `site`'s installed files, with the dist-info pip needs."""
    files = {
        str(p.relative_to(site)): p.read_bytes()
        for p in sorted(site.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    files[f"{DIST}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {FLASH_ATTN_3.module}\nVersion: {VERSION}\n"
        "Requires-Python: >=3.10\nRequires-Dist: torch>=2.9\n"
    ).encode()
    files[f"{DIST}.dist-info/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: faforge\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode()
    )
    files[f"{DIST}.dist-info/top_level.txt"] = (
        f"{FLASH_ATTN_3.module}\n{FLASH_ATTN_3.interface_module}\n{FLASH_ATTN_3.config_module}\n".encode()
    )
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in files.items()] + [
        f"{DIST}.dist-info/RECORD,,"
    ]
    files[f"{DIST}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out_dir / f"{DIST}-{TAG}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            archive.writestr(info, data)
    packed = wheel.with_name(wheel.name + ".xz")
    packed.write_bytes(lzma.compress(wheel.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
    wheel.unlink()
    return packed


def declared(site: Path) -> dict:
    """CONFIG of the build's generated flash_attn_config.py: what the canary contains."""
    namespace: dict = {}
    exec((site / f"{FLASH_ATTN_3.config_module}.py").read_text(), namespace)  # our own build's output
    return namespace["CONFIG"]


def main(argv: list[str]) -> int:
    site, command = Path(argv[0]), argv[1]
    FOLDER.mkdir(parents=True, exist_ok=True)
    packed = wheel_from_site(site, FOLDER)
    config = declared(site)
    manifest = {
        "version": 1,
        "file": packed.name,
        "sha256": sha256_of(packed),
        "size": packed.stat().st_size,
        "build_command": command,
        "declares": {
            "gpu_archs": config["gpu_archs"],
            "tus": config["tus"],
            "build_flags": config["build_flags"],
            "torch_target_version": config["torch_target_version"],
        },
        "date": date.today().isoformat(),
    }
    (FOLDER / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps({k: manifest[k] for k in ("file", "sha256", "size")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

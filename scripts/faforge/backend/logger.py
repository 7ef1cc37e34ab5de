"""Progress lines, prefixed so that they stand out in rattler-build's and conda-build's logs."""

from __future__ import annotations


def log(msg: str) -> None:
    print(f"[build_flash_attn] {msg}", flush=True)

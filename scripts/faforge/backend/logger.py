"""Progress lines, prefixed so that they stand out in rattler-build's and conda-build's logs."""

from __future__ import annotations

from faforge.family import FLASH_ATTN

PREFIX = f"[{FLASH_ATTN.build_script.removesuffix('.py')}] "


def log(msg: str) -> None:
    print(f"{PREFIX}{msg}", flush=True)

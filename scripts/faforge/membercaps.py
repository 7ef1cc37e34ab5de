"""The caps every archive member is read or extracted through: a wheel's zip members
(faforge.pipwheel.members.check_members) and a conda package's tar members (faforge.channel.archive).

A member is refused before anything of it is written when its declared size is over MEMBER_CAP, or when
it is at least RATIO_MIN_BYTES and inflates more than RATIO_CAP times its compressed bytes: a decompression
bomb. Measured on real members (docs/reference/caps.md): 79 real PyPI wheels here (torch 2.14.1,
nvidia-*, scipy, ...) hold 470 members of 1 MiB or more, the most compressible 57x (a 2.1 MB libbz2.so);
of 4 MiB or more, 7.2x at most; flash-attn's kernel library deflates 3.6x (220.9 MB -> 62.1 MB). Below
1 MiB real data does reach 234x (scipy's test tables), so the rule starts at 1 MiB. A .conda payload is
one zstd stream: faforge.channel.archive counts a member's compressed bytes as it reads it (granting it
1 MiB of read-ahead); the same real files as a zstd -19 tarball give at most 6.8x that way (32x granting
none). A bomb is ~1000x (deflate's ceiling is 1032x; zstd's far higher).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import SupportsRead

MEMBER_CAP = (
    2 << 30
)  # declared bytes of one member (the largest real ones: libcublasLt.so.13, 542 MB; libtorch_cuda.so, 503 MB)
TOTAL_CAP = (
    4 << 30
)  # declared bytes of all members of one archive together (a flash-attn wheel for every arch: ~0.5 GB)
RATIO_CAP = 100  # decompressed / compressed bytes a member of RATIO_MIN_BYTES or more may reach
RATIO_MIN_BYTES = 1 << 20


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def size_problem(size: int, total: int) -> str | None:
    """Why a member declaring `size` bytes (`total` with those before it) is refused, or None."""
    if size > MEMBER_CAP:
        return f"declares {size:,} bytes, more than the {MEMBER_CAP:,} a member may have"
    if total > TOTAL_CAP:
        return f"brings the archive's declared size to {total:,} bytes, more than the {TOTAL_CAP:,} it may have"
    return None


def ratio_problem(size: int, compressed: int) -> str | None:
    """Why a member of `size` bytes stored in `compressed` bytes is a bomb's, or None."""
    if size >= RATIO_MIN_BYTES and size > RATIO_CAP * max(compressed, 1):
        return (
            f"inflates {_mib(size)} from {compressed:,} compressed bytes, more than {RATIO_CAP}x "
            f"(a decompression bomb; real members of {_mib(RATIO_MIN_BYTES)} or more stay under 60x)"
        )
    return None


class CountingReader:
    """A raw stream that counts the bytes read through it (a zstd stream's compressed input)."""

    def __init__(self, stream: SupportsRead[bytes]) -> None:
        self.stream, self.count = stream, 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        return data

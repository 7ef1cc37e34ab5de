"""Decode the 8-bit, non-interlaced RGB/RGBA PNGs Chromium writes, with the standard library only."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {2: 3, 6: 4}  # colour type -> samples per pixel (RGB, RGBA)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def read_rgb(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows) where each row is width*3 bytes of RGB."""
    data = path.read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path}: not a PNG")
    pos, idat, header = len(SIGNATURE), b"", None
    while pos < len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour type {colour}, interlace {interlace})")
    n = CHANNELS[colour]
    raw, stride, rows, previous = zlib.decompress(idat), width * n, [], bytearray(width * n)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - n] if i >= n else 0
            up, corner = previous[i], previous[i - n] if i >= n else 0
            line[i] = (line[i] + (0, left, up, (left + up) // 2, _paeth(left, up, corner))[kind]) & 0xFF
        rows.append(bytes(line[j] for j in range(stride) if j % n < 3) if n == 4 else bytes(line))
        previous = line
    return width, height, rows


def count_colour(path: Path, rgb: tuple[int, int, int]) -> int:
    _, _, rows = read_rgb(path)
    target = bytes(rgb)
    return sum(sum(1 for x in range(0, len(row), 3) if row[x : x + 3] == target) for row in rows)

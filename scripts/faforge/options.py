"""argparse types for numbers, shared by the subcommands: a value out of range is a usage error (exit 2)
at parse time, before any work starts or a "nothing verified" exit can hide it."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"{value} is out of range: expected {low}..{high if high is not None else ''}"
            )
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def positive_ints(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated integers, each at least 1, e.g. 512,2048."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 512,2048") from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be at least 1")
    return values

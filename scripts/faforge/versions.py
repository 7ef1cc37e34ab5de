"""Dotted numeric versions as tuples, so '2.10' sorts after '2.9'."""

from __future__ import annotations

import re

_VERSION = re.compile(r"\d+(\.\d+)*")


def is_version(text: str) -> bool:
    return bool(_VERSION.fullmatch(text))


def vtuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def minor_of(version: str) -> str:
    """'2.7.1' -> '2.7'."""
    return ".".join(version.split(".")[:2])


def next_minor(version: str) -> str:
    """'2.7.1' -> '2.8': the exclusive upper bound of a minor pin."""
    major, minor = vtuple(version)[:2]
    return f"{major}.{minor + 1}"


def satisfies(version: str, constraint: str) -> bool:
    """A small subset of conda constraints: '>=12.8', '<12.8', '>=12.0,<13'."""
    for clause in constraint.split(","):
        match = re.fullmatch(r"(>=|<=|==|>|<)\s*([\d.]+)", clause.strip())
        if match is None:  # constraints are checked by is_constraint where the data is loaded
            raise ValueError(f"{clause.strip()!r} in {constraint!r} is not a version constraint like '>=12.8'")
        op, bound = match.groups()
        left, right = vtuple(version), vtuple(bound)
        width = max(len(left), len(right))
        left, right = left + (0,) * (width - len(left)), right + (0,) * (width - len(right))
        ok = {
            ">=": left >= right,
            "<=": left <= right,
            "==": left == right,
            ">": left > right,
            "<": left < right,
        }[op]
        if not ok:
            return False
    return True


def is_constraint(text: str) -> bool:
    return all(re.fullmatch(r"(>=|<=|==|>|<)\s*[\d.]+", c.strip()) for c in text.split(","))

"""What a channel already holds of the packages a plan would build: held under the exact build string, or stale.

A package counts as held only under its exact build string, whose hash covers the digests of its inputs
(faforge.matrix.inputs); one the channel holds under the same build string head but another hash was built from
other inputs (or another variant), so the plan lists it as stale and builds it anew. Apart from the planning
(faforge.release.plan.stage) because it reads the channel's records, which the jobs never do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from faforge.matrix.kernels import KernelPackage
from faforge.matrix.render import RenderedCell, build_string_head
from faforge.release.plan import jobs as plan_jobs

if TYPE_CHECKING:
    from rattler import RepoDataRecord


class Built(Protocol):
    """What is built, as a render says: its platform (a cell's or a package's)."""

    @property
    def platform(self) -> str: ...


class Rendered(plan_jobs.Rendered, Protocol):
    """A package as its recipe renders it, and what it builds (a cell, or another family's package)."""

    @property
    def cell(self) -> Built: ...


def present_keys(records: Iterable[RepoDataRecord]) -> set[tuple[str, str, str, str]]:
    """(name, version, build string, subdir) of each record a channel holds."""
    return {(r.name.normalized, str(r.version), str(r.build), str(r.subdir)) for r in records}


def kernel_build(kernels: KernelPackage, todo: list[RenderedCell]) -> str | None:
    """The kernel build the package's cells pin exactly (their rendered run requirements), or None for
    a recipe whose flash-attn pins none."""
    pins = kernels.pins(todo)
    return pins.pop().build if len(pins) == 1 else None


def _held(name: str, version: str, subdir: str, present: set[tuple[str, str, str, str]]) -> set[str]:
    return {b for n, v, b, s in present if (n, v, s) == (name, version, subdir)}


def kernel_in(kernels: KernelPackage, present: set[tuple[str, str, str, str]], build: str | None = None) -> bool:
    """Whether the channel holds the kernel package: its exact build when known, else any of its key."""
    held = _held(kernels.name, kernels.version, kernels.key.platform, present)
    return build in held if build else any(kernels.build_string_matches(b) for b in held)


def stale_packages(todo: Sequence[Rendered], present: set[tuple[str, str, str, str]]) -> frozenset[str]:
    """What the channel holds under the build string of a package to build, with another hash."""
    out: set[str] = set()
    for r in todo:
        package = r.recipe["package"]
        name, version = package["name"], str(package["version"])
        out |= {
            f"{r.cell.platform}/{name}-{version}-{b}.conda"
            for b in _held(name, version, r.cell.platform, present)
            if b != r.build_string and build_string_head(b) == build_string_head(r.build_string)
        }
    return frozenset(out)


def stale_kernels(
    kernels: list[KernelPackage], builds: dict[str, str | None], present: set[tuple[str, str, str, str]]
) -> frozenset[str]:
    """What the channel holds of a kernel package to build under its build string's head, with another build."""
    out: set[str] = set()
    for k in kernels:
        build = builds.get(k.key.id)
        if build:
            out |= {
                f"{k.key.platform}/{k.name}-{k.version}-{b}.conda"
                for b in _held(k.name, k.version, k.key.platform, present)
                if b != build and k.build_string_matches(b)
            }
    return frozenset(out)

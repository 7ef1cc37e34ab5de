"""What the GPU stage asks of a family: its suite, its gate and its benchmark entry (`GpuFamily`), and one
home for the lines that say a GPU suite was not run here.

`faforge test-gpu` and `faforge bench-gpu` are handed each family's `gpu` namespace (a module satisfying
GpuFamily) and never name a family. Where faforge's CLI is absent (a recipe's test environment, a verify
venv), `load` finds the namespace by the package's name. Standard library only: this folder is shipped
into bare test environments.
"""

from __future__ import annotations

import importlib
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from faforge.errors import FaforgeError


class GpuGate(Protocol):
    """A family's verdict on this machine: can its suite run, and why not."""

    @property
    def usable(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def torch(self) -> str | None: ...
    @property
    def device(self) -> str | None: ...
    @property
    def defects(self) -> tuple[str, ...]: ...
    @property
    def notes(self) -> tuple[str, ...]: ...

    def to_json(self) -> dict: ...


class GpuFamily(Protocol):
    """A family's `gpu` namespace (faforge.families.<name>.module.gpu)."""

    @property
    def package(self) -> str:
        """The installed package it tests (`--family`'s word, and the benchmark's column)."""

    @property
    def suite(self) -> Path:
        """The folder of pytest files shipped to the GPU machine."""

    @property
    def declares_in(self) -> str | None:
        """The file in which the package declares its GPU code itself, so it takes no
        --declared-archs/--declared-head-dims; None: it takes them."""

    @property
    def coverage_fails(self) -> bool:
        """Whether a declared kernel TU that no test launched fails the run (else it is reported only)."""

    @property
    def gate_key(self) -> str:
        """bench-gpu's JSON key for this family's gate."""

    @property
    def bench_note(self) -> str | None:
        """How bench-gpu picks this package's head dims by default, for its --help; None: the generic ones."""

    @property
    def bench_baselines(self) -> tuple[str, ...]:
        """The implementations bench-gpu reports this family's speed-up over."""

    def evaluate(self) -> Any:
        """The family's GpuGate (cached per process)."""

    def coverage(self, observed: dict, gate: Any) -> dict:
        """test-gpu's kernel_coverage record from the profiler's kernels.json and the gate."""

    def attention_function(self) -> Callable[..., Any] | str:
        """The dense attention function bench-gpu times, or why it is not installed here."""

    def bench_head_dims(self, gate: Any) -> tuple[int, ...] | None:
        """The head dims bench-gpu should run by default for this package, or None for the generic ones."""

    def bench_expects(self, gate: Any, head_dim: int) -> bool:
        """Whether a run of this head dim should have worked (False: n/a, not a failure)."""

    def built_by(self, gate: Any) -> dict[str, str | None]:
        """{package: the nvcc its package declares it was built by} for bench-gpu's `nvcc`; {} when none."""


def load(package: str) -> GpuFamily:
    """The GPU namespace of `package` where faforge's CLI and its registry are absent: the suite shipped in this
    folder (faforge.gpu.builtin) for its own package, else faforge.families.<package as a module>.gpu."""
    from faforge.gpu import builtin  # noqa: PLC0415 (the shipped suite; imports its gate)

    if package == builtin.package:
        return builtin
    try:
        return importlib.import_module(f"faforge.families.{package.replace('-', '_')}.gpu")
    except ModuleNotFoundError as exc:
        raise FaforgeError(
            f"no GPU suite for {package} here ({exc})",
            input=f"--family {package}",
            hint=f"run it through `faforge test-gpu --family {package}`, or omit --family for {builtin.package}",
        ) from None


def attention_function(module: str, name: str) -> Callable[..., Any] | str:
    """`module`'s attention function `name`, or why it is not importable here (n/a in bench-gpu, not a failure)."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, OSError, AttributeError) as exc:
        return f"not installed here ({exc})"


def not_run_here(what: str, subdir: str, machine: str, runner: str = "") -> str:
    """Why a package or wheel of another machine has no GPU verdict here: its suite runs natively on a GPU runner of
    that machine (`runner`: where CI has one)."""
    return (
        f"a {subdir} {what}'s GPU suite runs natively on a GPU runner of that machine ({machine}{runner}); "
        f"this machine is {platform.machine()}"
    )

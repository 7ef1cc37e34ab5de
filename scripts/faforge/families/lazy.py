"""A family module's stage namespaces, each imported when a stage first asks for it.

A command reaches only its own stage: `faforge test-gpu` on the GPU machine carries the GPU stage's few
dependencies and none of the others' (py-rattler, zstandard), and a command starts without importing every
stage of every family. Each family module declares its stages' types for mypy under TYPE_CHECKING and
answers the names at run time through the `__getattr__` this makes (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType


def stage_loader(owner: str, stages: Mapping[str, str]) -> Callable[[str], ModuleType]:
    """The module `__getattr__` of the family module `owner`: stage name -> the module that implements it."""

    def stage(name: str) -> ModuleType:
        if name not in stages:
            raise AttributeError(f"module {owner!r} has no attribute {name!r}")
        return importlib.import_module(stages[name])

    return stage

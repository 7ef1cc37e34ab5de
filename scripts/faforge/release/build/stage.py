"""What the build stage asks a family (its module's `build`, faforge.families.<name>.build): which ids are its own,
the jobs they mean, checked before any build, and the builds those jobs take from its recipe and variant file.

`faforge build` (faforge.release.build.run) owns none of that: it hands each id to the family that owns it, joins
the families' words into its messages and help, and runs their batches in order, numbered as one run.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from faforge.matrix import Matrix
    from faforge.matrix.render import SourceOverride
    from faforge.release.build.pip import WheelBuild
    from faforge.release.build.steps import CellBuild
    from faforge.release.reporter import Reporter


class Buildable(Protocol):
    """What a build is of, for its channels, CUDA override and file names: a cell, or a package of any family."""

    @property
    def id(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def cuda(self) -> str: ...
    @property
    def channels(self) -> tuple[str, ...]: ...


class RenderedBuild(Protocol):
    """An output as rattler-build rendered it (faforge.matrix.render): what it builds, its recipe and variant."""

    @property
    def cell(self) -> Buildable: ...
    @property
    def build_string(self) -> str: ...
    @property
    def recipe(self) -> dict: ...
    @property
    def variant(self) -> object: ...


@dataclass(frozen=True)
class BuildRequest:
    """What `faforge build` was asked, its options as given (checked here, in this order)."""

    cells: list[str]
    part: str
    plan: str | None
    output_dir: Path
    log_dir: Path | None
    source: Path | None
    channel_alias: list[str]
    extra_channel: list[str]
    # Pip cells' wheels only (faforge.release.build.pip): their kernel packages given, the channel that holds
    # them, and the CUDA toolkit the glue compiles with.
    kernel_package: list[Path] = field(default_factory=list)
    kernel_channel: str | None = None
    cuda_home: Path | None = None
    torch_site: Path | None = None  # a linux-aarch64 pip cell's aarch64 torch (a cross build)
    target_python: Path | None = None  # and its aarch64 CPython


@dataclass(frozen=True)
class BuildWhere:
    """Where every build of the run reads and writes, checked before the first one."""

    output_dir: Path
    log_dir: Path
    channel_aliases: dict[str, str]
    extra_channels: list[str]


@dataclass(frozen=True)
class Batch:
    """`count` builds a family runs in a row: `run(report, first, total)` numbers them from `first` of `total`.
    A batch `after_packages` runs once every family's conda packages are built (it may read them from the
    output dir, as a pip cell's wheels read their kernel package)."""

    count: int
    run: Callable[[Reporter, int, int], list[CellBuild | WheelBuild]]
    after_packages: bool = False


class FamilyJobs(Protocol):
    """A family's share of one run, every option checked."""

    @property
    def from_recipe(self) -> bool:
        """Whether these jobs build from the family's recipe (so `--source` replaces its source)."""
        ...

    def batches(self, where: BuildWhere, stack: ExitStack) -> list[Batch]:
        """The builds, with the recipe they render entered on `stack` (it stays open while they run)."""
        ...


@dataclass(frozen=True)
class BuildWords:
    """A family's words in `faforge build`'s help and messages, each joined with the other families'.
    `ids`, `parts` and `whole` are list items; `about` and `about_after` are sentences of the command's
    description (`about_after` for the builds that come after every family's packages)."""

    ids: tuple[str, ...]  # how its ids are listed: "cell ids as `faforge matrix` prints them"
    parts: tuple[str, ...]  # the --part values it takes besides `all`
    whole: tuple[str, ...]  # what `all` builds: "cell", "pip cell"
    source: str  # what --source replaces for it
    listing: str  # where its ids are listed, for an unknown id's hint
    named: str  # what to name to build, for "nothing to build"
    built: str  # what its jobs build, when --source cannot serve two families
    about: str
    about_after: str = ""


class BuildFamily(Protocol):
    """A family's `build` namespace, as faforge.release.build.run asks it."""

    @property
    def words(self) -> BuildWords: ...

    def owns(self, matrix: Matrix, key: str) -> bool:
        """Whether `key` is one of the family's ids in this matrix (a cell, a package, ...)."""
        ...

    def refusal(self, matrix: Matrix, key: str) -> str | None:
        """Why `key`, spelled as one of the family's ids but none of this matrix, is refused; None otherwise."""
        ...

    def example(self, matrix: Matrix) -> str | None:
        """An id of the family for an unknown id's message ("a cell id (e.g. ...)"); None when it has none."""
        ...

    def jobs(
        self, matrix: Matrix, wanted: list[tuple[str, str]], request: BuildRequest, source: SourceOverride | None
    ) -> FamilyJobs:
        """The family's jobs among `wanted` (its own ids only), each checked: a bad part or option raises."""
        ...


def listed(items: list[str], last: str = ", or ") -> str:
    """'a, b, or c' ('a' alone, 'a, or b'): the families' list items as one phrase."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + last + items[-1]

"""What the build matrix asks of a family: the matrix stage's Protocols, as cibuildwheel's PlatformModule.

The matrix's own rows are flash-attn 2's cells and kernel packages (faforge.matrix.cells and .kernels). A
family that builds packages of its own adds them through its `matrix` namespace (a MatrixFamily,
faforge.families.<name>.matrix): it reads its rows from its own section of variants/matrix.yaml, writes its
generated variant files, renders its packages and lists them under its own `faforge matrix` option. The
generic code (load_matrix, generated_files, `faforge matrix` and `faforge generate`) iterates the families
and never names one; a family with no packages of its own returns no rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from faforge.matrix.policy import BuildPolicy
    from faforge.matrix.releases import ReleaseTable
    from faforge.matrix.render_packages import RenderedPackage


class MatrixPackage(Protocol):
    """One package of a family's rows, as the generic code reads it (a frozen dataclass satisfies it)."""

    @property
    def id(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def world(self) -> str: ...  # the torch world whose channels build it
    @property
    def cuda(self) -> str: ...
    @property
    def channels(self) -> tuple[str, ...]: ...

    def variant(self) -> dict[str, str]:
        """The values its generated variant file zips for it, all strings."""
        ...

    def rendered_json(self) -> dict:
        """What a plan's JSON says of its render besides id, name, version and build string."""
        ...


@dataclass(frozen=True)
class ListingOption:
    """A family's own listing in `faforge matrix`: its flag and the words its help and description add."""

    flag: str  # '--name', in the group of listings beside --kernels
    noun: str  # what the command's first line lists: 'its cells, or its kernel or <noun> packages'
    help: str
    json_help: str  # appended to --json's help: 'with <flag> of those packages (<its schema>)'
    description: str  # a clause of the command's description: '`<flag>` the ... packages, ...'


@dataclass(frozen=True)
class Listing:
    """A family's listing as data: `--json` prints the records, the table the rows and then the summary."""

    records: list[dict]
    header: list[str]
    rows: list[list]
    summary: str


class FamilyRows(Protocol):
    """A family's packages in the matrix, read from its data, and what the matrix does with them."""

    @property
    def key(self) -> str: ...  # the family's key (faforge.family), its section of variants/matrix.yaml
    @property
    def packages(self) -> Sequence[MatrixPackage]: ...

    def variant_files(self) -> dict[Path, str]:
        """Its generated variant files under variants/ and their expected text."""
        ...

    def render(self, platform: str = "all") -> Sequence[RenderedPackage]:
        """Its packages of `platform` ('all': every one) as rattler-build renders them."""
        ...

    def listing(self, platform: str, world: str | None) -> Listing:
        """Its listing for `faforge matrix <its flag>` (`world`: --world, None when not given)."""
        ...


class MatrixFamily(Protocol):
    """A family's `matrix` namespace."""

    @property
    def listing_option(self) -> ListingOption | None: ...

    def rows(self, table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> FamilyRows | None:
        """Its packages for the release table, read from its section of variants_dir/matrix.yaml; None: none."""
        ...


class FamilyWithMatrix(Protocol):
    """A family module (faforge.families.protocol.FamilyModule) as the matrix reads it."""

    @property
    def matrix(self) -> MatrixFamily: ...

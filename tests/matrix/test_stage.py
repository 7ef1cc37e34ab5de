"""The matrix stage asks each family (faforge.matrix.stage): a family with packages of its own adds its rows,
variant files and listing through its `matrix` namespace, and a stand-in third family fits with no edit to
the generic code."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from faforge.commands.matrix import describe
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN_3, FLASH_ATTN_4
from faforge.matrix import load_matrix
from faforge.matrix.stage import Listing, ListingOption
from faforge.matrix.variants import generated_files

OPTION = ListingOption(
    flag="--pure",
    noun="Pure",
    help="list the pure packages",
    json_help="with --pure of those packages",
    description="`--pure` the pure packages",
)


@dataclass(frozen=True)
class PurePackage:
    """A noarch package per torch minor and CUDA, as a pure-Python family would have."""

    torch_minor: str
    cuda: str
    platform: str = "noarch"
    world: str = "conda-forge"
    channels: tuple[str, ...] = ("conda-forge",)

    @property
    def id(self) -> str:
        return f"noarch/torch{self.torch_minor}/cu{self.cuda.replace('.', '')}"

    def variant(self) -> dict[str, str]:
        return {"torch_minor": self.torch_minor, "cuda_compiler_version": self.cuda}

    def rendered_json(self) -> dict:
        return {"torch_minor": self.torch_minor}


@dataclass(frozen=True)
class PureRows:
    packages: tuple[PurePackage, ...]
    variants_dir: Path
    key: str = "pure"

    def variant_files(self) -> dict[Path, str]:
        return {self.variants_dir / "pure.yaml": "".join(f"{p.id}\n" for p in self.packages)}

    def render(self, platform: str = "all") -> list:
        return []

    def listing(self, platform: str, world: str | None) -> Listing:
        return Listing([{"id": p.id} for p in self.packages], ["package"], [[p.id] for p in self.packages], "")


def pure_rows(table, policy, variants_dir: Path) -> PureRows:
    """One package per (torch minor, CUDA) of the conda-forge world's builds, from the release table."""
    pairs = sorted({(r.torch_minor, r.cuda) for r in table.releases if r.world == "conda-forge"})
    return PureRows(tuple(PurePackage(minor, cuda) for minor, cuda in pairs), variants_dir)


PURE = SimpleNamespace(matrix=SimpleNamespace(listing_option=OPTION, rows=pure_rows))


def test_the_registered_families_add_their_own_packages(repo):
    matrix = load_matrix(repo, FAMILIES)
    # flash-attn 2's rows are the cells
    assert [rows.key for rows in matrix.families] == [FLASH_ATTN_3.key, FLASH_ATTN_4.key]
    assert matrix.rows_of(FLASH_ATTN_3.key).packages == tuple(packages_of(matrix))
    files = generated_files(matrix.cells, matrix.variants_dir, matrix.families)
    assert {p.name for p in files if p.name.startswith(FLASH_ATTN_3.package)} == {
        f"{FLASH_ATTN_3.package}-linux-64-conda-forge.yaml",
        f"{FLASH_ATTN_3.package}-linux-aarch64-conda-forge.yaml",
    }


def test_a_matrix_loaded_without_families_still_reads_a_familys_packages(repo):
    bare = load_matrix(repo)
    assert bare.families == () and bare.rows_of(FLASH_ATTN_3.key) is None
    assert packages_of(bare) == packages_of(load_matrix(repo, FAMILIES))


def test_a_third_family_fits_without_an_edit_to_the_generic_code(repo):
    matrix = load_matrix(repo, [*FAMILIES, PURE])
    rows = matrix.rows_of("pure")
    assert rows is not None and rows.packages and all(p.platform == "noarch" for p in rows.packages)
    files = generated_files(matrix.cells, matrix.variants_dir, matrix.families)
    assert files[matrix.variants_dir / "pure.yaml"].splitlines() == [p.id for p in rows.packages]
    assert [r["id"] for r in rows.listing("all", None).records] == [p.id for p in rows.packages]


def test_the_matrix_description_names_each_familys_listing():
    first = describe([OPTION]).split("\n\n")
    assert first[0] == "List the build matrix (offline): its cells, or its kernel or Pure packages."
    assert first[1].endswith("the cells that depend on it; `--pure` the pure packages.")
    two = replace(OPTION, noun="Other")
    assert describe([OPTION, two]).startswith(
        "List the build matrix (offline): its cells, or its kernel, Pure or Other"
    )
    assert "on it." in describe([])

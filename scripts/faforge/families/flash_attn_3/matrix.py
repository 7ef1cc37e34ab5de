"""FlashAttention-3's `matrix` namespace (faforge.matrix.stage.MatrixFamily): its packages in the build
matrix (faforge.families.flash_attn_3.matrix_rows), their generated variant files, their renders and their
listing, `faforge matrix --fa3`.

The package rows' names stay importable from here, as the other stages import them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.matrix_rows import Fa3Package, Fa3Policy, fa3_packages, load_fa3_policy
from faforge.family import FLASH_ATTN_3
from faforge.matrix.inputs import family_input_digests
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable
from faforge.matrix.render_packages import RenderedPackage, render_family_packages
from faforge.matrix.stage import Listing, ListingOption
from faforge.matrix.variants import variant_config_text

if TYPE_CHECKING:
    from faforge.matrix import Matrix

__all__ = [
    "Fa3Package",
    "Fa3Policy",
    "Fa3Rows",
    "RenderedFa3",
    "fa3_packages",
    "fa3_variant_config_name",
    "listing_option",
    "load_fa3_policy",
    "packages_of",
    "rows",
]

RenderedFa3 = RenderedPackage[Fa3Package]  # a package as rattler-build renders it from its variant file


def fa3_variant_config_name(platform: str, world: str) -> str:
    """The generated variant file of the packages of one platform and world."""
    return f"{FLASH_ATTN_3.package}-{platform}-{world}.yaml"


@dataclass(frozen=True)
class Fa3Rows:
    """The packages in the matrix (faforge.matrix.stage.FamilyRows), with the variants/ they were read from."""

    packages: tuple[Fa3Package, ...]
    variants_dir: Path
    key: str = FLASH_ATTN_3.key

    def variant_files(self) -> dict[Path, str]:
        """One variant file per (platform, world) that has packages, its digest of the recipe's inputs beside."""
        digests = family_input_digests(self.variants_dir.parent, FLASH_ATTN_3) if self.packages else {}
        files = {}
        for platform, world in sorted({(p.platform, p.world) for p in self.packages}):
            name = fa3_variant_config_name(platform, world)
            files[self.variants_dir / name] = variant_config_text(
                self.packages,
                platform,
                world,
                digests,
                recipe_dir=FLASH_ATTN_3.recipe_dir,
                name=name,
                noun=f"{FLASH_ATTN_3.package} packages",
            )
        return files

    def render(self, platform: str = "all") -> list[RenderedFa3]:
        return render_family_packages(
            [p for p in self.packages if platform in ("all", p.platform)],
            self.variants_dir.parent / FLASH_ATTN_3.recipe_dir / "recipe.yaml",
            FLASH_ATTN_3.package,
            lambda platform, world: self.variants_dir / fa3_variant_config_name(platform, world),
        )

    def listing(self, platform: str, world: str | None) -> Listing:
        """Each package with its build string as rattler-build renders it from the generated variant file."""
        if world is not None:
            raise FaforgeError(
                "--fa3 lists the FlashAttention-3 packages of their one world; --world does not apply",
                hint="leave out --world",
            )
        records = [{**r.package.to_json(), "build_string": r.build_string} for r in self.render(platform)]
        rows = [
            [
                r["id"],
                r["cuda"],
                r["cuda_archs"],
                r["build_string"],
                r["headers_torch"],
                ", ".join(r["served_torch_minors"]),
            ]
            for r in records
        ]
        return Listing(
            records=records,
            header=["package", "cuda", "archs", "build string", "headers", "serves torch"],
            rows=rows,
            summary=f"{len(records)} {FLASH_ATTN_3.package} packages, each serving "
            f"python {records[0]['python'] if records else '-'} (limited API)",
        )


def rows(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> Fa3Rows:
    packages = fa3_packages(table, policy, load_fa3_policy(variants_dir / "matrix.yaml"))
    return Fa3Rows(packages=tuple(packages), variants_dir=variants_dir)


def packages_of(matrix: Matrix) -> list[Fa3Package]:
    """The packages of `matrix`, read from its variants/ where load_matrix was not given this family."""
    found = matrix.rows_of(FLASH_ATTN_3.key)
    if isinstance(found, Fa3Rows):
        return list(found.packages)
    return list(rows(matrix.table, matrix.policy, matrix.variants_dir).packages)


listing_option = ListingOption(
    flag="--fa3",
    noun="FlashAttention-3",
    help=f"list the {FLASH_ATTN_3.package} packages (one per platform, CUDA and arch list) with the torch minors "
    "each serves, instead of the cells",
    json_help="with --fa3 of those packages (tests/schemas/matrix-fa3.json)",
    description="`--fa3` the FlashAttention-3 packages, each with the torch minors it serves",
)

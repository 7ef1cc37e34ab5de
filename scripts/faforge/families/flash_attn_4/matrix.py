"""FlashAttention-4's `matrix` namespace (faforge.matrix.stage.MatrixFamily): one noarch conda package per known-good
set (variants/flash-attn-4.yaml), its generated variant file, its render and its listing, `faforge matrix --fa4`.

Nothing is compiled: each package is upstream's wheel whose run requirements are its set, pinned by the data file's
policy (exact `==`, floor `>=`) under conda's names. The variant file carries each pin as one value, so the recipe
(recipes/flash-attn-4) names every package once and the data decides its version; the build string names the torch
minor and CUDA of the set, as the wheel index's label does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet

from faforge.errors import DataError, FaforgeError
from faforge.families.flash_attn_4 import sets
from faforge.families.flash_attn_4.conda_names import CONDA_NAMES
from faforge.family import FLASH_ATTN_4
from faforge.matrix.inputs import family_input_digests
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable
from faforge.matrix.render_packages import RenderedPackage, render_family_packages
from faforge.matrix.stage import Listing, ListingOption
from faforge.matrix.variants import NATIVE_PLATFORM, variant_config_text

WORLD = "conda-forge"  # the torch world whose pytorch the packages install beside
PIN_PREFIX = "fa4_pin_"


def pin_key(conda_name: str) -> str:
    """The variant key of a conda package's pin: fa4_pin_typing_extensions."""
    return PIN_PREFIX + conda_name.replace("-", "_")


def variant_config_name() -> str:
    return f"{FLASH_ATTN_4.package}-{WORLD}.yaml"


def conda_pins(data: sets.Fa4Data, kgs: sets.KnownGoodSet) -> dict[str, str]:
    """{conda name: '==V' or '>=V'} of a set, by the data file's pin policy; a package with no conda mapping is a
    data error (the recipe would silently leave it out)."""
    pins = {}
    for name, version in kgs.packages.items():
        if name not in CONDA_NAMES:
            raise DataError(
                data.path,
                "sets.packages",
                f"{name} has no conda name in faforge.families.flash_attn_4.matrix.CONDA_NAMES",
                hint="add it there (None when conda-forge folds it into another package) and to the recipe",
            )
        conda = CONDA_NAMES[name]
        if conda is not None:
            pins[conda] = f"{'==' if name in data.exact else '>='}{version}"
    return pins


@dataclass(frozen=True)
class Fa4Package:
    """One conda package: upstream's wheel of `version` with the known-good set of a torch minor and CUDA."""

    version: str
    torch: str  # the torch minor, "2.11"
    cuda: str  # "13.0"
    python: tuple[str, ...]  # the pythons the set was resolved for, oldest first
    wheel: str
    url: str
    sha256: str
    pins: tuple[tuple[str, str], ...]  # (conda name, '==V' / '>=V')
    channels: tuple[str, ...]
    platform: str = NATIVE_PLATFORM  # where it is built: the package itself is noarch
    world: str = WORLD

    @property
    def set_id(self) -> str:
        return f"torch{self.torch}-cu{self.cuda.replace('.', '')}"

    @property
    def id(self) -> str:
        return f"noarch/{self.set_id}/{self.version}"

    @property
    def python_below(self) -> str:
        """The first python the set was not resolved for: the run requirement's upper bound."""
        major, minor = self.python[-1].split(".")
        return f"{major}.{int(minor) + 1}"

    def variant(self) -> dict[str, str]:
        return {
            "fa4_version": self.version,
            "fa4_wheel": self.wheel,
            "fa4_url": self.url,
            "fa4_sha256": self.sha256,
            "fa4_torch": self.torch,
            "fa4_cuda": self.cuda,
            "fa4_python_min": self.python[0],
            "fa4_python_below": self.python_below,
            **{pin_key(name): pin for name, pin in self.pins},
        }

    def rendered_json(self) -> dict:
        return {"torch": self.torch, "cuda": self.cuda, "set": self.set_id}

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "package": FLASH_ATTN_4.package,
            "version": self.version,
            "torch": self.torch,
            "cuda": self.cuda,
            "python": list(self.python),
            "run": [f"{name} {pin}" for name, pin in self.pins],
        }


def fa4_packages(data: sets.Fa4Data, channels: tuple[str, ...]) -> list[Fa4Package]:
    releases = {r.version: r for r in data.releases}
    packages = []
    for kgs in sorted(data.sets, key=lambda s: (s.torch, s.cuda, s.version)):
        release = releases[kgs.version]
        python = tuple(sorted(kgs.python, key=lambda v: tuple(map(int, v.split(".")))))
        if bad := [p for p in python if not SpecifierSet(release.requires_python).contains(f"{p}.0")]:
            raise DataError(
                data.path, "sets.python", f"{bad} are outside {release.version}'s {release.requires_python}"
            )
        pins = tuple(sorted(conda_pins(data, kgs).items()))
        packages.append(
            Fa4Package(
                release.version, kgs.torch, kgs.cuda, python, release.wheel, release.url, release.sha256, pins, channels
            )
        )
    return packages


@dataclass(frozen=True)
class Fa4Rows:
    """The packages in the matrix (faforge.matrix.stage.FamilyRows), with the variants/ they were read from."""

    packages: tuple[Fa4Package, ...]
    variants_dir: Path
    key: str = FLASH_ATTN_4.key

    def variant_files(self) -> dict[Path, str]:
        if not self.packages:
            return {}
        name = variant_config_name()
        text = variant_config_text(
            self.packages,
            NATIVE_PLATFORM,
            WORLD,
            family_input_digests(self.variants_dir.parent, FLASH_ATTN_4),
            recipe_dir=FLASH_ATTN_4.recipe_dir,
            name=name,
            noun=f"{FLASH_ATTN_4.package} packages (noarch: python, one per known-good set)",
        )
        return {self.variants_dir / name: text}

    def render(self, platform: str = "all") -> list[RenderedPackage[Fa4Package]]:
        return render_family_packages(
            [p for p in self.packages if platform in ("all", p.platform, "noarch")],
            self.variants_dir.parent / FLASH_ATTN_4.recipe_dir / "recipe.yaml",
            FLASH_ATTN_4.package,
            lambda platform, world: self.variants_dir / variant_config_name(),
        )

    def listing(self, platform: str, world: str | None) -> Listing:
        if world is not None:
            raise FaforgeError(
                "--fa4 lists the FlashAttention-4 packages of their one world; --world does not apply",
                hint="leave out --world",
            )
        records = [{**r.package.to_json(), "build_string": r.build_string} for r in self.render(platform)]
        rows = [[r["id"], r["torch"], r["cuda"], r["build_string"], len(r["run"])] for r in records]
        return Listing(
            records=records,
            header=["package", "torch", "cuda", "build string", "pins"],
            rows=rows,
            summary=f"{len(records)} {FLASH_ATTN_4.package} packages (noarch: python), one per known-good set",
        )


def rows(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> Fa4Rows:
    data = sets.load(variants_dir / Path(FLASH_ATTN_4.data_file).name)
    if WORLD not in table.worlds:
        raise DataError(data.path, "(world)", f"variants/releases.yaml has no torch world {WORLD!r}")
    return Fa4Rows(tuple(fa4_packages(data, table.worlds[WORLD].channels)), variants_dir)


listing_option = ListingOption(
    flag="--fa4",
    noun="FlashAttention-4",
    help=f"list the {FLASH_ATTN_4.package} packages (noarch, one per known-good set of a torch minor and CUDA) "
    "with their run pins, instead of the cells",
    json_help="with --fa4 of those packages (tests/schemas/matrix-fa4.json)",
    description="`--fa4` the FlashAttention-4 packages, one per known-good set",
)

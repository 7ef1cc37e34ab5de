"""Render the recipe for every cell through py-rattler-build (offline, no solve).

The build string and run requirements come from rattler-build's own render, never from a
re-implementation, so what `faforge matrix` prints is what a build will produce. Here: a cell's flash-attn and
its kernel output; the packages keyed by CUDA and archs alone (the pip world's kernels, a family's own
packages) are faforge.matrix.render_packages'.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.matrix.cells import Cell
from faforge.matrix.kernels import FLASH_ATTN_PACKAGE, KERNEL_PACKAGE, kernel_key
from faforge.matrix.variants import variant_config_path

if TYPE_CHECKING:
    from rattler_build.render import RenderedVariant


@dataclass(frozen=True)
class RenderedCell:
    cell: Cell
    build_string: str
    hash: str
    run_requirements: tuple[str, ...]
    run_constraints: tuple[str, ...]
    host_requirements: tuple[str, ...]
    build_requirements: tuple[str, ...]
    recipe: dict
    # py-rattler-build's RenderedVariant, which `faforge build` runs.
    variant: object = field(default=None, compare=False, repr=False)


# py312_torch2_7_cu129_cxx11abi1_h1a2b3c4_0: what the cell is, then the variant hash and build number.
BUILD_HASH = re.compile(r"^(?P<head>.+)_h[0-9a-f]+_\d+$")


def build_string_head(build_string: str) -> str:
    """The build string without its variant hash and build number: the same for a cell across recipe changes."""
    match = BUILD_HASH.match(build_string)
    return match["head"] if match else build_string


def cell_key(values: dict) -> tuple:
    return (
        str(values["python"]),
        str(values["torch_version"]),
        str(values["cuda_compiler_version"]),
        str(values["cxx11_abi"]),
    )


# The recipe's upstream source: its first `url:` entry and the `sha256:` line after it, or (a recipe whose
# C++ sources no sdist carries) its `git:` entry and the `rev:` line after it.
UPSTREAM_SOURCE = re.compile(
    r"^(?P<indent>\s*)- (?:url: .*\n(?P=indent)  sha256: .*|git: .*\n(?P=indent)  rev: .*)$", re.MULTILINE
)


@dataclass(frozen=True)
class SourceOverride:
    """Build from another flash-attn sdist (a local file): a patched tree, a mirror's copy, a test's
    tiny stand-in. Only the recipe's upstream url and sha256 change; build and tests stay as they are."""

    url: str
    sha256: str

    @classmethod
    def from_sdist(cls, path: Path) -> SourceOverride:
        if not path.is_file():
            raise FaforgeError(
                f"--source {path}: {'not a regular file' if path.exists() else 'no such file'}",
                hint=f"pass a {FLASH_ATTN.package} sdist (.tar.gz)",
            )
        if not tarfile.is_tarfile(path):
            raise FaforgeError(
                f"--source {path}: not a tar archive",
                hint=f"pass a {FLASH_ATTN.package} sdist (.tar.gz) as PyPI serves it",
            )
        return cls(url=path.resolve().as_uri(), sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def with_source(recipe_text: str, source: SourceOverride) -> str:
    match = UPSTREAM_SOURCE.search(recipe_text)
    if not match:
        raise FaforgeError(
            "the recipe has no `- url:` source followed by its sha256 (or `- git:` followed by its rev), "
            "so --source has nothing to replace"
        )
    indent = match.group("indent")
    return (
        recipe_text[: match.start()]
        + f'{indent}- url: {source.url}\n{indent}  sha256: "{source.sha256}"'
        + recipe_text[match.end() :]
    )


@contextmanager
def recipe_file(recipe_path: Path, source: SourceOverride | None) -> Iterator[Path]:
    """The recipe to render: the file itself, or, with a source override, recipe.yaml in a sibling
    folder holding symlinks to everything else of the recipe's (rattler-build copies the recipe
    folder into the package and wants its file named recipe.yaml; the same depth keeps the
    recipe's relative `path:` sources pointing where they did). Removed afterwards."""
    if source is None:
        yield recipe_path
        return
    folder = recipe_path.parent.with_name(f".{recipe_path.parent.name}-source-{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        for item in recipe_path.parent.iterdir():
            if item != recipe_path:
                (folder / item.name).symlink_to(item.resolve())
        (folder / "recipe.yaml").write_text(with_source(recipe_path.read_text(), source))
        yield folder / "recipe.yaml"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def render_platform(recipe_path: Path, variant_file: Path, platform: str, cell_keys: set[tuple] | None = None) -> list:
    """rattler-build's render of the variant file for `platform`: of every combination, or with
    `cell_keys` of only those cells' combinations (see cell_key)."""
    return [
        rendered
        for _, rendered in render_combinations(
            recipe_path, variant_file, platform, lambda c: cell_keys is None or cell_key(c) in cell_keys
        )
    ]


def render_combinations(
    recipe_path: Path, variant_file: Path, platform: str, keep: Callable[[dict], bool] = lambda _: True
) -> list[tuple[dict, RenderedVariant]]:
    """(combination, rendered output) for each output rattler-build renders from each combination of the
    variant file for `platform` that `keep` accepts.

    Each combination is rendered alone, as a variant config of that one combination: rattler-build's
    time for one config grows with the square of its combinations (72: 4 s, against 1.2 s one by one),
    and a combination's render is the same either way (tests/matrix/test_render_slices.py)."""
    from rattler_build import (  # noqa: PLC0415 (py-rattler-build: slow to import)
        JinjaConfig,
        PlatformConfig,
        RenderConfig,
        Stage0Recipe,
        VariantConfig,
    )

    try:
        variants = VariantConfig.from_file_with_context(
            variant_file, JinjaConfig(platform=PlatformConfig(target_platform=platform))
        )
        recipe = Stage0Recipe.from_file(recipe_path)
        config = RenderConfig(platform=PlatformConfig(target_platform=platform))
        return [
            (combination, rendered)
            for combination in variants.combinations()
            if keep(combination)
            for rendered in recipe.render(VariantConfig({key: [value] for key, value in combination.items()}), config)
        ]
    except Exception as exc:  # py-rattler-build raises its own exception types per failure
        raise FaforgeError(
            f"rendering {recipe_path} with {variant_file} for {platform} failed: {exc}",
            hint="run `faforge generate` if variants/ is stale; otherwise the recipe's Jinja is broken",
        ) from None


def _requirements(variant: RenderedVariant, entries: list) -> tuple[str, ...]:
    """Match specs as the built package's metadata will have them: a `pin_subpackage` (the flash-attn
    output's pin of its kernel build) becomes `NAME ==VERSION BUILD`, resolved by rattler-build's own
    render of that output for the same variant."""
    out = []
    for entry in entries:
        if isinstance(entry, dict) and "pin_subpackage" in entry:
            name = entry["pin_subpackage"]["name"]
            pin = variant.pin_subpackages[name]
            if not pin.exact:
                raise FaforgeError(
                    f"the recipe pins its output {name} without exact=True",
                    hint=f"pin_subpackage(..., exact=True): a {FLASH_ATTN.package} "
                    "build must require exactly its kernel build",
                )
            out.append(f"{name} =={pin.version} {pin.build_string}")
        else:
            out.append(str(entry))
    return tuple(out)


def rendered_cell(cell: Cell, variant: RenderedVariant, recipe: dict) -> RenderedCell:
    """`cell` as one variant rendered it, its requirements as the built package's metadata will have them."""
    requirements, info = recipe.get("requirements", {}), variant.hash_info
    run, host = (
        _requirements(variant, requirements.get("run", [])),
        _requirements(variant, requirements.get("host", [])),
    )
    if requirements:
        recipe = {**recipe, "requirements": {**requirements, "run": list(run), "host": list(host)}}
    return RenderedCell(
        cell=cell,
        build_string=recipe["build"]["string"],
        hash=str(info.hash) if info is not None else str(info),
        run_requirements=run,
        run_constraints=tuple(str(r) for r in requirements.get("run_constraints", [])),
        host_requirements=host,
        build_requirements=tuple(str(r) for r in requirements.get("build", [])),
        recipe=recipe,
        variant=variant,
    )


def render_cells(cells: list[Cell], recipe_path: Path, variants_dir: Path) -> list[RenderedCell]:
    """Each cell's flash-attn rendered from its platform's and world's variant file, as a plain build
    would. A recipe's other outputs (the kernel package) are left out: see render_kernel_output."""
    out = []
    for platform, world in sorted({(c.platform, c.world) for c in cells}):
        wanted = {cell_key(c.variant()): c for c in cells if c.platform == platform and c.world == world}
        rendered = render_platform(
            recipe_path, variant_config_path(variants_dir, platform, world), platform, set(wanted)
        )
        by_key = {}
        for variant in rendered:
            stage1 = variant.recipe
            recipe = stage1.to_dict()
            if recipe["package"]["name"] == FLASH_ATTN_PACKAGE:
                by_key[cell_key(stage1.used_variant)] = (variant, recipe)
        for key, cell in wanted.items():
            if key not in by_key:
                raise FaforgeError(
                    f"cell {cell.id} is in the matrix but the recipe did not render it for {platform}",
                    hint="run `faforge generate` to refresh variants/, then check the recipe's skip rules",
                )
            out.append(rendered_cell(cell, *by_key[key]))
    return sorted(out, key=lambda rc: rc.cell.sort_key)


def recipe_output_names(recipe_path: Path) -> list[str]:
    """The package names under the recipe's `outputs:` (none for a single-output recipe), read without rendering."""
    data = yaml.safe_load(recipe_path.read_text()) or {}
    return [str((o.get("package") or {}).get("name")) for o in data.get("outputs") or [] if isinstance(o, dict)]


def render_kernel_output(cell: Cell, recipe_path: Path, variants_dir: Path) -> RenderedCell:
    """The recipe's libflash-attn-kernels output for the cell's kernel key (platform, CUDA, archs, Philox
    width), as the cell's variant file renders it: what a kernel job of `faforge plan` builds."""
    variant_file = variant_config_path(variants_dir, cell.platform, cell.world)
    for variant in render_platform(recipe_path, variant_file, cell.platform, {cell_key(cell.variant())}):
        stage1 = variant.recipe
        recipe = stage1.to_dict()
        used = stage1.used_variant
        if (
            recipe["package"]["name"] == KERNEL_PACKAGE
            and str(used.get("cuda_compiler_version")) == cell.cuda
            and str(used.get("cuda_archs")) == cell.cuda_archs
            and str(used.get("philox_offset_bits")) == str(cell.philox_offset_bits)
        ):
            return rendered_cell(cell, variant, recipe)
    raise FaforgeError(
        f"the recipe renders no {KERNEL_PACKAGE} output for {kernel_key(cell).id} (cell {cell.id})",
        hint=f"{recipe_path} needs a {KERNEL_PACKAGE} output that uses cuda_compiler_version, cuda_archs and "
        "philox_offset_bits; without one, build the cell whole (--part all)",
    )

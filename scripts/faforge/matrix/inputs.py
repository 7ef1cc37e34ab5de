"""Package identity per output: a digest of what enters each conda output besides its
variant, written into the variant files as a value that output reads, so rattler-build's hash, and with it
the build string, file name, CI cache key and `faforge build`'s "already built" check, follow the inputs.

rattler-build's hash covers only the variant values an output uses: an edited shim, build script or
recipe test left every hash as it was. So `faforge generate` writes two one-value keys
into every variant file: `kernel_inputs` (read by the kernel output, and by the flash-attn output, which
links that kernel build) and `glue_inputs` (read by the flash-attn output only). One value per key adds
no variant combination. The files behind each come from the family row (faforge.family); the recipe adds
its own part: the kernel digest covers the recipe outside `outputs:` (the sdist, version, top-level
sources) and the kernel output, the glue digest the flash-attn output. The recipe is read as YAML, and
every input file enters in its canonical form (faforge.matrix.canonical), so a comment, docstring or
formatting edit changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.matrix.canonical import FORM_VERSION, canonical_bytes

KERNEL_INPUTS = "kernel_inputs"
GLUE_INPUTS = "glue_inputs"
FA3_INPUTS = "fa3_inputs"  # flash-attn-3's one output: its whole recipe and FLASH_ATTN_3.inputs
DIGEST_CHARS = 16
SKIPPED_PARTS = ("__pycache__",)


def _files(root: Path, entry: str) -> list[Path]:
    path = root / entry
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(
            p for p in path.rglob("*") if p.is_file() and not set(p.relative_to(root).parts) & set(SKIPPED_PARTS)
        )
    raise FaforgeError(
        f"faforge.family names {entry} as a package input, but {path} does not exist",
        hint="fix the family row's kernel_inputs/glue_inputs, or restore the file",
    )


def input_files(root: Path, entries: tuple[str, ...]) -> list[Path]:
    """Every file the entries (files or folders, relative to `root`) name, each once, sorted."""
    return sorted({f for entry in entries for f in _files(root, entry)})


def recipe_parts(recipe_path: Path) -> dict[str, object]:
    """The recipe's part of each digest: {KERNEL_INPUTS: top
    level and kernel output, GLUE_INPUTS: flash-attn output}."""
    try:
        recipe = yaml.safe_load(recipe_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise FaforgeError(f"cannot read the recipe {recipe_path}: {exc}", hint="fix the recipe's YAML") from None
    outputs = {str((o.get("package") or {}).get("name")): o for o in recipe.get("outputs") or [] if isinstance(o, dict)}
    for name in (FLASH_ATTN.kernel_package, FLASH_ATTN.package):
        if name not in outputs:
            raise FaforgeError(
                f"the recipe {recipe_path} has no {name} output", hint="the identity digests need both outputs"
            )
    top = {key: value for key, value in recipe.items() if key != "outputs"}
    return {KERNEL_INPUTS: [top, outputs[FLASH_ATTN.kernel_package]], GLUE_INPUTS: outputs[FLASH_ATTN.package]}


def _digest(root: Path, entries: tuple[str, ...], recipe_part: object) -> str:
    h = hashlib.sha256(json.dumps([FORM_VERSION, recipe_part], sort_keys=True, default=str).encode())
    for path in input_files(root, entries):
        data = canonical_bytes(path, path.read_bytes())
        h.update(f"\0{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:DIGEST_CHARS]


def fa3_input_digests(root: Path) -> dict[str, str]:
    """{FA3_INPUTS: digest} of the flash-attn-3 recipe (read as YAML) and the files it ships."""
    recipe_path = root / FLASH_ATTN_3.recipe_dir / "recipe.yaml"
    try:
        recipe = yaml.safe_load(recipe_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise FaforgeError(f"cannot read the recipe {recipe_path}: {exc}", hint="fix the recipe's YAML") from None
    return {FA3_INPUTS: _digest(root, FLASH_ATTN_3.inputs, recipe)}


def input_digests(root: Path) -> dict[str, str]:
    """{variant key: digest} for the repository at `root`, as the variant files carry them."""
    parts = recipe_parts(root / FLASH_ATTN.recipe_dir / "recipe.yaml")
    return {
        KERNEL_INPUTS: _digest(root, FLASH_ATTN.kernel_inputs, parts[KERNEL_INPUTS]),
        GLUE_INPUTS: _digest(root, FLASH_ATTN.glue_inputs, parts[GLUE_INPUTS]),
    }


GLUE_WHEEL_HASH_CHARS = 7  # as rattler-build's variant hash in a build string


def glue_wheel_hash(
    variant: dict[str, str],
    digests: dict[str, str],
    kernel_build: str,
    *,
    platform: str,
    version: str,
    build_number: int,
) -> str:
    """The identity hash of a pip cell's glue wheel, the part after `h` in its build string and
    wheel build tag. A conda flash-attn's hash is rattler-build's over the variant values it uses, but the
    recipe skips flash-attn for a pip world (its glue is a wheel, not a conda package) and rattler-build
    renders no skipped output, so no render gives a pip cell one. This digests what that hash covers and
    more: the cell's whole variant (python, torch, CUDA, ABI, archs, Philox width, compilers, sysroot), its
    target platform, the glue and kernel input digests of its variant file, the exact kernel build it
    links, and the flash-attn version and build number. Same inputs, same hash; any change, a new one."""
    material = {
        "variant": variant,
        "target_platform": platform,
        GLUE_INPUTS: digests.get(GLUE_INPUTS),
        KERNEL_INPUTS: digests.get(KERNEL_INPUTS),
        "kernel_build": kernel_build,
        "version": version,
        "build_number": build_number,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:GLUE_WHEEL_HASH_CHARS]

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

Each file enters under its logical name (the family row's, plus its place inside a named folder), never its
path, and the recipe's `path:` sources under the same names: a move alone changes no digest. A compiled
output's digest is made of two: its objects digest (what can change its object files: the compile inputs,
the recipe's build script and build/host requirements) and what is packed around them (the checker, the
recipe's tests, run requirements and metadata). `objects_digests` gives the first, the key of the compiler
cache a later build repacks from (faforge.release.plan.reuse).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import yaml

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN, AnyFamily, Identity, Inputs, families
from faforge.matrix.canonical import FORM_VERSION, canonical_bytes

KERNEL_INPUTS, GLUE_INPUTS = (identity.key for identity in FLASH_ATTN.identities)
DIGEST_CHARS = 16
SKIPPED_PARTS = ("__pycache__",)
# What a recipe or output says around its binary, not how it compiles it.
PACK_KEYS = frozenset({"tests", "about", "extra"})
PACK_REQUIREMENTS = frozenset({"run", "run_exports", "run_constraints", "ignore_run_exports"})


def _files(root: Path, name: str, entry: str) -> dict[str, Path]:
    path = root / entry
    if path.is_file():
        return {name: path}
    if path.is_dir():
        return {
            f"{name}/{p.relative_to(path).as_posix()}": p
            for p in sorted(path.rglob("*"))
            if p.is_file() and not set(p.relative_to(root).parts) & set(SKIPPED_PARTS)
        }
    raise FaforgeError(
        f"faforge.family names {entry} as the package input {name!r}, but {path} does not exist",
        hint="fix the family row's inputs, or restore the file",
    )


def named_files(root: Path, entries: Inputs) -> dict[str, Path]:
    """{logical name: file} of every file the entries (name, file or folder relative to `root`) name."""
    out: dict[str, Path] = {}
    for name, entry in entries:
        for logical, path in _files(root, name, entry).items():
            if out.setdefault(logical, path) != path:
                raise FaforgeError(
                    f"faforge.family names two inputs {logical!r}: {out[logical]} and {path}",
                    hint="give each input its own logical name",
                )
    return out


def input_files(root: Path, entries: Inputs) -> list[Path]:
    """Every file the entries (of one family or several) name, each once, sorted."""
    return sorted({path for name, entry in entries for path in _files(root, name, entry).values()})


def _read_recipe(recipe_path: Path) -> dict:
    try:
        recipe = yaml.safe_load(recipe_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise FaforgeError(f"cannot read the recipe {recipe_path}: {exc}", hint="fix the recipe's YAML") from None
    return recipe if isinstance(recipe, dict) else {}


def _split(node: Mapping) -> tuple[dict, dict]:
    """(compile part, pack part) of a recipe or one of its outputs; its sources are split by _sources."""
    compiled: dict = {}
    packed: dict = {}
    for key, value in node.items():
        if key in PACK_KEYS:
            packed[key] = value
        elif key == "requirements" and isinstance(value, dict):
            compiled[key] = {k: v for k, v in value.items() if k not in PACK_REQUIREMENTS}
            packed[key] = {k: v for k, v in value.items() if k in PACK_REQUIREMENTS}
        elif key != "source":
            compiled[key] = value
    return compiled, packed


def _sources(recipe_path: Path, root: Path, recipe: Mapping, compile: Inputs, pack: Inputs) -> tuple[list, list]:
    """The recipe's sources as (compile, pack) lists, each `path:` one that is an input under its logical name."""
    names = {(root / entry).resolve(): (name, False) for name, entry in compile}
    names |= {(root / entry).resolve(): (name, True) for name, entry in pack}
    compiled: list = []
    packed: list = []
    for source in recipe.get("source") or []:
        path = source.get("path") if isinstance(source, dict) else None
        named = None if path is None else names.get((recipe_path.parent / str(path)).resolve())
        if named is None:
            compiled.append(source)
            continue
        (packed if named[1] else compiled).append({**source, "path": f"<{named[0]}>"})
    return compiled, packed


def _output(recipe_path: Path, recipe: Mapping, name: str) -> dict:
    for output in recipe.get("outputs") or []:
        if isinstance(output, dict) and str((output.get("package") or {}).get("name")) == name:
            return output
    raise FaforgeError(f"the recipe {recipe_path} has no {name} output", hint="each identity digest needs its output")


def _digest(root: Path, entries: Inputs, recipe_part: object) -> str:
    h = hashlib.sha256(json.dumps([FORM_VERSION, recipe_part], sort_keys=True, default=str).encode())
    for name, path in sorted(named_files(root, entries).items()):
        data = canonical_bytes(path, path.read_bytes())
        h.update(f"\0{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:DIGEST_CHARS]


def _parts(root: Path, family: AnyFamily, identity: Identity) -> tuple[str, str]:
    """(objects digest, packing digest) of one identity: its inputs, with its part of the recipe."""
    recipe_path = root / family.recipe_dir / "recipe.yaml"
    recipe = _read_recipe(recipe_path)
    top = {k: v for k, v in recipe.items() if k != "outputs"}
    compiled, packed = _split(top if identity.output is None else _output(recipe_path, recipe, identity.output))
    compiled_parts: list = [compiled]
    packed_parts: list = [packed]
    if identity.with_top:
        if identity.output is not None:
            top_compiled, top_packed = _split(top)
            compiled_parts.append(top_compiled)
            packed_parts.append(top_packed)
        compiles = tuple(entry for i in family.identities for entry in i.compile_inputs)
        packs = tuple(entry for i in family.identities for entry in i.pack_inputs)
        sources = _sources(recipe_path, root, recipe, compiles, packs)
        compiled_parts.append(sources[0])
        packed_parts.append(sources[1])
    return (
        _digest(root, identity.compile_inputs, compiled_parts),
        _digest(root, identity.pack_inputs, packed_parts),
    )


def family_input_digests(root: Path, family: AnyFamily) -> dict[str, str]:
    """{variant key: digest} of a family's packages for the repository at `root`, as its variant files carry them:
    each of both parts, its objects and what is packed around them."""
    return {
        identity.key: hashlib.sha256("\0".join(_parts(root, family, identity)).encode()).hexdigest()[:DIGEST_CHARS]
        for identity in family.identities
    }


def objects_digests(root: Path) -> dict[str, str]:
    """{variant key: objects digest} of every family's identities: what its object files follow. A change that
    leaves it, and moves only its variant key's digest, is a repack: the objects cached under it serve."""
    return {identity.key: _parts(root, family, identity)[0] for family in families() for identity in family.identities}


# faforge.matrix.variants writes each family's digests into its own variant files.
def input_digests(root: Path) -> dict[str, str]:
    return family_input_digests(root, FLASH_ATTN)


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

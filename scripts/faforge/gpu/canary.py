"""The GPU canary: one real flash-attn build committed in tests/gpu/canary/, with a manifest of how it was made.

A GPU machine comes now and then, for minutes, with a fresh checkout; a 4-hour build does not fit, so the
binary under test travels with the repository (the one committed binary, docs/contributing/style.md). The manifest
(tests/gpu/canary/manifest.json) records the file's sha256 and size, the exact build command, and the build's
inputs: the sdist's sha256, the git blob hashes of the files that enter the kernels (the build script),
torch and nvcc versions, the archs and head dims the build declares, and the date. `status()` compares
those blob hashes with the checkout's, so a changed build script is reported ("rebuild the canary"),
not failed: the canary stays valid evidence for the inputs it names.
"""

from __future__ import annotations

import hashlib
from datetime import date
from pathlib import Path

from faforge import untrusted
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.packagefile import sha256_of

MANIFEST = "manifest.json"
SCHEMA_VERSION = 1
# Files of this repository that enter the kernels' compilation: the build script (flags, defines, the TU
# list) and the torch shim the kernel library is compiled and linked against (its README is
# documentation). recipe.yaml only calls the script; the sdist itself is pinned by its sha256.
KERNEL_INPUTS = (
    f"{FLASH_ATTN.recipe_dir}/{FLASH_ATTN.build_script}",
    *(
        f"scripts/faforge/kernels/torch_shim/{name}"
        for name in (
            "ATen/cuda/CUDAGeneratorImpl.h",
            "ATen/cuda/detail/UnpackRaw.cuh",
            f"api/{FLASH_ATTN.kernel_api_prefix}api.h",
            "c10/cuda/CUDAException.h",
            "exports.map",
            "kernel_errors.cpp",
            "torch_cuda_check.cpp",
        )
    ),
)


def canary_dir(repo: Path) -> Path:
    return repo / "tests" / "gpu" / "canary"


def git_blob_hash(path: Path) -> str:
    """`git hash-object PATH`: sha1 of 'blob <size>\\0' + content, without needing git or a commit."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_manifest(
    repo: Path,
    canary: Path,
    *,
    build_command: str,
    sdist_sha256: str,
    torch: str,
    nvcc: str,
    archs: str,
    head_dims: list[int],
    built_on: str | None = None,
) -> dict:
    """The manifest for `canary` (a .whl.xz in canary_dir), its inputs read from the checkout as it is now."""
    return {
        "version": SCHEMA_VERSION,
        "file": canary.name,
        "sha256": sha256_of(canary),
        "size": canary.stat().st_size,
        "build_command": build_command,
        "inputs": {
            "sdist_sha256": sdist_sha256,
            "git_blobs": {name: git_blob_hash(repo / name) for name in KERNEL_INPUTS},
            "torch": torch,
            "nvcc": nvcc,
        },
        "declares": {"archs": archs, "head_dims": head_dims},
        "date": built_on or date.today().isoformat(),
    }


def load_manifest(folder: Path) -> dict | None:
    """The manifest in `folder`, or None while no canary is committed."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    manifest = untrusted.load_json(path, "data", hint="rewrite it with python -m faforge.gpu.canary")
    version = manifest.get("version") if isinstance(manifest, dict) else None
    if version != SCHEMA_VERSION:
        raise FaforgeError(f"{path}: version {version!r}, expected {SCHEMA_VERSION}")
    return manifest


def mismatches(folder: Path, manifest: dict) -> list[str]:
    """How the committed file differs from its manifest (empty: it is the file the manifest describes)."""
    path = folder / manifest["file"]
    if not path.is_file():
        return [f"{path}: missing"]
    found = {"size": path.stat().st_size, "sha256": sha256_of(path)}
    return [
        f"{path.name}: {key} {found[key]}, manifest says {manifest[key]}"
        for key in ("size", "sha256")
        if found[key] != manifest[key]
    ]


def stale_inputs(repo: Path, manifest: dict) -> list[str]:
    """Kernel inputs whose blob hash changed since the canary was built (a report: rebuild when convenient)."""
    recorded = manifest["inputs"]["git_blobs"]
    changed = [name for name in KERNEL_INPUTS if name not in recorded]
    changed += [
        name for name, blob in recorded.items() if not (repo / name).is_file() or git_blob_hash(repo / name) != blob
    ]
    return sorted(set(changed))


def status_lines(repo: Path) -> list[str]:
    """What `faforge test-gpu --canary-status` prints."""
    folder = canary_dir(repo)
    manifest = load_manifest(folder)
    if manifest is None:
        return [f"canary: none committed in {folder} (see tests/gpu/README.md, 'The canary')"]
    lines = [
        f"canary: {manifest['file']} ({manifest['size']} bytes, built "
        f"{manifest['date']}, torch {manifest['inputs']['torch']})"
    ]
    lines += [f"canary: DOES NOT MATCH its manifest: {problem}" for problem in mismatches(folder, manifest)]
    stale = stale_inputs(repo, manifest)
    if stale:
        lines.append(
            "canary: kernel inputs changed since it was built: "
            f"{', '.join(stale)}; rebuild it with: {manifest['build_command']}"
        )
    else:
        lines.append("canary: kernel inputs unchanged since it was built")
    return lines

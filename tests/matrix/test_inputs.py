"""Package identity per output, on real rattler-build renders of a scratch checkout:
an edit to a kernel input gives every kernel package and every cell a new build string, an edit to a
glue-only input every cell and no kernel package, an edit elsewhere (doctor/) none; a move alone none, and an
edit of what is packed around the kernel objects (the checker) keeps their objects digest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from faforge.families.flash_attn_3 import matrix as fa3_matrix
from faforge.family import FLASH_ATTN, FLASH_ATTN_3, FLASH_ATTN_4
from faforge.matrix import inputs, load_matrix
from faforge.matrix.inputs import (
    GLUE_INPUTS,
    KERNEL_INPUTS,
    family_input_digests,
    input_digests,
    input_files,
    objects_digests,
)
from faforge.matrix.render import build_string_head, render_platform
from faforge.matrix.variants import generated_files, variant_config_path

REPO = Path(__file__).resolve().parents[2]


def copy_checkout(root: Path) -> Path:
    """A scratch checkout at `root`: what a render and a plan read."""
    for name in ("variants", "recipes", "scripts"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture
def checkout(tmp_path):
    return copy_checkout(tmp_path)


def identities(root: Path) -> dict[str, dict[str, str]]:
    """Regenerate the checkout's variant files as `faforge generate` does, then render every variant file
    for real: {"cells": {cell id: build string}, "kernels": {build string without hash: build string}}."""
    matrix = load_matrix(root)
    for path, text in generated_files(matrix.cells, matrix.variants_dir).items():
        path.write_text(text)
    cells_by_key = {(c.platform, c.python, c.torch, c.cuda, str(c.cxx11_abi)): c.id for c in matrix.cells}
    out: dict[str, dict[str, str]] = {"cells": {}, "kernels": {}}
    for platform, world in sorted({(c.platform, c.world) for c in matrix.cells}):
        for variant in render_platform(
            matrix.recipe_path, variant_config_path(matrix.variants_dir, platform, world), platform
        ):
            recipe, used = variant.recipe.to_dict(), variant.recipe.used_variant
            build = recipe["build"]["string"]
            if recipe["package"]["name"] == FLASH_ATTN.kernel_package:
                out["kernels"][f"{platform}/{build_string_head(build)}"] = build
            else:
                key = (
                    platform,
                    str(used["python"]).split(".*")[0],
                    str(used["torch_version"]),
                    str(used["cuda_compiler_version"]),
                    str(used["cxx11_abi"]),
                )
                out["cells"][cells_by_key[key]] = build
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    assert before.keys() == after.keys()
    return {name for name in before if before[name] != after[name]}


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


@pytest.mark.slow  # renders the scratch checkout's matrix with rattler-build once per edit (3 to 4 s of CPU)
def test_each_output_is_stale_exactly_when_its_inputs_change(checkout):
    base = identities(checkout)
    assert len(base["kernels"]) == len(load_matrix(checkout).kernels), "one value per digest key adds no kernel build"
    assert len(base["cells"]) == len(load_matrix(checkout).cells)

    append(checkout / "scripts/faforge/doctor/report.py", "\n# a doctor edit\n")
    doctor = identities(checkout)
    assert not changed(base["kernels"], doctor["kernels"]) and not changed(base["cells"], doctor["cells"])

    append(checkout / "scripts/faforge/backend/glue.py", "\n_A_GLUE_EDIT = 1\n")
    glue = identities(checkout)
    assert not changed(doctor["kernels"], glue["kernels"]), "a glue edit must not rebuild a kernel package"
    assert changed(doctor["cells"], glue["cells"]) == set(glue["cells"])

    append(checkout / "scripts/faforge/kernels/torch_shim/kernel_errors.cpp", "\n// a shim edit\n")
    kernel = identities(checkout)
    assert changed(glue["kernels"], kernel["kernels"]) == set(kernel["kernels"])
    assert changed(glue["cells"], kernel["cells"]) == set(kernel["cells"])


def held_channel(
    root: Path, channel: Path, held: dict[str, dict[str, str]], more: Sequence[tuple[str, str, str, str]] = ()
) -> Path:
    """A channel's repodata holding exactly the packages of `held` (an identities() result) and `more`
    (subdir, name, version, build)."""
    matrix = load_matrix(root)
    version = matrix.policy.flash_attn_version
    platform_of = {c.id: c.platform for c in matrix.cells}
    entries = [(platform_of[cell], FLASH_ATTN.package, version, build) for cell, build in held["cells"].items()]
    entries += [
        (key.split("/")[0], FLASH_ATTN.kernel_package, version, build) for key, build in held["kernels"].items()
    ]
    entries += more
    for subdir in ("linux-64", "linux-aarch64", "noarch"):
        packages = {
            f"{name}-{package_version}-{build}.conda": {
                "name": name,
                "version": package_version,
                "build": build,
                "build_number": int(build.rsplit("_", 1)[1]),
                "subdir": subdir,
                "depends": [],
                "md5": "0" * 32,
                "sha256": "0" * 64,
                "size": 1,
            }
            for sub, name, package_version, build in entries
            if sub == subdir
        }
        (channel / subdir).mkdir(parents=True)
        (channel / subdir / "repodata.json").write_text(
            json.dumps({"info": {"subdir": subdir}, "packages": {}, "packages.conda": packages})
        )
    return channel


def plan(root: Path, channel: Path, cache: Path, *args: str) -> dict:
    env = dict(os.environ, FAFORGE_ROOT=str(root), FAFORGE_CACHE_DIR=str(cache))
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "plan", "--channel", str(channel), "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow  # renders the scratch checkout's matrix with rattler-build once per edit (3 to 4 s of CPU)
def test_plan_rebuilds_what_a_glue_edit_made_stale_and_nothing_after_a_doctor_edit(checkout, tmp_path):
    channel = held_channel(checkout, tmp_path / "channel", identities(checkout))
    append(checkout / "scripts/faforge/doctor/report.py", "\n# a doctor edit\n")
    identities(checkout)
    data = plan(checkout, channel, tmp_path / "cache")
    assert data["to_build"] == [] and data["stale"] == [] and len(data["in_channel"]) == data["cells"]

    append(checkout / "scripts/faforge/backend/glue.py", "\n_A_GLUE_EDIT = 1\n")
    identities(checkout)
    data = plan(checkout, channel, tmp_path / "cache")
    assert len(data["to_build"]) == data["cells"] and data["in_channel"] == []
    # The conda cells' kernel packages are all held; the kernel jobs left are those only pip cells need (the pip world).
    conda = [k for k in data["kernel_packages"] if any(not c.startswith("pypi/") for c in k["cells"])]
    assert conda and all(k["in_channel"] for k in conda)
    assert {
        j["cell"].split("/")[0] for stage in ("kernels", "kernel_links") for c in data[stage] for j in c["include"]
    } <= {"pypi"}
    assert len(data["stale"]) == data["cells"] and all(f"/{FLASH_ATTN.package}-" in name for name in data["stale"])


def test_the_recipe_counts_per_output_and_its_comments_not_at_all(checkout):
    recipe = checkout / FLASH_ATTN.recipe_dir / "recipe.yaml"
    base = input_digests(checkout)
    append(recipe, "\n# a comment\n")
    assert input_digests(checkout) == base
    text = recipe.read_text()
    recipe.write_text(text.replace("python -m faforge.gpu.run_suite", "python -X utf8 -m faforge.gpu.run_suite"))
    glue_test = input_digests(checkout)
    assert glue_test[KERNEL_INPUTS] == base[KERNEL_INPUTS] and glue_test[GLUE_INPUTS] != base[GLUE_INPUTS]
    recipe.write_text(
        text.replace("python -m faforge.kernels.torchfree", "python -X utf8 -m faforge.kernels.torchfree")
    )
    kernel_test = input_digests(checkout)
    assert kernel_test[KERNEL_INPUTS] != base[KERNEL_INPUTS] and kernel_test[GLUE_INPUTS] == base[GLUE_INPUTS]


def shipped_files(recipe_path: Path) -> set[Path]:
    """Every file the recipe's `path:` sources copy into the build."""
    out = set()
    for source in yaml.safe_load(recipe_path.read_text())["source"]:
        if "path" in source:
            path = (recipe_path.parent / source["path"]).resolve()
            out |= (
                {p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
                if path.is_dir()
                else {path}
            )
    return out


def test_every_file_the_recipe_ships_is_an_input_of_an_output(repo):
    covered = {p.resolve() for p in input_files(repo, FLASH_ATTN.kernel_inputs + FLASH_ATTN.glue_inputs)}
    missing = sorted(
        str(p.relative_to(repo)) for p in shipped_files(repo / FLASH_ATTN.recipe_dir / "recipe.yaml") - covered
    )
    assert not missing, f"add these to faforge.family's kernel_inputs or glue_inputs: {missing}"
    assert not any("doctor" in p.parts for p in covered)


def test_the_committed_variant_files_carry_todays_digests(repo):
    digests = input_digests(repo)
    for path in sorted((repo / "variants").glob("linux-*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert {key: data[key] for key in digests} == {key: [value] for key, value in digests.items()}, (
            f"run `faforge generate` ({path.name})"
        )


def fa3_identities(root: Path) -> dict[str, str]:
    """Regenerate the checkout's variant files (FA3's too) and render FA3's: {package id: build string}."""
    matrix = load_matrix(root)
    rows = fa3_matrix.rows(matrix.table, matrix.policy, matrix.variants_dir)
    for path, text in generated_files(matrix.cells, matrix.variants_dir, [rows]).items():
        path.write_text(text)
    return {r.package.id: r.build_string for r in rows.render()}


def test_an_fa3_package_is_stale_when_its_build_inputs_change(checkout):
    """FA3's build strings covered none of its build code: a fix to build_flash_attn_3.py, the backend or the
    ABI checker its recipe test runs (FA3's aarch64 libcudart fix) left every FA3 package
    'already built'. Now each edit of a file the recipe ships renames all four; a doctor edit none."""
    base = fa3_identities(checkout)
    append(checkout / "scripts/faforge/doctor/__init__.py", "\n# a doctor edit\n")
    assert fa3_identities(checkout) == base
    for edited in (
        "recipes/flash-attn-3/build_flash_attn_3.py",
        "scripts/faforge/backend/toolchain.py",
        "scripts/faforge/abi/stable.py",
    ):
        before = fa3_identities(checkout)
        append(checkout / edited, "\n# a comment\n")
        assert fa3_identities(checkout) == before, f"{edited}: a comment changes no behaviour"
        append(checkout / edited, "\n_AN_EDIT = 1\n")
        assert changed(before, fa3_identities(checkout)) == set(before), edited


def test_every_file_the_fa3_recipe_ships_is_its_input(repo):
    covered = {p.resolve() for p in input_files(repo, FLASH_ATTN_3.inputs)}
    missing = sorted(
        str(p.relative_to(repo)) for p in shipped_files(repo / FLASH_ATTN_3.recipe_dir / "recipe.yaml") - covered
    )
    assert not missing, f"add these to faforge.family's FLASH_ATTN_3.inputs: {missing}"


def test_a_move_alone_changes_no_digest(checkout, monkeypatch):
    """Each file is digested under its logical name: moving the torch-free check and the checker (and pointing
    the family row and the recipe at the new places) leaves every digest as it was."""
    before = {**input_digests(checkout), **family_input_digests(checkout, FLASH_ATTN_3), **objects_digests(checkout)}
    moves = {"scripts/faforge/kernels/torchfree.py": "scripts/faforge/moved/torchfree.py"}
    moves["scripts/faforge/abi"] = "scripts/faforge/moved/abi"
    (checkout / "scripts/faforge/moved").mkdir()
    for old, new in moves.items():
        (checkout / old).rename(checkout / new)
    for family in (FLASH_ATTN, FLASH_ATTN_3):
        recipe = checkout / family.recipe_dir / "recipe.yaml"
        text = recipe.read_text()
        for old, new in moves.items():
            text = text.replace(f"../../{old}", f"../../{new}")
        recipe.write_text(text)

    def new_path(path):
        folder = next((old for old in moves if path.startswith(f"{old}/")), None)
        return moves.get(path) or (moves[folder] + path[len(folder) :] if folder else path)

    def moved(entries):
        return tuple((name, new_path(path)) for name, path in entries)

    rows = (
        replace(
            FLASH_ATTN,
            kernel_pack_inputs=moved(FLASH_ATTN.kernel_pack_inputs),
            kernel_compile_inputs=moved(FLASH_ATTN.kernel_compile_inputs),
        ),
        replace(
            FLASH_ATTN_3, pack_inputs=moved(FLASH_ATTN_3.pack_inputs), compile_inputs=moved(FLASH_ATTN_3.compile_inputs)
        ),
        FLASH_ATTN_4,  # names neither moved file
    )
    monkeypatch.setattr(inputs, "FLASH_ATTN", rows[0])
    monkeypatch.setattr(inputs, "families", lambda: rows)
    assert {
        **input_digests(checkout),
        **family_input_digests(checkout, rows[1]),
        **objects_digests(checkout),
    } == before


def test_a_checker_edit_repacks_the_same_objects_and_a_shim_edit_compiles_new_ones(checkout):
    """What is packed around the binary (the checker, abi/) moves each package's digest, so its build string,
    but not its objects digest, the key of the compiled objects a repack reuses (faforge.release.plan.reuse);
    the shim and the build script move both."""
    base = {**input_digests(checkout), **family_input_digests(checkout, FLASH_ATTN_3)}
    objects = objects_digests(checkout)
    append(checkout / "scripts/faforge/abi/check.py", "\n_A_CHECKER_EDIT = 1\n")
    checker = {**input_digests(checkout), **family_input_digests(checkout, FLASH_ATTN_3)}
    assert (
        checker[KERNEL_INPUTS] != base[KERNEL_INPUTS]
        and checker[FLASH_ATTN_3.inputs_key] != base[FLASH_ATTN_3.inputs_key]
    )
    assert checker[GLUE_INPUTS] == base[GLUE_INPUTS]
    assert objects_digests(checkout) == objects
    recipe = checkout / FLASH_ATTN.recipe_dir / "recipe.yaml"
    text = recipe.read_text()
    recipe.write_text(text.replace("- pyelftools", "- pyelftools >=0.30", 1))  # the kernel package's test's
    assert objects_digests(checkout)[KERNEL_INPUTS] == objects[KERNEL_INPUTS], "a test requirement is packing"
    assert input_digests(checkout)[KERNEL_INPUTS] != checker[KERNEL_INPUTS]
    append(checkout / "scripts/faforge/kernels/torch_shim/kernel_errors.cpp", "\nint a_shim_edit;\n")
    assert objects_digests(checkout)[KERNEL_INPUTS] != objects[KERNEL_INPUTS]
    append(checkout / FLASH_ATTN_3.recipe_dir / FLASH_ATTN_3.build_script, "\n_A_BUILD_EDIT = 1\n")
    assert objects_digests(checkout)[FLASH_ATTN_3.inputs_key] != objects[FLASH_ATTN_3.inputs_key]

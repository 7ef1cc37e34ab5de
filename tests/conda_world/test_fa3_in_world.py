"""The flash-attn-3 recipe in the conda world (the second family): built by rattler-build from a tiny FA3-shaped
source (tests/support/fa3_tree.py; `faforge build --source`'s swap of the recipe's git source), its tests
run, then verify (the stable-ABI gate against the oldest and newest torch its package serves) -> publish
-> HTTP -> a fresh install -> `import flash_attn_3`.

The variant is the generated file's linux-64 cu130 package with the world's python and torch instead of
its own (3.10 and 2.13.0): the world holds CPython 3.12 and conda-forge's pytorch 2.11.0 only. So the
package claims python >=3.12 here, and everything else is the recipe's as written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from faforge import paths
from faforge.channel.local import PackageSpec, assemble, index, solve
from faforge.families.flash_attn_3 import backend as fa3
from faforge.families.flash_attn_3.matrix import fa3_variant_config_name
from faforge.family import FLASH_ATTN_3
from faforge.matrix.render import SourceOverride, recipe_file
from faforge.release.package_cache import cache_root
from tests.conda_world.archive import read_info
from tests.conda_world.cells import CU130
from tests.conda_world.conftest import faforge
from tests.conda_world.world_cache import install_from_world
from tests.support.cache import cache_dir
from tests.support.fa3_tree import fa3_shaped_tarball
from tests.support.http_server import serve_directory
from tests.support.torch_release_libs import release_torch_lib

pytestmark = pytest.mark.slow

PACKAGE_ID = "linux-64/cu130/sm80_90a"
# The world's own python and torch in place of the package's (see the module docstring).
WORLD = {"python": "3.12.* *_cpython", "torch_version": "2.11.0"}
# Forward only, head dim 128, fp16 and bf16: both GPU codes of the arch list, in a few seconds.
DISABLED = frozenset(
    {
        "BACKWARD",
        "SPLIT",
        "PAGEDKV",
        "APPENDKV",
        "LOCAL",
        "SOFTCAP",
        "PACKGQA",
        "FP8",
        "VARLEN",
        "CLUSTER",
        "HDIM64",
        "HDIM96",
        "HDIM192",
        "HDIM256",
        "HDIMDIFF64",
        "HDIMDIFF192",
    }
)

BUILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from rattler_build import ToolConfiguration
    from faforge.matrix.render import render_platform
    from faforge.release.build.steps import _LogWriter
    args = json.loads(sys.argv[1])
    (variant,) = render_platform(Path(args["recipe"]), Path(args["variants"]), "linux-64")
    with open(args["log"], "w") as log:  # rattler-build's own log, as `faforge build` keeps it
        result = variant.run_build(tool_config=ToolConfiguration(test_strategy="native"), output_dir=Path(args["out"]),
                                   channels=args["channels"], progress_callback=_LogWriter(log, lambda line: None))
    print(json.dumps([str(p) for p in result.packages]))
""")


def variant_file(folder: Path) -> Path:
    """The generated FA3 variant file's linux-64 cu130 position, with the world's python and torch."""
    generated = paths.repo_root() / "variants" / fa3_variant_config_name("linux-64", "conda-forge")
    text = generated.read_text()
    ids = [line[4:].strip() for line in text.splitlines() if line.startswith("#   linux-")]
    data = yaml.safe_load(text)
    at = ids.index(PACKAGE_ID)
    values = (
        {key: [data[key][at]] for key in data["zip_keys"][0]}
        | {key: [value] for key, value in WORLD.items()}
        | {"fa3_disable": [",".join(sorted(DISABLED))]}
    )
    constant = {key: value for key, value in data.items() if key not in values and key != "zip_keys"}
    path = folder / "variants.yaml"
    path.write_text(yaml.safe_dump({**constant, **values}))
    return path


@pytest.fixture(scope="module")
def built(world, tmp_path_factory):
    root = tmp_path_factory.mktemp("fa3-world")
    tarball = fa3_shaped_tarball(root, DISABLED, top="flash-attention-0251105a")
    out = root / "out"
    # The recipe's tests must run this build, not an extraction rattler cached from an earlier run's build of the
    # same name (its test environment took the old one); faforge build drops it the same way (release/package_cache.py).
    env = {**os.environ, "CONDA_OVERRIDE_CUDA": "13.0", **world.rattler_env()}
    for stale in (cache_root(env) / "pkgs").glob(f"{FLASH_ATTN_3.package}-*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    with recipe_file(
        paths.repo_root() / FLASH_ATTN_3.recipe_dir / "recipe.yaml", SourceOverride.from_sdist(tarball)
    ) as recipe:
        args = {
            "recipe": str(recipe),
            "variants": str(variant_file(root)),
            "out": str(out),
            "channels": [world.url("conda-forge")],
            "log": str(root / "build.log"),
        }
        result = subprocess.run(
            [sys.executable, "-W", "ignore::DeprecationWarning", "-c", BUILD, json.dumps(args)],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )
    return result, root


def test_the_recipe_builds_and_runs_its_tests(built):
    result, root = built
    assert result.returncode == 0, (root / "build.log").read_text()[-6000:] + result.stderr[-2000:]
    (package,) = map(Path, json.loads(result.stdout.strip().splitlines()[-1]))
    assert (
        package.name.startswith(f"{FLASH_ATTN_3.package}-3.0.0-cu130_sm80_90a_faforge_trimmed_h")
        and package.parent.name == "linux-64"
    )
    # the recipe's own stable-ABI gate ran in its test environment, against the torch the solver gave it
    log = (root / "build.log").read_text()
    assert (
        "serves torch 2.10, 2.11, 2.12, 2.13; checked here against torch 2.11.0" in log
        and "stable-ABI gate passed: _C.abi3.so" in log
    )


def test_verify_publish_install_import(built, world, tmp_path):
    result, _ = built
    assert result.returncode == 0
    (package,) = map(Path, json.loads(result.stdout.strip().splitlines()[-1]))
    env = {"FAFORGE_CACHE_DIR": str(cache_dir("faforge"))}
    manifest = tmp_path / "verification"
    # the oldest and newest torch the package serves (2.10, 2.13 for cu130), PyPI's real libraries
    verified = faforge(
        "verify",
        str(package),
        "--gates",
        "abi",
        "--manifest",
        str(manifest),
        "--json",
        "--against",
        str(release_torch_lib("2.10.0")),
        "--against",
        str(release_torch_lib("2.13.0")),
        env=env,
    )
    results = {r["gate"]: r for r in json.loads(verified.stdout)["results"]}
    assert verified.returncode == 0 and results["abi"]["result"] == "passed", (
        verified.stdout[-2000:] + verified.stderr[-2000:]
    )

    channel = tmp_path / "channel"
    published = faforge(
        "publish", str(package), "--manifest", str(manifest), "--to", str(channel), "--require", "abi", env=env
    )
    assert published.returncode == 0, published.stdout + published.stderr
    prefix = tmp_path / "env"
    # conda-forge has registered a flash-attn-3 of its own: a newer one there must not win over ours with our
    # channel first (strict priority, as conda and pixi default to), and does win when it comes first
    theirs = tmp_path / "conda-forge-fa3"
    assemble(
        PackageSpec(
            FLASH_ATTN_3.package,
            "3.0.1",
            "cuda_130_py310h0123abc_0",
            "linux-64",
            depends=("python >=3.10", "pytorch * cuda*"),
        ),
        theirs,
    )
    index(theirs)
    virtuals = {"__glibc": "2.36", "__cuda": "13.0", "__linux": "6.1", "__unix": "0"}
    with serve_directory(channel) as url:
        records = solve(
            [url, theirs.as_uri(), world.url("conda-forge")],
            ["python 3.12.*", FLASH_ATTN_3.package],
            "linux-64",
            virtuals=virtuals,
        )
        assert (
            "_faforge_" in str(records[FLASH_ATTN_3.package].build)
            and str(records[FLASH_ATTN_3.package].version) == "3.0.0"
        )
        other = solve(
            [theirs.as_uri(), channel.as_uri(), world.url("conda-forge")],
            ["python 3.12.*", FLASH_ATTN_3.package],
            "linux-64",
            virtuals=virtuals,
        )
        assert str(other[FLASH_ATTN_3.package].version) == "3.0.1", "the priority check above could not have failed"
        assert (
            str(records["pytorch"].version) == "2.11.0"
            and "_python_abi3_support" in records
            and "python_abi" in records
        )
        install_from_world(world, records, prefix)
    site = prefix / "lib/python3.12/site-packages"
    assert (site / FLASH_ATTN_3.module / fa3.EXTENSION).is_file() and (
        site / f"{FLASH_ATTN_3.config_module}.py"
    ).is_file()
    probe = (
        f"import torch, {FLASH_ATTN_3.module}, {FLASH_ATTN_3.interface_module}, {FLASH_ATTN_3.extension}\n"
        f"print(torch.__version__)"
    )
    run = subprocess.run(
        [str(prefix / "bin/python3.12"), "-c", probe],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": f"{prefix / 'bin'}:/usr/bin:/bin"},
    )
    assert run.returncode == 0 and run.stdout.startswith("2.11.0"), run.stdout[-2000:] + run.stderr[-3000:]

    # doctor on that environment: the stable-ABI claim read from the binary, checked against conda's torch
    doctor = faforge("doctor", "--python", str(prefix / "bin/python3.12"), "--json", env=env)
    section = json.loads(doctor.stdout)["flash_attn_3"]
    assert doctor.returncode == 0 and section["healthy"] and section["torch"].startswith("2.11.0"), (
        doctor.stdout[-3000:] + doctor.stderr[-2000:]
    )
    assert section["stable_functions"] > 0 and section["gpu"]["sass"] == ["sm_80", "sm_90a"]


def test_flash_attn_2_and_3_install_side_by_side_and_share_no_file(built, build_in_world, world, tmp_path):
    """One environment with both families: upstream's module names differ (flash_attn,
    flash_attn_2_cuda vs flash_attn_3, flash_attn_interface, flash_attn_config); their packages must hold
    no path in common (conda would let one overwrite the other), and both must import beside one torch."""
    result, _ = built
    assert result.returncode == 0
    (fa3_package,) = map(Path, json.loads(result.stdout.strip().splitlines()[-1]))
    fa2 = build_in_world(CU130)
    assert fa2.result.returncode == 0, fa2.log[-3000:]
    packages = [fa3_package, *fa2.packages, *fa2.out.glob("linux-64/libflash-attn-kernels-*.conda")]
    paths_of = {
        p.name: {entry["_path"] for entry in json.loads(read_info(p, "info/paths.json"))["paths"]} for p in packages
    }
    shared = {(a, b): paths_of[a] & paths_of[b] for a in paths_of for b in paths_of if a < b}
    assert not any(shared.values()), {k: sorted(v)[:5] for k, v in shared.items() if v}

    channel = tmp_path / "channel"
    for package in packages:
        (channel / "linux-64").mkdir(parents=True, exist_ok=True)
        shutil.copy(package, channel / "linux-64" / package.name)

    index(channel)
    records = solve(
        [channel.as_uri(), world.url("conda-forge")],
        ["python 3.12.*", "flash-attn", FLASH_ATTN_3.package],
        "linux-64",
        virtuals={"__glibc": "2.36", "__cuda": "13.0", "__linux": "6.1", "__unix": "0"},
    )
    prefix = tmp_path / "env"
    install_from_world(world, records, prefix)
    probe = (
        "import torch, flash_attn, flash_attn_2_cuda, flash_attn_3, flash_attn_interface, "
        "flash_attn_3._C; print(torch.__version__)"
    )
    run = subprocess.run(
        [str(prefix / "bin/python3.12"), "-c", probe],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": f"{prefix / 'bin'}:/usr/bin:/bin"},
    )
    assert run.returncode == 0 and run.stdout.startswith("2.11.0"), run.stdout[-2000:] + run.stderr[-3000:]

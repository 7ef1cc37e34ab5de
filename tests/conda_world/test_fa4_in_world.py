"""flash-attn-4 in the conda world (the third family): its recipe and the recipes of the two packages it needs that
conda-forge lacks (quack-kernels) or has too old (apache-tvm-ffi), built by rattler-build from their real PyPI
artifacts, each recipe's own tests run against the world's conda-forge stand-ins of the rest of the known-good set
(PyPI's wheels under derived records, tests/conda_world/world.yaml). Then py-rattler solves flash-attn-4 beside the
world's conda-forge pytorch 2.11 and refuses it beside a package outside its set, installs it, and `import
flash_attn.cute` runs in the prefix on this CPU machine (no libcuda: the DSL takes its highest installed flavour).

flash-attn 2 and 4 share the import package flash_attn: the last test builds the world's flash-attn from an sdist
that carries upstream's old flash_attn/cute/ copy and checks the two packages share no file and import side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from faforge import paths
from faforge.channel.local import index, solve
from faforge.errors import FaforgeError
from faforge.families.flash_attn_4 import build, sets
from faforge.families.flash_attn_4.matrix import variant_config_name
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN_4
from faforge.matrix import load_matrix
from faforge.release.package_cache import cache_root
from tests.conda_world.archive import read_info
from tests.conda_world.cells import CU130
from tests.conda_world.conftest import faforge
from tests.conda_world.world_cache import install_from_world

pytestmark = pytest.mark.slow

SET = "torch2.11-cu130"
PYTHON = "3.12.* *_cpython"  # the world's one python
VIRTUALS = {"__glibc": "2.36", "__cuda": "13.0", "__linux": "6.1", "__unix": "0"}
OURS = ("apache-tvm-ffi", "quack-kernels", FLASH_ATTN_4.package)  # in build order: each needs the one before

BUILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from rattler_build import ToolConfiguration
    from faforge.channel.local import index
    from faforge.matrix.render import render_platform
    from faforge.release.build.steps import _LogWriter
    args = json.loads(sys.argv[1])
    out = Path(args["out"])
    built = []
    for job in args["jobs"]:
        index(out)  # what is built so far is a channel of the next build (quack-kernels needs apache-tvm-ffi)
        (variant,) = render_platform(Path(job["recipe"]), Path(job["variants"]), "linux-64")
        started = time.monotonic()
        with open(job["log"], "w") as log:
            result = variant.run_build(tool_config=ToolConfiguration(test_strategy="native"), output_dir=out,
                                       channels=[out.as_uri(), *args["channels"]],
                                       progress_callback=_LogWriter(log, lambda line: None))
        built.append({"packages": [str(p) for p in result.packages], "seconds": time.monotonic() - started})
    print(json.dumps(built))
""")


def packages_of_matrix() -> list:
    return build.packages_of(load_matrix(paths.repo_root(), FAMILIES))


def fa4_variants(folder: Path) -> Path:
    """The generated variant file's position of the torch 2.11 x CUDA 13.0 set, as it is."""
    text = (paths.repo_root() / "variants" / variant_config_name()).read_text()
    ids = [line[4:].strip() for line in text.splitlines() if line.startswith("#   noarch/")]
    data = yaml.safe_load(text)
    at = next(i for i, package_id in enumerate(ids) if package_id.startswith(f"noarch/{SET}/"))
    zipped = data["zip_keys"][0]
    values = {key: [data[key][at]] for key in zipped}
    constant = {key: value for key, value in data.items() if key not in zipped and key != "zip_keys"}
    path = folder / "fa4-variants.yaml"
    path.write_text(yaml.safe_dump({**constant, **values}))
    return path


@pytest.fixture(scope="module")
def built(world, tmp_path_factory):
    root = tmp_path_factory.mktemp("fa4-world")
    out = root / "out"
    out.mkdir()
    python_only = root / "python.yaml"
    python_only.write_text(yaml.safe_dump({"python": [PYTHON]}))
    variants = {"apache-tvm-ffi": python_only, "quack-kernels": python_only, FLASH_ATTN_4.package: fa4_variants(root)}
    env = {**os.environ, "CONDA_OVERRIDE_CUDA": "13.0", **world.rattler_env()}
    # each recipe's tests must run this build, not an extraction rattler cached from an earlier run's
    for name in OURS:
        for stale in (cache_root(env) / "pkgs").glob(f"{name}-*"):
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    jobs = [
        {
            "recipe": str(paths.repo_root() / "recipes" / name / "recipe.yaml"),
            "variants": str(variants[name]),
            "log": str(root / f"{name}.log"),
        }
        for name in OURS
    ]
    args = {"jobs": jobs, "out": str(out), "channels": [world.url("conda-forge")]}
    result = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", BUILD, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    logs = "".join((root / f"{name}.log").read_text() for name in OURS if (root / f"{name}.log").is_file())
    assert result.returncode == 0, logs[-6000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    index(out)
    packages = {name: (Path(job["packages"][0]), job["seconds"]) for name, job in zip(OURS, report, strict=True)}
    for package, seconds in packages.values():
        print(f"{package.name}: built and tested in {seconds:.0f} s, {package.stat().st_size / 2**10:.0f} KiB")
    return packages, out


def test_the_three_recipes_build_from_pypi_artifacts_and_pass_their_tests(built):
    packages, _ = built
    fa4, _ = packages[FLASH_ATTN_4.package]
    assert fa4.parent.name == "noarch" and fa4.name.startswith(f"{FLASH_ATTN_4.package}-4.0.0b40-torch2.11_cu130_pyh")
    assert packages["quack-kernels"][0].parent.name == "noarch"
    assert packages["apache-tvm-ffi"][0].name.startswith("apache-tvm-ffi-0.1.15.post2-py312")
    index_json = json.loads(read_info(fa4, "info/index.json"))
    data = sets.load()
    kgs = data.set_for("2.11", "13.0")
    assert kgs is not None
    depends = set(index_json["depends"])
    assert {"nvidia-cutlass-dsl ==4.8.1", "quack-kernels ==0.6.5", "apache-tvm-ffi ==0.1.15.post2"} <= depends
    assert {"triton ==3.6.0", "einops >=0.8.2", "typing_extensions >=4.15.0", "packaging >=25.0"} <= depends
    # the package is upstream's wheel: flash_attn/cute/ and its dist-info, no flash_attn/__init__.py
    files = {entry["_path"] for entry in json.loads(read_info(fa4, "info/paths.json"))["paths"]}
    assert "site-packages/flash_attn/cute/interface.py" in files
    assert "site-packages/flash_attn/__init__.py" not in files
    assert all(
        f.startswith(("site-packages/flash_attn/cute/", "site-packages/flash_attn_4-4.0.0b40.dist-info/"))
        for f in files
    )


def test_the_solver_takes_the_set_beside_the_worlds_torch_and_refuses_what_is_outside_it(built, world):
    _, out = built
    channels = [out.as_uri(), world.url("conda-forge")]
    started = time.monotonic()
    records = solve(channels, ["python 3.12.*", FLASH_ATTN_4.package], "linux-64", virtuals=VIRTUALS)
    print(f"solve: {time.monotonic() - started:.1f} s, {len(records)} packages")
    versions = {name: str(r.version) for name, r in records.items()}
    assert versions["pytorch"] == "2.11.0" and str(records["pytorch"].build).startswith("cuda130")
    expected = {"nvidia-cutlass-dsl": "4.8.1", "quack-kernels": "0.6.5", "apache-tvm-ffi": "0.1.15.post2"}
    # cuda-bindings and its cuda-pathfinder come through cutlass-dsl's cuda-python 13.4.4 (<13.5: matrix.CONDA_NAMES)
    expected |= {"cuda-bindings": "13.4.4", "cuda-pathfinder": "1.8.3", "triton": "3.6.0", "einops": "0.8.2"}
    assert {name: versions.get(name) for name in expected} == expected
    # each package outside the set exists in the world and solves alone: refused only beside flash-attn-4
    for outside in ("nvidia-cutlass-dsl ==4.7.1", "einops ==0.6.0"):
        assert solve(channels, ["python 3.12.*", outside], "linux-64", virtuals=VIRTUALS)
        with pytest.raises(FaforgeError):
            solve(channels, ["python 3.12.*", FLASH_ATTN_4.package, outside], "linux-64", virtuals=VIRTUALS)
    # and a torch of another minor: the world's only pytorch is 2.11, so a 2.12 request has nothing to pair with
    with pytest.raises(FaforgeError):
        solve(channels, ["python 3.12.*", FLASH_ATTN_4.package, "pytorch >=2.12"], "linux-64", virtuals=VIRTUALS)


def _python(prefix: Path, code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(prefix / "bin/python3.12"), "-c", code],
        capture_output=True,
        text=True,
        timeout=900,
        env={"PATH": f"{prefix / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path / "home")},
    )


IMPORT = (
    "import importlib.metadata as m, cutlass, flash_attn, flash_attn.cute, torch\n"
    "print(m.version('flash-attn-4'), m.version('nvidia-cutlass-dsl'), flash_attn.cute.__version__,"
    " torch.__version__)\n"
    "print(getattr(flash_attn, '__file__', None))\n"
    "print(flash_attn.cute.__file__)\n"
)


def test_installed_beside_the_worlds_torch_flash_attn_cute_imports_on_cpu(built, world, tmp_path):
    _, out = built
    records = solve(
        [out.as_uri(), world.url("conda-forge")], ["python 3.12.*", FLASH_ATTN_4.package], "linux-64", virtuals=VIRTUALS
    )
    prefix = tmp_path / "env"
    started = time.monotonic()
    install_from_world(world, records, prefix)
    print(f"install: {time.monotonic() - started:.1f} s")
    site = prefix / "lib/python3.12/site-packages"
    # the meta wheel's .pth survived the repack: it is what puts dsl_packages/ (cutlass) on sys.path
    assert (site / "nvidia_cutlass_dsl_packages.pth").is_file()
    cutlass = _python(prefix, "import cutlass, sys; print(cutlass.__file__)", tmp_path)
    assert cutlass.returncode == 0 and "/nvidia_cutlass_dsl/dsl_packages/cutlass/" in cutlass.stdout, cutlass.stderr
    started = time.monotonic()
    run = _python(prefix, IMPORT, tmp_path)
    print(f"import flash_attn.cute: {time.monotonic() - started:.1f} s")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    versions, namespace_file, cute_file = run.stdout.splitlines()[-3:]
    # FA4's own __version__ reads a distribution named fa4 and says 0.0.0; the metadata knows the release
    assert versions.split() == ["4.0.0b40", "4.8.1", "0.0.0", "2.11.0+cu130"]
    assert namespace_file == "None"  # flash_attn is a namespace package in an FA4-only environment
    assert cute_file == str(site / "flash_attn/cute/__init__.py")


def test_flash_attn_2_and_4_share_no_file_and_import_side_by_side(built, build_in_world, world, tmp_path):
    """The world's flash-attn is built from an sdist carrying upstream's old flash_attn/cute/ (conftest's sdist), as
    upstream's does: its recipe must leave those files to flash-attn-4, or conda would let one package overwrite
    the other's and an uninstall of either break both."""
    packages, out = built
    fa2 = build_in_world(CU130)
    assert fa2.result.returncode == 0, fa2.log[-3000:]
    fa4, _ = packages[FLASH_ATTN_4.package]
    paths_of = {
        p.name: {e["_path"] for e in json.loads(read_info(p, "info/paths.json"))["paths"]} for p in [fa4, *fa2.packages]
    }
    fa2_paths = set().union(*(paths_of[p.name] for p in fa2.packages))
    assert any(p.endswith("site-packages/flash_attn/__init__.py") for p in fa2_paths)
    assert not any("/flash_attn/cute/" in p for p in fa2_paths)
    # a noarch package's site-packages/ lands in lib/python3.12/site-packages/, where flash-attn's files are
    fa4_installed = {f"lib/python3.12/{p}" for p in paths_of[fa4.name]}
    assert not fa4_installed & fa2_paths

    channel = tmp_path / "channel"
    for package in [*fa2.packages, fa2.kernel_package()]:
        (channel / "linux-64").mkdir(parents=True, exist_ok=True)
        shutil.copy(package, channel / "linux-64" / package.name)
    index(channel)
    records = solve(
        [channel.as_uri(), out.as_uri(), world.url("conda-forge")],
        ["python 3.12.*", "flash-attn", FLASH_ATTN_4.package],
        "linux-64",
        virtuals=VIRTUALS,
    )
    prefix = tmp_path / "env"
    install_from_world(world, records, prefix)
    run = _python(prefix, IMPORT, tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    _, namespace_file, cute_file = run.stdout.splitlines()[-3:]
    site = prefix / "lib/python3.12/site-packages"
    # beside flash-attn 2, flash_attn is its package, and flash_attn.cute is flash-attn-4's files inside it
    assert namespace_file == str(site / "flash_attn/__init__.py")
    assert cute_file == str(site / "flash_attn/cute/__init__.py")
    assert "importlib.metadata" in (site / "flash_attn/cute/__init__.py").read_text()  # FA4's, not the old copy


def test_faforge_build_builds_a_package_by_its_id(built, world, tmp_path):
    """`faforge build <id>`: one job per package, from the generated variant file, its recipe test run against the
    world with our quack-kernels and apache-tvm-ffi as an extra channel; the same package the recipe built above."""
    packages, out = built
    package_id = next(p.id for p in packages_of_matrix() if p.set_id == SET)
    result = faforge(
        "build",
        package_id,
        "--channel-alias",
        f"conda-forge={world.url('conda-forge')}",
        "--extra-channel",
        out.as_uri(),
        "--output-dir",
        str(tmp_path / "out"),
        env=world.rattler_env(),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    (package,) = (tmp_path / "out" / "noarch").glob(f"{FLASH_ATTN_4.package}-*.conda")
    assert package.name == packages[FLASH_ATTN_4.package][0].name

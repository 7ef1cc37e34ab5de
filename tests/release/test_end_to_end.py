"""plan -> (stand-in packages for compiled ones) -> verify -> publish -> serve over HTTP -> solve + install.

One cell is added to a scratch copy of the release table (torch 2.14.1, CUDA 13.0, py3.11: the
PyPI torch wheel on this machine's disk). Its stand-in package carries the cell's real build string
and rendered run requirements and a real extension compiled here against that torch's libc10 and
against a real kernel library (nvcc, the cell's arch list), which the stand-in kernel package the
cell pins holds; a second extension, built with the other C++ ABI, must fail its gates.

Slow on first run: `faforge verify` installs PyPI torch 2.14.1 (~5 GB, from local disk here) into its cached base venv
under the test cache (tests/support/cache.py) faforge/ (FAFORGE_CACHE_DIR), as it would on a CI runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

from faforge.channel.local import PackageSpec, assemble, index, install, solve
from faforge.matrix.kernels import kernel_pin
from faforge.matrix.releases import Release, dump_releases, header_of
from faforge.matrix.releases_read import load_releases
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.docs import HOSTING, marked_block
from tests.support.http_server import free_port, serve_process
from tests.support.kernel_abi import add_kernel_abi_row
from tests.support.standin_flash_attn import (
    CannotCompile,
    compile_extension,
    compile_kernel_library,
    standin_kernel_package,
    standin_package,
)
from tests.support.torch_envs import TorchEnvUnavailable, find_python, torch_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# Where `faforge verify` keeps its PyPI torch venv for this test (git-ignored, ~5 GB, built once).
VERIFY_CACHE = cache_dir("faforge")
TORCH, CUDA, PYTHON = "2.14.1", "13.0", "3.11"
CELL = "linux-64/py311/torch2.14/cu130/abi1"

# The conda-forge packages the cell's run requirements name, as stand-ins (names, versions and build
# string shapes as conda-forge publishes them; no real binaries: the solve and install are the test).
CONDA_FORGE_STANDINS = [
    PackageSpec("python", "3.11.14", "hd63d673_2_cpython", "linux-64"),
    PackageSpec("einops", "0.8.1", "pyhd8ed1ab_0", "noarch", depends=("python >=3.9",)),
    PackageSpec("cuda-version", "13.0", "h4a4eb4b_3", "noarch", constrains=("__cuda >=13",)),
    PackageSpec("libtorch", TORCH, "cuda130_mkl_h1ca3d63_300", "linux-64", depends=("cuda-version >=13.0,<14",)),
    PackageSpec(
        "pytorch",
        TORCH,
        "cuda130_mkl_py311_h8b0e3c1_300",
        "linux-64",
        depends=(
            "__cuda",
            f"libtorch {TORCH} cuda130_mkl_h1ca3d63_300",
            "python >=3.11,<3.12.0a0",
            "cuda-version >=13.0,<14",
        ),
    ),
]


def readme_block(marker: str, language: str) -> str:
    return marked_block(HOSTING, marker, language)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A scratch checkout whose release table has the test cell; FAFORGE_ROOT points faforge at it."""
    root = tmp_path_factory.mktemp("project")
    subprocess.run(
        ["cp", "-r", str(REPO / "variants"), str(REPO / "recipes"), str(REPO / "scripts"), str(root)], check=True
    )
    path = root / "variants" / "releases.yaml"
    table = load_releases(path)
    template = next(r for r in table.releases if r.world == "conda-forge" and not getattr(r, "tegra", False))
    row = replace(
        template,
        torch=TORCH,
        cuda=CUDA,
        python=(PYTHON,),
        platforms=("linux-64",),
        source=("tests/release/test_end_to_end.py",),
    )
    assert isinstance(row, Release)
    path.write_text(dump_releases(replace(table, releases=(*table.releases, row)), header_of(path.read_text())))
    # Its kernel library layout: torch 2.14.1's PhiloxCudaState is the shim's, 64-bit offset_intragraph_
    # (tests/kernels/test_torch_shim.py compares them on the installed torch).
    add_kernel_abi_row(root / "variants", TORCH, "tests/release/test_end_to_end.py's cell")
    env = dict(os.environ, FAFORGE_ROOT=str(root), FAFORGE_CACHE_DIR=str(VERIFY_CACHE))
    generated = subprocess.run([sys.executable, "-m", "faforge", "generate"], capture_output=True, text=True, env=env)
    assert generated.returncode == 0, generated.stderr
    return root, env


def faforge(env, *args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=1800
    )


@pytest.fixture(scope="module")
def cell(project):
    _, env = project
    return next(c for c in json.loads(faforge(env, "matrix", "--json").stdout) if c["id"] == CELL)


@pytest.fixture(scope="module")
def extensions(tmp_path_factory, cell):
    """{abi: extension} and the kernel library both link against."""
    try:
        torch = torch_env(TORCH, PYTHON)
        python = find_python(PYTHON)
        work = tmp_path_factory.mktemp("ext")
        library = compile_kernel_library(work / "kernels", cuda_home() / "bin" / "nvcc", cell["cuda_archs"])
        return {
            abi: compile_extension(work, torch.torch_lib, python, abi, kernel_library=library) for abi in (1, 0)
        }, library
    except (TorchEnvUnavailable, CannotCompile, NoCudaToolkit) as exc:
        pytest.skip(str(exc))


def test_plan_verify_publish_serve_install(project, extensions, cell, tmp_path):
    _, env = project
    extensions, kernel_library = extensions
    work = tmp_path
    channel = work / "channel"
    index(channel)

    # plan: the empty channel holds nothing, so the cell is a job.
    plan = faforge(env, "plan", "--channel", str(channel), "--json")
    assert plan.returncode == 0, plan.stderr
    plan = json.loads(plan.stdout)
    jobs = [j for chunk in plan["flash_attn"] for j in chunk["include"] if j["cell"] == CELL]
    assert CELL in plan["to_build"] and jobs, plan["to_build"][-3:]
    job = jobs[0]
    assert job["build-string"] == cell["build_string"]

    # stand-ins for the compiled packages: the planned file names, the rendered run requirements, the
    # kernel build the cell pins (the plan's kernel job makes it), beside each flash-attn.
    version = job["package"].removeprefix("flash-attn-").removesuffix(f"-{job['build-string']}.conda")
    pin = kernel_pin(cell["run_requirements"])
    assert pin is not None and fnmatch(pin.filename(), job["kernel-package"]), (
        cell["run_requirements"],
        job["kernel-package"],
    )
    kernels = {
        out: standin_kernel_package(
            work / out,
            version=pin.version,
            build=pin.build,
            subdir="linux-64",
            depends=[f"cuda-version >={CUDA},<14"],
            library=kernel_library,
        )
        for out in ("output", "output-bad")
    }
    good = standin_package(
        work / "output",
        version=version,
        build=job["build-string"],
        subdir="linux-64",
        depends=cell["run_requirements"],
        python=PYTHON,
        extension=extensions[1],
    )
    bad = standin_package(
        work / "output-bad",
        version=version,
        build=job["build-string"],
        subdir="linux-64",
        depends=cell["run_requirements"],
        python=PYTHON,
        extension=extensions[0],
    )
    assert good.name == bad.name == job["package"]

    # verify: CPU gates pass, the GPU gate is skipped here (no GPU), the wrong-ABI build fails. The
    # kernel package passes its own gates (torch-free, dlopen with PyPI's CUDA runtime).
    manifest = work / "verification"
    verified = faforge(
        env,
        "verify",
        str(good),
        str(kernels["output"]),
        "--gates",
        "abi,import,gpu",
        "--manifest",
        str(manifest),
        "--json",
    )
    by_package = {}
    for r in json.loads(verified.stdout)["results"]:
        by_package.setdefault(r["package"], {})[r["gate"]] = r["result"]
    assert by_package == {
        good.name: {"abi": "passed", "import": "passed", "gpu": "skipped"},
        kernels["output"].name: {"abi": "passed", "import": "passed", "gpu": "skipped"},
    }, verified.stdout[-3000:] + verified.stderr
    assert verified.returncode == 3
    failed = faforge(env, "verify", str(bad), "--manifest", str(manifest), "--json")
    assert failed.returncode == 1
    assert {r["gate"]: r["result"] for r in json.loads(failed.stdout)["results"]} == {
        "abi": "failed",
        "import": "failed",
    }

    # publish under the default gates: refused, because skipped is not passed.
    refused = faforge(env, "publish", str(good), "--manifest", str(manifest), "--to", str(channel))
    assert refused.returncode == 1
    assert "refused" in refused.stdout and "gpu: skipped" in refused.stdout
    assert not (channel / "linux-64" / good.name).exists()
    # a package with a failed gate is refused whatever is required.
    for require in ("abi,import", "gpu"):
        result = faforge(
            env, "publish", str(bad), "--manifest", str(manifest), "--to", str(channel), "--require", require
        )
        assert result.returncode == 1 and "refused" in result.stdout and "abi: failed" in result.stdout
    assert not (channel / "linux-64" / bad.name).exists()
    # the happy path.
    alone = faforge(
        env, "publish", str(good), "--manifest", str(manifest), "--to", str(channel), "--require", "abi,import"
    )
    assert alone.returncode == 1 and pin.filename() in alone.stdout, "never without its kernel package"
    published = faforge(
        env,
        "publish",
        str(good),
        str(kernels["output"]),
        "--manifest",
        str(manifest),
        "--to",
        str(channel),
        "--require",
        "abi,import",
    )
    assert published.returncode == 0, published.stdout + published.stderr
    assert (channel / "linux-64" / good.name).read_bytes() == good.read_bytes()
    assert (channel / "linux-64" / pin.filename()).read_bytes() == kernels["output"].read_bytes()

    # the plan now leaves the published cell out.
    replanned = json.loads(faforge(env, "plan", "--channel", str(channel), "--json").stdout)
    assert CELL in replanned["in_channel"] and CELL not in replanned["to_build"]

    # serve the channel exactly as the hosting page says, and solve + install its environment.yml.
    port = free_port()
    serve = (
        readme_block("serve: local channel", "bash")
        .strip()
        .replace(" 8000", f" {port}")
        .replace("--directory channel", f"--directory {channel}")
    )
    command = serve.split()
    assert command[:3] == ["python", "-m", "http.server"]
    environment = yaml.safe_load(
        readme_block("environment.yml: local channel over http", "yaml").replace(":8000/", f":{port}/")
    )
    conda_forge = work / "conda-forge"
    for spec in CONDA_FORGE_STANDINS:
        assemble(spec, conda_forge)
    index(conda_forge)
    channels = [conda_forge.as_uri() if c == "conda-forge" else c for c in environment["channels"]]
    assert channels[0] == f"http://127.0.0.1:{port}/"
    with serve_process([sys.executable, *command[1:]], channels[0]):
        records = solve(channels, environment["dependencies"], "linux-64")
        assert str(records["flash-attn"].build) == job["build-string"]
        assert str(records["flash-attn"].url).startswith(channels[0])
        assert str(records["pytorch"].version) == TORCH
        prefix = work / "prefix"
        install(records, prefix, "linux-64", cache_dir=work / "pkgs")
    installed = list((prefix / "lib" / f"python{PYTHON}" / "site-packages").glob("flash_attn_2_cuda*.so"))
    assert installed and installed[0].read_bytes() == extensions[1].read_bytes()
    assert (prefix / "lib" / "libflash_attn_kernels.so").read_bytes() == kernel_library.read_bytes(), (
        "the pinned kernel build came with it"
    )
    assert (prefix / "conda-meta" / f"{good.name.removesuffix('.conda')}.json").is_file()

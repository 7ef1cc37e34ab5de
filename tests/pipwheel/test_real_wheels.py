"""The three pip wheels, made by `faforge wheel` from real builds, and judged by real tools (the pip world).

- kernel: the libflash-attn-kernels package `faforge build` makes in the conda world for the cu130 cell
  (tests/conda_world; the same build the conda tests use, once per run), repacked: its library byte for byte
  but for the RUNPATH.
- glue: recipes/flash-attn/build_flash_attn.py --kernel-library on that package's library, against PyPI's
  torch 2.14.1 (the cached venv on local disk) and the world's tiny sdist: flash_api.cpp compiled once,
  no kernel TU (the conda build compiled them).
- fa3: the committed FA3 GPU canary (our own real build, tests/gpu/canary/flash-attn-3/).
Each is checked by auditwheel (its CLI `show --json`, and `analyze_wheel_abi` with the external-by-design
libraries excluded, as `auditwheel repair --exclude` takes them), installed by real pip (--no-deps --target:
its own RECORD and tag checks) and once by real uv, and the glue is loaded by the real loader from a pip
layout beside torch 2.14.1, with only the kernel wheel's folder holding the kernel library.
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest
from auditwheel.wheel_abi import analyze_wheel_abi
from rattler.package_streaming import extract

from faforge import paths
from faforge.abi.elf import read_info
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.pipwheel.facts import read_wheel, wheel_contents
from faforge.pipwheel.manylinux import EXTERNAL, is_external
from faforge.pipwheel.patch import differences, identity
from tests.conda_world.cells import CU130
from tests.conda_world.conftest import build_in_world, cu130_kernel_package, sdist, world  # noqa: F401  (fixtures: the world's kernel build, once per run)
from tests.pipwheel.test_facts import CANARY
from tests.recipe.test_build_script_real import SCRIPT, build_python  # noqa: F401  (fixture: torch 2.14.1 and the build tools)
from tests.support.torch_envs import torch_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "wheel.json").read_text())
AUDITWHEEL = Path(sys.executable).with_name("auditwheel")
UV = Path(sys.executable).with_name("uv")
BUILD_STRING = (
    "py311_torch2_14_cu130_cxx11abi1_h1a2b3c4_0"  # the cell's flash-attn build string (its hash made up here)
)


def faforge(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "faforge", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def unpacked_kernel(cu130_kernel_package, tmp_path_factory) -> Path:  # noqa: F811 (an imported fixture, requested by name)

    prefix = tmp_path_factory.mktemp("kernel-prefix")
    extract(cu130_kernel_package, prefix)
    return prefix / "lib" / FLASH_ATTN.kernel_soname


@pytest.fixture(scope="module")
def raw_glue(build_python, unpacked_kernel, sdist, tmp_path_factory):  # noqa: F811 (an imported fixture, requested by name)
    """The backend's wheel of the glue alone, linked against the conda kernel package's library."""
    python, env = build_python
    tmp = tmp_path_factory.mktemp("glue")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    src = next(tmp.glob(f"{FLASH_ATTN.dist_name}-*"))
    result = subprocess.run(
        [
            str(python),
            str(SCRIPT),
            "--source-dir",
            str(src),
            "--archs",
            "80;90;100;120+PTX",
            "--cxx11-abi",
            "1",
            "--build-dir",
            str(tmp / "build"),
            "--wheel-dir",
            str(tmp / "dist"),
            "--max-jobs",
            "1",
            "--checker-path",
            str(paths.repo_root() / "scripts"),
            "--kernel-library",
            str(unpacked_kernel.with_name(FLASH_ATTN.kernel_library)),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return next((tmp / "dist").glob(f"{FLASH_ATTN.dist_name}-*.whl")), log


@pytest.fixture(scope="module")
def fa3_raw(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("fa3") / CANARY.name.removesuffix(".xz")
    raw.write_bytes(lzma.decompress(CANARY.read_bytes()))
    return raw


@pytest.fixture(scope="module")
def torch214(build_python):  # noqa: F811 (an imported fixture, requested by name)

    return torch_env("2.14.1")


@pytest.fixture(scope="module")
def wheels(cu130_kernel_package, raw_glue, fa3_raw, torch214, tmp_path_factory) -> dict[str, dict]:  # noqa: F811 (an imported fixture, requested by name)
    """kind -> the `faforge wheel KIND ... --json` report (its wheel in one output folder), each run once."""
    out = tmp_path_factory.mktemp("wheels")
    metadata = torch214.site_packages / "torch-2.14.1.dist-info" / "METADATA"
    runs = {"kernel": ["kernel", str(cu130_kernel_package), "--torch-metadata", str(metadata)]}
    reports = {}
    for kind in ("kernel", "glue", "fa3"):
        if kind == "glue":
            runs[kind] = [
                "glue",
                str(raw_glue[0]),
                "--kernel-wheel",
                reports["kernel"]["wheel"]["path"],
                "--torch",
                "2.14",
                "--cuda",
                "13.0",
                "--cxx11-abi",
                "1",
                "--build-tag",
                BUILD_STRING,
            ]
        if kind == "fa3":
            runs[kind] = ["fa3", str(fa3_raw), "--cuda", "13.0", "--archs", "90a"]
        result = faforge("wheel", *runs[kind], "--out", str(out), "--json")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        reports[kind] = json.loads(result.stdout)
        reports[kind]["_stderr"] = result.stderr
    return reports


def test_reports_match_the_schema(wheels):
    for report in wheels.values():
        jsonschema.validate({k: v for k, v in report.items() if k != "_stderr"}, SCHEMA)


def test_the_kernel_wheel_is_the_conda_library_with_the_pip_runpath(wheels, unpacked_kernel, tmp_path):
    report = wheels["kernel"]
    facts = read_wheel(report["wheel"]["path"])
    label = report["wheel"]["local"]
    assert (
        facts.name == FLASH_ATTN.kernel_package and facts.version == f"2.8.3.post2+{label}" and facts.build_tag == "0"
    )
    assert (
        label.startswith("cu130.sm80.90.100.120ptx.philox64.h")
        and facts.python_tags == ("py3",)
        and facts.abi_tags == ("none",)
    )
    assert facts.requires_dist == ("nvidia-cuda-runtime>=13.0,<14",), (
        "the CUDA 13 runtime distribution torch 2.14.1's cuda-toolkit[cudart] brings"
    )
    library = tmp_path / FLASH_ATTN.kernel_soname
    library.write_bytes(wheel_contents(facts.path)[f"libflash_attn_kernels/{FLASH_ATTN.kernel_soname}"])
    assert read_info(unpacked_kernel).rpath == ("$ORIGIN/",), "rattler-build's RPATH for conda's lib/"
    assert read_info(library).runpath == ("$ORIGIN/../nvidia/cu13/lib",) and read_info(library).rpath == ()
    assert differences(identity(unpacked_kernel), identity(library)) == [], "nothing but the RUNPATH changed"
    assert report["gpu"] == {"sass": ["sm_80", "sm_90", "sm_100", "sm_120"], "ptx": ["compute_120"]}
    assert (
        "kernel wheel from" in report["_stderr"]
        and "+ " in report["_stderr"]
        and "patchelf --set-rpath" in report["_stderr"]
    )


def test_the_glue_wheel_pins_its_torch_minor_and_exact_kernel_wheel(wheels, raw_glue):
    report, kernel = wheels["glue"], read_wheel(wheels["kernel"]["wheel"]["path"])
    facts = read_wheel(report["wheel"]["path"])
    assert facts.filename.startswith("flash_attn-2.8.3.post2+torch2.14.cu130.abi1-0h1a2b3c4-cp311-cp311-manylinux_")
    assert facts.requires_dist == ("torch>=2.14,<2.15", f"{FLASH_ATTN.kernel_package}=={kernel.version}", "einops")
    assert facts.requires_python == ">=3.11,<3.12"
    assert report["runpath"] == ["$ORIGIN/libflash_attn_kernels", "$ORIGIN/torch/lib", "$ORIGIN/nvidia/cu13/lib"]
    assert not [m for m in wheel_contents(facts.path) if FLASH_ATTN.kernel_library in m], (
        "the kernel library is the kernel wheel's alone"
    )
    log = raw_glue[1]
    assert ".cu" not in " ".join(line for line in log.splitlines() if "nvcc" in line), (
        "the glue build compiled a kernel TU"
    )


def test_the_fa3_wheel_is_abi3_for_every_torch_from_2_9(wheels):
    report = wheels["fa3"]
    facts = read_wheel(report["wheel"]["path"])
    assert facts.filename.startswith("flash_attn_3-3.0.0+cu130.sm90a-cp310-abi3-manylinux_")
    assert facts.requires_dist == ("torch>=2.9",) and facts.requires_python == ">=3.10"
    assert report["runpath"] == ["$ORIGIN/../torch/lib", "$ORIGIN/../nvidia/cu13/lib"] and report["gpu"]["sass"] == [
        "sm_90a"
    ]


def test_auditwheel_agrees_with_every_tag(wheels):
    """`auditwheel show` gives our tag as its symbol tag (`sym_tag`); its overall tag is linux_x86_64 only because
    the external-by-design libraries are not on this machine's library path (it would graft them). With those
    excluded, as `auditwheel repair --exclude` takes them, its overall verdict is our tag."""
    for kind, report in wheels.items():
        path, tag = Path(report["wheel"]["path"]), report["platform"]["tag"]
        assert report["wheel"]["platform_tags"] == [tag]
        shown = subprocess.run(
            [str(AUDITWHEEL), "show", "--json", str(path)], capture_output=True, text=True, timeout=300
        )
        assert shown.returncode == 0, shown.stderr
        verdict = json.loads(shown.stdout)
        assert verdict["sym_tag"] == tag, (kind, verdict)
        assert all(is_external(lib) for lib in verdict["external_libs"]), (kind, verdict["external_libs"])
        assert verdict["overall_tag"] in (tag, "linux_x86_64"), (kind, verdict)
        info = analyze_wheel_abi(None, None, path, frozenset(EXTERNAL), disable_isa_ext_check=False, allow_graft=False)
        assert info.overall_policy.name == tag, (kind, info.overall_policy.name)
    assert wheels["kernel"]["platform"]["tag"] == "manylinux_2_24_x86_64", (
        "the conda build's libstdc++ needs: GLIBCXX_3.4.21"
    )


def test_pip_installs_each_wheel_with_its_own_checks(wheels, tmp_path):
    for kind, report in wheels.items():
        target = tmp_path / kind
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--disable-pip-version-check",
                "--no-compile",
                "--target",
                str(target),
                report["wheel"]["path"],
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        record = next(target.glob("*.dist-info/RECORD")).read_text()
        assert all(line.split(",")[1] or line.split(",")[0].endswith("RECORD") for line in record.splitlines())


def test_uv_installs_the_three_into_a_venv(wheels, torch214, tmp_path):
    """uv, a second real installer: the three wheels beside each other, as an index would give them."""
    if not UV.is_file():
        pytest.skip("uv is not installed beside this Python (pip install uv)")
    venv = tmp_path / "venv"
    subprocess.run(
        [str(UV), "venv", "--quiet", "--python", str(torch214.python), str(venv)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    result = subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            "--offline",
            "--no-deps",
            "--python",
            str(venv / "bin" / "python"),
            *(r["wheel"]["path"] for r in wheels.values()),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert (site / "libflash_attn_kernels" / FLASH_ATTN.kernel_soname).is_file()
    assert (site / FLASH_ATTN_3.module / "_C.abi3.so").is_file() and next(site.glob(f"{FLASH_ATTN.extension}.*.so"))


PROBE = """
import sys
order = sys.argv[1]
if order == "kernels-alone":
    import ctypes, glob
    ctypes.CDLL(glob.glob(sys.argv[2] + "/libflash_attn_kernels/*.so.1")[0])
else:
    import flash_attn_2_cuda  # before torch: the RUNPATH alone finds torch's, NVIDIA's and the kernel wheel's libraries
maps = {line.split()[-1] for line in open("/proc/self/maps") if "/" in line}
print("LOADED", *sorted(p for p in maps if "cudart" in p or "flash_attn_kernels" in p or "libc10.so" in p))
if order == "glue":
    import torch
    print("twice", flash_attn_2_cuda.twice(torch.ones(2)).tolist())
    try:
        flash_attn_2_cuda.launch(4)
        print("launched", torch.cuda.is_available())
    except Exception as exc:
        print("error", type(exc).__name__, str(exc).splitlines()[0])
"""


@pytest.fixture(scope="module")
def pip_site(wheels, torch214, tmp_path_factory) -> Path:
    """A site-packages as pip lays it out: our glue and kernel wheels installed by pip, torch 2.14.1 and its NVIDIA
    wheels beside them (links into the cached venv, so torch/lib and nvidia/cu13/lib are where pip puts them)."""
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [
            str(torch214.python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(site),
            wheels["glue"]["wheel"]["path"],
            wheels["kernel"]["wheel"]["path"],
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("torch", "nvidia"):
        (site / name).symlink_to(torch214.site_packages / name)
    return site


def probe(torch214, site: Path, order: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    return subprocess.run(
        [str(torch214.python), "-c", PROBE, order, str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": str(site)},
    )


def test_the_loader_finds_everything_through_the_runpaths(pip_site, torch214):
    site_torch = torch214.site_packages
    alone = probe(torch214, pip_site, "kernels-alone")
    assert alone.returncode == 0, alone.stderr[-3000:]
    loaded = alone.stdout.split("LOADED", 1)[1].split()
    assert str(site_torch / "nvidia/cu13/lib/libcudart.so.13") in loaded, (
        "the kernel library's RUNPATH finds NVIDIA's runtime wheel"
    )
    assert not [p for p in loaded if "cudart" in p and "site-packages/nvidia" not in p], (
        "no other CUDA runtime (the toolkit's)"
    )
    glue = probe(torch214, pip_site, "glue")
    assert glue.returncode == 0, glue.stderr[-3000:]
    lines = glue.stdout.splitlines()
    loaded = lines[0].split()[1:]
    assert str(pip_site / "libflash_attn_kernels" / FLASH_ATTN.kernel_soname) in loaded
    assert str(site_torch / "torch/lib/libc10.so") in loaded
    assert lines[1] == "twice [2.0, 2.0]"
    if lines[2].startswith("launched"):
        return  # a GPU machine: the kernel launched
    assert lines[2].startswith("error AcceleratorError CUDA error:"), lines[
        2
    ]  # torch's error type, from the kernel wheel's launch


def test_without_the_kernel_wheel_the_glue_names_it(pip_site, torch214, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(pip_site, site, symlinks=True, ignore=shutil.ignore_patterns("libflash_attn_kernels*"))
    broken = probe(torch214, site, "glue")
    assert broken.returncode != 0 and f"{FLASH_ATTN.kernel_soname}: cannot open shared object file" in broken.stderr, (
        broken.stderr[-2000:]
    )


def test_the_same_inputs_give_the_same_wheel(wheels, cu130_kernel_package, torch214, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    metadata = torch214.site_packages / "torch-2.14.1.dist-info" / "METADATA"
    again = faforge(
        "wheel",
        "kernel",
        str(cu130_kernel_package),
        "--torch-metadata",
        str(metadata),
        "--out",
        str(tmp_path),
        "--json",
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["wheel"]["sha256"] == wheels["kernel"]["wheel"]["sha256"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            [
                "glue",
                "{raw}",
                "--kernel-wheel",
                "{kernel}",
                "--torch",
                "2.14",
                "--cuda",
                "13.0",
                "--cxx11-abi",
                "1",
                "--build-tag",
                "0h1a2b3c4",
                "--python",
                "3.12",
            ],
            "built for cp311-cp311, not the cell's cp312-cp312",
        ),
        (
            [
                "glue",
                "{raw}",
                "--kernel-wheel",
                "{kernel}",
                "--torch",
                "2.14",
                "--cuda",
                "12.8",
                "--cxx11-abi",
                "1",
                "--build-tag",
                "0h1a2b3c4",
            ],
            "built for cu130.",
        ),
        (
            [
                "glue",
                "{raw}",
                "--kernel-wheel",
                "{kernel}",
                "--torch",
                "2.14",
                "--cuda",
                "13.0",
                "--cxx11-abi",
                "0",
                "--build-tag",
                "0h1a2b3c4",
            ],
            "built with _GLIBCXX_USE_CXX11_ABI=1, but the cell is abi0",
        ),
        (
            [
                "glue",
                "{raw}",
                "--kernel-wheel",
                "{fa3}",
                "--torch",
                "2.14",
                "--cuda",
                "13.0",
                "--cxx11-abi",
                "1",
                "--build-tag",
                "0h1a2b3c4",
            ],
            "a flash-attn-3 wheel, not libflash-attn-kernels",
        ),
        (
            ["fa3", "{fa3_raw}", "--cuda", "13.0", "--archs", "80;90a"],
            "its GPU code is sm_90a, but --archs 80;90a says",
        ),
        (
            ["fa3", "{fa3_raw}", "--cuda", "12.8", "--archs", "90a"],
            "it links libcudart.so.13, not the CUDA 12.8 runtime",
        ),
        (
            ["kernel", "{glue_conda}", "--torch-metadata", "{metadata}"],
            "a flash-attn package, not libflash-attn-kernels",
        ),
    ],
)
def test_inputs_that_contradict_the_cell_are_refused(
    wheels,
    raw_glue,
    fa3_raw,
    build_in_world,  # noqa: F811 (an imported fixture, requested by name)
    torch214,
    tmp_path,
    argv,
    says,
):
    places = {
        "{raw}": str(raw_glue[0]),
        "{kernel}": wheels["kernel"]["wheel"]["path"],
        "{fa3}": wheels["fa3"]["wheel"]["path"],
        "{fa3_raw}": str(fa3_raw),
        "{glue_conda}": str(build_in_world(CU130).packages[0]),
        "{metadata}": str(torch214.site_packages / "torch-2.14.1.dist-info" / "METADATA"),
    }
    result = faforge("wheel", *(places.get(a, a) for a in argv), "--out", str(tmp_path))
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert says in result.stderr, result.stderr[-2000:]
    assert not list(tmp_path.glob("*.whl")), "nothing written"

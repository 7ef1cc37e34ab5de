"""`faforge doctor` on a split flash-attn (the split build): its extension has DT_NEEDED libflash_attn_kernels.so,
and its conda record pins one libflash-attn-kernels build exactly.

Real parts: a venv that imports the cached torch 2.14.1, made a conda prefix by a conda-meta/ folder
holding real conda-meta JSON records; the kernel library and the extension are compiled here with g++
(the extension links the library and finds it through RUNPATH $ORIGIN/../.., i.e. the prefix's lib/).
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from faforge.channel import local
from tests.doctor import envs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ builds the library and the extension"),
]

VERSION = "2.8.3.post2"
PINNED = "cu130_sm80_90_100_120ptx_philox64_h1a2b3c4_0"
CHANNEL = "file:///srv/faforge"
KERNEL_SOURCE = 'extern "C" int run_mha_fwd_standin(void) { return 0; }\n'
CALLS_KERNELS = ('extern "C" int run_mha_fwd_standin(void);', "run_mha_fwd_standin();")


def conda_meta(prefix: Path, name: str, build: str, depends: list[str], files: list[str]) -> None:
    """A record as conda writes it into PREFIX/conda-meta/NAME-VERSION-BUILD.json."""
    meta = prefix / "conda-meta"
    meta.mkdir(exist_ok=True)
    record = {
        "name": name,
        "version": VERSION,
        "build": build,
        "build_number": 0,
        "channel": f"{CHANNEL}/linux-64",
        "subdir": "linux-64",
        "depends": depends,
        "files": files,
        "url": f"{CHANNEL}/linux-64/{name}-{VERSION}-{build}.conda",
    }
    (meta / f"{name}-{VERSION}-{build}.json").write_text(json.dumps(record, indent=2))


@pytest.fixture
def split_install(cuda_overlay, tmp_path):
    """The overlay venv with a split flash-attn installed the conda way; returns (python, prefix, library)."""
    python = cuda_overlay
    prefix = Path(envs.run([python, "-c", "import sys; print(sys.prefix)"]).stdout.strip())
    library = envs.compile_shared(
        tmp_path / "built" / "libflash_attn_kernels.so", KERNEL_SOURCE, soname="libflash_attn_kernels.so"
    )
    site = envs.site_packages(python)
    ext = envs.extension(
        site / f"{envs.EXTENSION}{envs.ext_suffix(python)}",
        python,
        [CALLS_KERNELS],
        (f"-L{library.parent}", "-lflash_attn_kernels", "-Wl,-rpath,$ORIGIN/../.."),
    )
    assert site.parent.parent == prefix / "lib", "RUNPATH $ORIGIN/../.. is the prefix's lib/"
    conda_meta(
        prefix,
        "flash-attn",
        "py311_torch2_14_cu130_cxx11abi1_h7654321_0",
        ["python >=3.11,<3.12.0a0", f"libflash-attn-kernels =={VERSION} {PINNED}"],
        [str(ext.relative_to(prefix))],
    )
    return python, prefix, library


def install_library(prefix: Path, library: Path, build: str) -> None:
    (prefix / "lib").mkdir(exist_ok=True)
    shutil.copy2(library, prefix / "lib" / library.name)
    conda_meta(prefix, "libflash-attn-kernels", build, ["cuda-version >=13.0,<14"], ["lib/libflash_attn_kernels.so"])


def pinned_install_command(result) -> list[str]:
    fix = next(f for f in result.report["fixes"] if "libflash-attn-kernels" in " ".join(f["commands"]))
    assert fix["kind"] == "conda-install"
    return shlex.split(fix["commands"][-1])


def test_a_missing_kernel_library_is_named_with_the_install_line(run_doctor, split_install):
    python, prefix, _ = split_install
    result = run_doctor("--python", python)
    assert result.code == 1 and not result.report["facts"]["import"]["ok"]
    assert result.kinds() == ["kernel-library-missing"], result.report["problems"]
    problem = result.problem("kernel-library-missing")
    assert (
        "libflash_attn_kernels.so" in problem["message"]
        and f"libflash-attn-kernels {VERSION} {PINNED}" in problem["message"]
    )
    assert any("cannot open shared object file" in d for d in problem["details"])
    command = pinned_install_command(result)
    assert command[:4] == ["conda", "install", "-p", str(prefix)]
    assert command[-3:] == ["-c", CHANNEL, f"libflash-attn-kernels =={VERSION} {PINNED}"]
    # The printed spec selects exactly the pinned build from a real channel holding several.
    channel = prefix.parent / "channel"
    for build in (
        PINNED,
        "cu129_sm80_90_100_120ptx_philox64_h0000000_0",
        PINNED.replace("philox64", "philox32"),
        PINNED.replace("_0", "_1"),
    ):
        local.assemble(local.PackageSpec("libflash-attn-kernels", VERSION, build, "linux-64"), channel)
    local.index(channel)
    solved = local.solve([channel.as_uri()], [command[-1]], "linux-64")
    assert str(solved["libflash-attn-kernels"].build) == PINNED


@pytest.mark.parametrize(
    ("installed", "named"),
    [
        ("cu129_sm80_90_100_120ptx_philox64_h0000000_0", "CUDA cu129, not cu130"),
        # Same CUDA and archs, built for torch <= 2.9's 24-byte PhiloxCudaState (variants/kernel-abi.yaml).
        ("cu130_sm80_90_100_120ptx_philox32_h1a2b3c4_0", "Philox layout philox32, not philox64"),
    ],
)
def test_another_kernel_build_is_a_mismatch_even_though_it_loads(run_doctor, split_install, installed, named):
    python, prefix, library = split_install
    install_library(prefix, library, installed)
    result = run_doctor("--python", python)
    assert result.report["facts"]["import"]["ok"], "the file name is the same, so the import succeeds"
    assert result.kinds() == ["kernel-library-mismatch"], result.report["problems"]
    problem = result.problem("kernel-library-mismatch")
    assert f"requires exactly libflash-attn-kernels {VERSION} {PINNED}" in problem["message"]
    assert installed in problem["message"] and named in problem["message"], problem["message"]
    assert pinned_install_command(result)[-1] == f"libflash-attn-kernels =={VERSION} {PINNED}"


def test_the_pinned_build_in_place_is_healthy(run_doctor, split_install):
    python, prefix, library = split_install
    install_library(prefix, library, PINNED)
    result = run_doctor("--python", python)
    assert not [k for k in result.kinds() if k.startswith("kernel-library")], result.report["problems"]
    assert result.kinds() == [], result.report["problems"]

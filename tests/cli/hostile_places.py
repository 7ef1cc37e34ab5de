"""The placeholders of the hostile-input tables (hostile_cases.yaml, hostile_classes.yaml): files, folders,
packages, channels, interpreters and servers, made once per session by the `places` fixture (conftest.py)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from faforge.channel.local import PackageSpec, assemble
from faforge.release.package import read_package

REPO = Path(__file__).resolve().parents[2]


def hostile_site(tmp: Path, rng: random.Random) -> Path:
    """What a hostile server serves: a wheel index of random bytes, one of names that only look like torch
    wheels, and a conda channel whose repodata is random bytes."""
    www = tmp / "www"
    (www / "random-index").mkdir(parents=True)
    (www / "random-index" / "index.html").write_bytes(rng.randbytes(8192))
    (www / "odd-index").mkdir()
    (www / "odd-index" / "index.html").write_text(
        "".join(
            f'<a href="{name}">{name}</a>\n'
            for name in [
                "torch-2.99.0+cu1-cp39-cp39-linux_x86_64.whl",
                "torch-2.99.0+cu-cp310-cp310-linux_x86_64.whl",
                "torch-2.99.0+cu130-cp3-cp3-linux_x86_64.whl",
                "torch-2.99.0+cu130-cp312-cp312-linux_x86_64.whl%00",
                "torch-" * 5000,
            ]
        )
    )
    for subdir in ("linux-64", "linux-aarch64", "noarch"):
        (www / "garbage-channel" / subdir).mkdir(parents=True)
        (www / "garbage-channel" / subdir / "repodata.json").write_bytes(rng.randbytes(4096))
    return www


def venv_with_wrong_metadata(tmp: Path) -> Path:
    """A Python whose flash-attn direct_url.json is valid JSON of the wrong type (doctor reads it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=120)
    python = tmp / "venv" / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    meta = Path(site) / "flash_attn-2.8.3.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3\n")
    (meta / "direct_url.json").write_text('{"url": 5}\n')
    return python


def make_places(tmp: Path, rng: random.Random, url: str) -> dict[str, str]:
    (tmp / "file.txt").write_text("hello\n")
    (tmp / "dir").mkdir()
    (tmp / "empty").write_bytes(b"")
    (tmp / "random.bin").write_bytes(rng.randbytes(4096))
    (tmp / "random.conda").write_bytes(rng.randbytes(4096))
    (tmp / "random.so").write_bytes(b"\x7fELF" + rng.randbytes(4092))
    (tmp / "wheels-in").mkdir()  # random bytes under a wheel's file name (publish's wheel branch, the pip world)
    (tmp / "wheels-in" / "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl").write_bytes(rng.randbytes(4096))
    (tmp / "loop").symlink_to(tmp / "loop")
    os.mkfifo(tmp / "fifo")
    (tmp / "list.json").write_text("[1, 2, 3]\n")
    (tmp / "wrong-types.json").write_text(json.dumps({"build": 5, "link": "x", "include": 7}))
    (tmp / "plan-int-cell.json").write_text(json.dumps({"include": [{"cell": 5, "part": "all"}]}))
    (tmp / "plan-no-link.json").write_text(
        json.dumps({"build": [{"include": [{"cell": "linux-64/py312/torch2.7/cu128/abi1"}]}]})
    )
    (tmp / "plan-part-int.json").write_text(json.dumps({"cell": "linux-64/py312/torch2.7/cu128/abi1", "part": 3}))
    (tmp / "measurements-wrong.yaml").write_text("schema: 1\nsamples: 5\nreuse: [1]\n")
    (tmp / "measurements-list.yaml").write_text("- 1\n- 2\n")
    read_only = tmp / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    # root writes through mode bits; sysfs refuses new entries to everyone
    ro = "/sys" if os.geteuid() == 0 else str(read_only)
    conda = assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            "py311_torch2_14_cu130_cxx11abi1_h1234567_0",
            "linux-64",
            depends=("python 3.11.*",),
            files={"share/flash-attn-standin.txt": "x"},
        ),
        tmp / "pkg",
    )
    conda_aarch64 = assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            "py311_torch2_14_cu130_cxx11abi1_h1234567_0",
            "linux-aarch64",
            depends=("python 3.11.*",),
            files={"share/flash-attn-standin.txt": "x"},
        ),
        tmp / "pkg",
    )
    manifest = tmp / "manifest-list"  # a manifest entry of valid JSON but the wrong type, for that package
    (manifest / read_package(conda).sha256).mkdir(parents=True)
    (manifest / read_package(conda).sha256 / "abi.json").write_text("[1, 2]\n")
    torch_lib = (
        tmp / "torch-lib"
    )  # passes check-abi's --against test (a torch library by name), so PATH is what gets checked
    torch_lib.mkdir()
    shutil.copy(sys.executable, torch_lib / "libc10.so")
    for name, content in [
        ("releases-random", rng.randbytes(2048)),
        ("releases-list", b"- 1\n- 2\n"),
        ("releases-wrong-types", b"schema: 1\nworlds: 5\nreleases: {a: 1}\n"),
    ]:
        project = tmp / name
        shutil.copytree(REPO / "variants", project / "variants")
        shutil.copytree(REPO / "recipes", project / "recipes")
        (project / "variants" / "releases.yaml").write_bytes(content)
    sets = torch_library_sets(tmp, rng)
    # {huge} is 131 KB: just under the kernel's limit on one argv string (MAX_ARG_STRLEN, 128 KiB); a child gets it too
    return {
        "tmp": str(tmp),
        "file": str(tmp / "file.txt"),
        "dir": str(tmp / "dir"),
        "empty": str(tmp / "empty"),
        "random": str(tmp / "random.bin"),
        "random_conda": str(tmp / "random.conda"),
        "random_so": str(tmp / "random.so"),
        "random_whl": str(tmp / "wheels-in" / "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"),
        "loop": str(tmp / "loop"),
        "fifo": str(tmp / "fifo"),
        "ro": ro,
        "missing": str(tmp / "no" / "such"),
        "full": "/dev/full",
        "long": str(tmp / ("x" * 300)),
        "huge": "A" * 131_000,
        "unicode": "ünïcødé-✓-名前",
        "list_json": str(tmp / "list.json"),
        "wrong_json": str(tmp / "wrong-types.json"),
        "plan_int_cell": str(tmp / "plan-int-cell.json"),
        "plan_no_link": str(tmp / "plan-no-link.json"),
        "plan_part_int": str(tmp / "plan-part-int.json"),
        "manifest_list": str(manifest),
        "measurements_wrong": str(tmp / "measurements-wrong.yaml"),
        "measurements_list": str(tmp / "measurements-list.yaml"),
        "conda": str(conda),
        "conda_aarch64": str(conda_aarch64),
        "torch_lib": str(torch_lib),
        "www": url.rstrip("/"),
        "bad_direct_url": str(venv_with_wrong_metadata(tmp)),
        **{
            name.replace("-", "_"): str(tmp / name)
            for name in ("releases-random", "releases-list", "releases-wrong-types")
        },
        **sets,
    }


# ---------------------------------------------------------------- torch.ops library sets (check-abi)
SETS_FILES = {  # variants/torch-library-sets.yaml made hostile, under a FAFORGE_ROOT of its own
    "sets-random": None,
    "sets-list": b"- 1\n- 2\n",
    "sets-wrong-types": b"schema: 1\nsets: 5\n",
    "sets-bad-regex": b"schema: 1\nsets:\n- {package: p, loader: l, file: 'x(', no_member: import-error}\n",
    "sets-no-groups": b"schema: 1\nsets:\n- {package: p, loader: l, file: 'libx.so', no_member: import-error}\n",
    "sets-bad-devices": b"schema: 1\nsets:\n- {package: p, loader: l, file: "
    b"'(?P<major>\\d)(?P<minor>\\d)(?P<device>a)', no_member: import-error, devices: "
    b"{cpu: 5}}\n",
}


def torch_library_sets(tmp: Path, rng: random.Random) -> dict[str, str]:
    """{sets_*}: a project root whose rules file is hostile; {ops_set_corrupt}: a package folder whose
    per-torch set member for torch 2.8 is random bytes behind an ELF magic; {torch_lib_28}: a torch/lib that
    passes --against, with a version.py saying 2.8.0 (CPU)."""
    places = {}
    for name, content in SETS_FILES.items():
        (tmp / name / "variants").mkdir(parents=True)
        for kept in ("releases.yaml", "torch_symbols.yaml"):  # check-abi reads both before the rules file
            shutil.copy(REPO / "variants" / kept, tmp / name / "variants" / kept)
        (tmp / name / "variants" / "torch-library-sets.yaml").write_bytes(
            rng.randbytes(2048) if content is None else content
        )
        places[name.replace("-", "_")] = str(tmp / name)
    corrupt = tmp / "ops-set-corrupt" / "torch_c_dlpack_ext"
    corrupt.mkdir(parents=True)
    for member in ("torch27-cpu", "torch28-cpu"):
        (corrupt / f"libtorch_c_dlpack_addon_{member}.so").write_bytes(b"\x7fELF" + rng.randbytes(4092))
    torch_lib = tmp / "torch-28" / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    shutil.copy(sys.executable, torch_lib / "libc10.so")
    (torch_lib.parent / "version.py").write_text("__version__ = '2.8.0+cpu'\ncuda: Optional[str] = None\n")
    return {**places, "ops_set_corrupt": str(corrupt.parent), "torch_lib_28": str(torch_lib)}

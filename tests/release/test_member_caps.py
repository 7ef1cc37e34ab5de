"""Every archive member is read and extracted through faforge.membercaps: a member declaring more than the
cap, or inflating like a bomb, is refused (exit 2, naming the file and the member) before anything of it
is written, for wheels (zip) and .conda packages (zstd tar) alike. Real `faforge` processes; what reached
the disk is checked in the process's own TMPDIR."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
import zstandard

from faforge import membercaps
from faforge.errors import FaforgeError
from faforge.pipwheel.facts import read_wheel
from faforge.release.package import read_package
from faforge.wheelfetch import FetchError, RemoteZip, list_files
from tests.cli.hostile_class_places import BUILD, INDEX, NAME, VERSION
from tests.support import hostile_wheels as hw
from tests.support import tiny_wheels as tw


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return tw.build_wheel(tw.kernel(), tmp_path_factory.mktemp("good"))


def run(*args, tmp: Path):
    """`faforge ARGS` with its own TMPDIR (tmp/tmpdir), so what it unpacked can be looked for afterwards."""
    tmpdir = tmp / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "faforge", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )


def written_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_real_members_are_within_the_ratio_rule():
    """The numbers the rule was set from (membercaps' docstring, README "Caps and deadlines")."""
    assert membercaps.ratio_problem(220_900_000, 62_100_000) is None  # flash-attn's kernel library, 3.6x
    assert (
        membercaps.ratio_problem(2_100_329, 2_100_329 // 57) is None
    )  # the most compressible real member of 1 MiB or more
    assert membercaps.ratio_problem(577_633, 577_633 // 234) is None  # below the minimum size: any ratio
    assert membercaps.ratio_problem(64 << 20, (64 << 20) // 1000)  # a bomb


@pytest.mark.parametrize("make", [hw.bomb_wheel, hw.declared_huge_wheel], ids=["bomb", "declared-huge"])
def test_a_wheel_with_a_hostile_member_is_refused_before_anything_is_written(tmp_path, good, make):
    wheel = make(good, tmp_path / "in")
    with pytest.raises(FaforgeError) as caught:
        read_wheel(wheel)
    assert caught.value.exit_code == 2 and "pkg_" in caught.value.message, caught.value.line()
    result = run("verify", wheel, "--manifest", tmp_path / "verification", tmp=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert str(wheel) in result.stderr and ("decompression bomb" in result.stderr or "declares" in result.stderr), (
        result.stderr
    )
    assert written_bytes(tmp_path / "tmpdir") < (1 << 20), "the member reached the disk"
    assert not list((tmp_path / "verification").rglob("*.json")), "a gate was recorded for it"


@pytest.mark.parametrize("kind", ["bomb", "declared-huge"])
def test_a_conda_package_with_a_hostile_member_is_refused_before_anything_is_written(tmp_path, kind):
    filename = f"{NAME}-{VERSION}-{BUILD}.conda"
    if kind == "bomb":
        payload = hw.tar_member("share/zeros.bin", hw.BOMB_BYTES) + bytes(1024)
    else:
        payload = hw.tar_member(
            "share/huge.bin", hw.HUGE_BYTES, data=b"x" * 4096
        )  # cut short: the header alone is judged
    package = hw.conda_with_payload(tmp_path / "in" / filename, INDEX, payload)
    with pytest.raises(FaforgeError) as caught:
        read_package(package)
    assert caught.value.exit_code == 2 and "share/" in caught.value.message, caught.value.line()
    result = run("verify", package, "--manifest", tmp_path / "verification", tmp=tmp_path)
    assert result.returncode == 2 and str(package) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert written_bytes(tmp_path / "tmpdir") < (1 << 20), "the member reached the disk"


def test_a_real_size_member_of_ordinary_ratio_passes(tmp_path, good):
    """4 MiB of random-ish text (a few x) is no bomb: the wheel reads and its members extract."""
    data = b"".join(f"{i:08x} some library-like text {i * 7919 % 10007}\n".encode() for i in range(100_000))
    wheel = hw.with_member(good, tmp_path / "in", "pkg_text/table.txt", data)
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo("pkg_text/table.txt")
    assert info.file_size >= membercaps.RATIO_MIN_BYTES and info.file_size / info.compress_size < membercaps.RATIO_CAP
    assert read_wheel(wheel).name == "libflash-attn-kernels"


# Real PyPI wheels whose members the rule was measured on (their central directories, read by HTTP range):
# torch's libraries, NVIDIA's largest (libcublasLt.so.13, 542 MB) and pysam's libbz2.so (57x, the most
# compressible real member of 1 MiB or more found among 79 wheels).
REAL_WHEELS = [
    ("torch", "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"),
    ("nvidia-cublas", "nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl"),
    ("pysam", "pysam-0.24.1-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"),
]


@pytest.mark.slow  # reads PyPI (each wheel's central directory by HTTP range)
@pytest.mark.parametrize("project,wheel", REAL_WHEELS, ids=[p for p, _ in REAL_WHEELS])
def test_every_member_of_real_wheels_is_within_the_caps(project, wheel):
    try:
        remote = next(f for f in list_files(project) if f.filename == wheel)
        members = RemoteZip(remote.url, remote.size).members.values()
    except (FetchError, StopIteration) as exc:
        pytest.skip(f"PyPI's {wheel} is not reachable ({exc})")
    total = 0
    for member in members:
        total += member.size
        assert not membercaps.size_problem(member.size, total), member.name
        assert not membercaps.ratio_problem(member.size, member.compressed_size), member.name


@pytest.mark.slow  # compresses 15 MB of libraries with zstd -19 (5 s of CPU)
def test_real_libraries_in_a_conda_payload_are_within_the_caps(tmp_path):
    """Two real shared libraries of this venv (PyYAML's and zstandard's, 2.7 and 12 MB), tarred and compressed as
    conda-build does (zstd -19): read_package's ratio rule, which counts each member's compressed bytes as
    the stream goes by, passes them."""
    libraries = sorted(
        (
            p
            for m in (zstandard, yaml)
            for p in Path(m.__file__).parent.glob("*.so")
            if p.stat().st_size >= membercaps.RATIO_MIN_BYTES
        ),
        key=lambda p: p.stat().st_size,
    )[:2]
    assert len(libraries) == 2
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for library in libraries:
            tar.add(library, f"lib/python3.11/site-packages/{library.parent.name}/{library.name}")
    package = hw.conda_with_payload(tmp_path / f"{NAME}-{VERSION}-{BUILD}.conda", INDEX, raw.getvalue())
    assert read_package(package).name == NAME

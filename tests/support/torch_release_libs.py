"""The libraries a stable-ABI binary loads, from each real torch release's PyPI wheel.

A stable-ABI binary links libtorch_cpu.so (the stable C functions) and libc10.so only, so per release
only those two and torch/version.py are read, by HTTP range requests (~120 MB compressed per release,
libtorch_cpu.so nearly all of it), cached in the test cache's torch-libs/ beside the libc10.so files
tests/abi/test_torch_abi_wheels.py reads; plus the CUDA runtime libtorch_cpu.so of a CUDA 12 torch
needs, from the nvidia-cuda-runtime wheel the torch's METADATA pins, at the path pip gives it
(nvidia/cuda_runtime/lib beside torch/). Each member's CRC-32 is checked on read (faforge.wheelfetch).
"""

from __future__ import annotations

import re
from pathlib import Path

from faforge.versions import vtuple
from faforge.wheelfetch import RemoteZip, fetch_member, save
from tests.support.cache import cache_dir
from tests.support.pypi import pypi_listing
from tests.support.tiers import slow_work

LIBS = cache_dir("torch-libs")
MEMBERS = ("torch/version.py", "torch/lib/libc10.so", "torch/lib/libtorch_cpu.so")
_X86_64 = re.compile(r"torch-(?P<version>\d+\.\d+\.\d+)-cp311-cp311-manylinux_2_28_x86_64\.whl")
_WHEEL_VERSION = re.compile(r"torch-(?P<version>\d+\.\d+\.\d+)-")


def release_wheel(version: str, machine: str = "x86_64") -> str:
    return f"torch-{version}-cp311-cp311-manylinux_2_28_{machine}.whl"


def release_torch_lib(version: str, machine: str = "x86_64") -> Path:
    """TORCH/lib of release `version` (e.g. '2.9.1') for `machine`, holding libc10.so and libtorch_cpu.so."""
    slow_work("a torch release's libraries from PyPI (tests/support/torch_release_libs.py)")
    wheel = release_wheel(version, machine)
    folder = LIBS / wheel
    done = folder / ".stable-abi-libs"  # written last: the CUDA runtime has no fixed name to test for
    if not done.is_file():
        remote = pypi_listing("torch")[wheel]
        for member in MEMBERS:
            fetch_member(remote, member, LIBS)
        _fetch_cuda_runtime(remote, folder, machine)
        done.write_text("\n".join(MEMBERS) + "\n")
    return folder / "torch" / "lib"


def release_torch_libraries(version: str, machine: str = "aarch64") -> Path:
    """TORCH/lib of release `version` holding every shared library the wheel ships (torch/lib/*.so*, and the
    torch.libs/ they load from beside it), plus torch/version.py, each read by an HTTP range request: what a
    real loader needs to load an extension that links libtorch and libtorch_python. For a CPU wheel (PyPI's
    aarch64 torch up to 2.10, about 100 MB compressed); a CUDA wheel's libtorch_cuda.so is not worth reading."""
    wheel = release_wheel(version, machine)
    folder = LIBS / wheel
    done = folder / ".all-libs"
    if not done.is_file():
        remote = pypi_listing("torch")[wheel]
        zipped = RemoteZip(remote.url, remote.size)
        members = [
            m
            for m in zipped.members
            if m == "torch/version.py" or re.fullmatch(r"torch/lib/[^/]+\.so[.\d]*|torch\.libs/[^/]+\.so[.\d]*", m)
        ]
        for member in members:
            if not (folder / member).is_file():
                save(folder / member, zipped.read(member))
        done.write_text("\n".join(members) + "\n")
    return folder / "torch" / "lib"


def _fetch_cuda_runtime(torch_wheel, site: Path, machine: str) -> None:
    metadata = fetch_member(
        torch_wheel, f"torch-{_WHEEL_VERSION.match(torch_wheel.filename)['version']}.dist-info/METADATA", LIBS
    )
    pin = re.search(r"^Requires-Dist: (nvidia-cuda-runtime(?:-cu\d+)?)==([\d.]+)", metadata.read_text(), re.MULTILINE)
    if pin is None:  # a CPU build, or a torch that bundles its CUDA runtime
        return
    project, version = pin.groups()
    wheels = [
        f for name, f in pypi_listing(project).items() if f"-{version}-" in name and name.endswith(f"{machine}.whl")
    ]
    runtime = RemoteZip(wheels[0].url, wheels[0].size)
    for member in runtime.members:
        if re.fullmatch(r"nvidia/cu(?:da_runtime|\d+)/lib/libcudart\.so\.\d+", member):
            target = site / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(runtime.read(member))


def pypi_releases_from(floor: tuple[int, int]) -> list[str]:
    """The newest patch of every torch minor from `floor` on that PyPI lists as a cp311 x86_64 wheel."""
    slow_work("PyPI's torch releases (tests/support/torch_release_libs.py)")
    newest: dict[tuple[int, ...], str] = {}
    for name in pypi_listing("torch"):
        match = _X86_64.fullmatch(name)
        if match and vtuple(match["version"])[:2] >= floor:
            minor = vtuple(match["version"])[:2]
            if minor not in newest or vtuple(match["version"]) > vtuple(newest[minor]):
                newest[minor] = match["version"]
    return [newest[m] for m in sorted(newest)]

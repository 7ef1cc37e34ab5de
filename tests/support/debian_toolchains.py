"""Toolchains from Debian's archive (CUDA 12.4 first), unpacked into the test cache, never installed.

This machine's only full CUDA compiler is 13.0, and PyPI's nvidia-cuda-nvcc-cu12 wheels carry no nvcc,
cicc or fatbinary; Debian trixie's non-free nvidia-cuda-toolkit is a complete 12.4 (the legacy cell's). apt is
run with a private configuration (its own sources.list, state, cache and lists under the cache folder;
every Dir:: path apt would read from /etc/apt is overridden on the command line, which apt reads last),
so the machine's sources and package state are never read or changed. `apt-get download` checks each
.deb against the signed index; `dpkg-deb --fsys-tarfile | tar -x` unpacks it without dpkg's database.
The packages and versions are data: debian_toolchains.yaml beside this file.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from faforge.datafile import load_yaml
from tests.support.cache import cache_dir
from tests.support.tiers import slow_work

DATA = Path(__file__).with_name("debian_toolchains.yaml")
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# Debian's bin/nvcc.profile links to /etc/nvcc.profile, whose paths are absolute (/usr/lib/...). This
# one is relative to nvcc's own folder (_HERE_ = ROOT/usr/lib/nvidia-cuda-toolkit/bin). PATH puts the
# unpacked ROOT/usr/bin (ptxas, fatbinary, nvlink, cudafe++) first: nvcc finds those through PATH, and
# /usr/local/bin here holds CUDA 13.0's, which nvcc 12.4 otherwise runs without a word.
NVCC_PROFILE = """\
NVVMIR_LIBRARY_DIR = $(_HERE_)/../libdevice
PATH += $(_HERE_):$(_HERE_)/../../../bin:
INCLUDES += "-I$(_HERE_)/../../../include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(_HERE_)/../../x86_64-linux-gnu/stubs" "-L$(_HERE_)/../../x86_64-linux-gnu"
"""


class DebianUnavailable(Exception):
    """Not cached and Debian's archive cannot be reached (or apt fails); tests skip with this text."""


@dataclass(frozen=True)
class Toolchain:
    name: str
    cache: str
    source: str
    architectures: tuple[str, ...]
    packages: dict[str, dict]  # name[:arch] -> {"version": ..., "members": [...] (optional)}

    @property
    def folder(self) -> Path:
        return cache_dir(self.cache)


@cache
def toolchains() -> dict[str, Toolchain]:
    data = load_yaml(DATA)
    return {
        name: Toolchain(name, entry["cache"], entry["source"], tuple(entry["architectures"]), entry["packages"])
        for name, entry in data.items()
    }


def apt_options(apt_root: Path, architectures: tuple[str, ...]) -> list[str]:
    """`-o` arguments giving apt a configuration of its own under apt_root (see write_apt_root)."""
    settings = {
        "Dir::Etc": apt_root / "etc",
        "Dir::Etc::sourcelist": apt_root / "etc/sources.list",
        "Dir::Etc::sourceparts": apt_root / "etc/sources.list.d",
        "Dir::Etc::preferences": apt_root / "etc/preferences",
        "Dir::Etc::preferencesparts": apt_root / "etc/preferences.d",
        "Dir::Etc::trusted": KEYRING,
        "Dir::Etc::trustedparts": apt_root / "etc/trusted.gpg.d",
        "Dir::State": apt_root / "state",
        "Dir::State::lists": apt_root / "state/lists",
        "Dir::State::status": apt_root / "state/status",
        "Dir::Cache": apt_root / "cache",
        "Dir::Cache::archives": apt_root / "cache/archives",
        "APT::Architecture": architectures[0],
        "APT::Architectures": ",".join(architectures),
        "APT::Sandbox::User": "root",  # the _apt user cannot enter a cache under /root
        "Acquire::Languages": "none",
    }
    return [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]


def write_apt_root(apt_root: Path, source: str) -> None:
    """The folders and files apt_options names: one sources.list line, empty parts folders, no packages installed."""
    for sub in (
        "etc/sources.list.d",
        "etc/preferences.d",
        "etc/trusted.gpg.d",
        "state/lists/partial",
        "cache/archives/partial",
    ):
        (apt_root / sub).mkdir(parents=True, exist_ok=True)
    (apt_root / "etc/sources.list").write_text(source + "\n")
    (apt_root / "state/status").touch()


def _apt(tool: str, toolchain: Toolchain, *args: str, cwd: Path | None = None) -> str:
    command = [tool, *apt_options(toolchain.folder / "apt", toolchain.architectures), *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise DebianUnavailable(
            f"`{tool} ... {' '.join(args)}` for {toolchain.name} failed (exit {done.returncode}): "
            f"{done.stderr.strip()[-600:]}"
        )
    return done.stdout


def download(toolchain: Toolchain) -> list[Path]:
    """Every pinned .deb of `toolchain` in its debs/ folder (apt checks each against the signed index)."""
    debs = toolchain.folder / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    write_apt_root(toolchain.folder / "apt", toolchain.source)
    _apt("apt-get", toolchain, "update")
    wanted = [f"{name}={entry['version']}" for name, entry in toolchain.packages.items()]
    _apt("apt-get", toolchain, "download", *wanted, cwd=debs)
    return sorted(debs.glob("*.deb"))


def _deb_of(debs: Path, name: str, version: str) -> Path:
    package, _, arch = name.partition(":")
    found = sorted(debs.glob(f"{package}_{version.replace(':', '%3a')}_*.deb"))
    found = [deb for deb in found if not arch or deb.name.endswith(f"_{arch}.deb")]
    if len(found) != 1:
        raise DebianUnavailable(f"{debs}: expected one .deb of {name} {version}, found {[d.name for d in found]}")
    return found[0]


def unpack(deb: Path, root: Path, members: list[str] | None = None) -> None:
    """deb's files (or only `members`) under root, as dpkg -x would place them."""
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    extract = subprocess.run(
        ["tar", "-x", "-C", str(root), *(members or [])], stdin=tar.stdout, capture_output=True, text=True
    )
    tar.stdout.close()
    if tar.wait() != 0 or extract.returncode != 0:
        raise DebianUnavailable(f"cannot unpack {deb}: {extract.stderr.strip()[-400:]}")


def ensure_unpacked(name: str, log=lambda line: None) -> Path:
    """The unpacked root of toolchain `name`, downloading and unpacking on first use (locked, then cached).

    FETCH.json beside it records the packages, their download size and the seconds each step took."""
    slow_work("a Debian toolchain download (tests/support/debian_toolchains.py)")
    toolchain = toolchains()[name]
    root, done = toolchain.folder / "root", toolchain.folder / "FETCH.json"
    if done.is_file():
        return root
    toolchain.folder.mkdir(parents=True, exist_ok=True)
    with open(toolchain.folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return root
        started = time.monotonic()
        download(toolchain)
        downloaded = time.monotonic()
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        debs = []
        for package, entry in toolchain.packages.items():
            deb = _deb_of(toolchain.folder / "debs", package, entry["version"])
            log(f"+ unpack {deb.name}")
            unpack(deb, root, entry.get("members"))
            debs.append({"file": deb.name, "bytes": deb.stat().st_size})
        if name in FINISH:
            FINISH[name](root)
        record = {
            "packages": debs,
            "download_bytes": sum(d["bytes"] for d in debs),
            "download_seconds": round(downloaded - started, 1),
            "unpack_seconds": round(time.monotonic() - downloaded, 1),
            "unpacked_bytes": sum(p.lstat().st_size for p in root.rglob("*")),
        }
        done.write_text(json.dumps(record, indent=1) + "\n")
    return root


def _finish_cuda(root: Path) -> None:
    profile = root / "usr/lib/nvidia-cuda-toolkit/bin/nvcc.profile"
    profile.unlink(missing_ok=True)
    profile.write_text(NVCC_PROFILE)


# What an unpacked root needs before its tools run as they would installed, per toolchain.
FINISH = {"cuda-12.4": _finish_cuda}


@dataclass(frozen=True)
class DebianCuda:
    root: Path

    @property
    def nvcc(self) -> Path:
        """The real nvcc (usr/bin/nvcc is Debian's wrapper, which execs /usr/lib/... of the machine)."""
        return self.root / "usr/lib/nvidia-cuda-toolkit/bin/nvcc"

    @property
    def bin(self) -> Path:
        """ptxas, fatbinary, nvlink, cudafe++ (nvcc finds them through the PATH its profile sets)."""
        return self.root / "usr/bin"

    @property
    def include(self) -> Path:
        return self.root / "usr/include"


def debian_cuda_12_4(log=lambda line: None) -> DebianCuda:
    """Debian's CUDA 12.4 toolkit, unpacked; raises DebianUnavailable when neither cached nor downloadable."""
    return DebianCuda(ensure_unpacked("cuda-12.4", log))


# Where the machine's aarch64 cross toolchain keeps libc6 and libstdc++ for arm64 (libc6-arm64-cross,
# installed with g++-aarch64-linux-gnu, tests/system-packages.txt): qemu's -L sysroot.
CROSS_SYSROOT = Path("/usr/aarch64-linux-gnu")


def arm64_python(log=lambda line: None) -> list[str]:
    """The command that runs Debian's arm64 python3.11 here, under qemu-aarch64-static (binfmt_misc is not
    set up on these machines, so nothing runs an aarch64 binary by itself); append the Python arguments."""
    if not (CROSS_SYSROOT / "lib/ld-linux-aarch64.so.1").exists():
        raise DebianUnavailable(f"{CROSS_SYSROOT} has no ld-linux-aarch64.so.1: install g++-aarch64-linux-gnu")
    qemu = ensure_unpacked("qemu-user-static", log) / "usr/bin/qemu-aarch64-static"
    python = ensure_unpacked("python-3.11-arm64", log) / "usr"
    libs = f"{python}/lib/aarch64-linux-gnu:{python.parent}/lib/aarch64-linux-gnu"
    return [
        str(qemu),
        "-L",
        str(CROSS_SYSROOT),
        "-E",
        f"LD_LIBRARY_PATH={libs}",
        "-E",
        f"PYTHONHOME={python}",
        str(python / "bin/python3.11"),
    ]


@dataclass(frozen=True)
class Arm64Python:
    """Debian's arm64 python3.11 as a plain aarch64 prefix: run as `qemu -L sysroot python`, nothing else set."""

    qemu: Path
    sysroot: Path
    python: Path

    @property
    def include(self) -> Path:
        return self.python.parents[1] / "include/python3.11"


def arm64_plain_python(log=lambda line: None) -> Arm64Python:
    """Debian's unpacked arm64 python3.11 and a sysroot for qemu's -L: one lib/ folder of links to the cross libc
    (CROSS_SYSROOT) and to the unpacked root's multiarch libraries (libexpat, zlib, libffi, libpython), where
    the emulated loader looks first, so the wrapper faforge.abi.emulator builds needs no LD_LIBRARY_PATH or
    PYTHONHOME. Python finds its own prefix (ROOT/usr) from the executable's location."""
    if not (CROSS_SYSROOT / "lib/ld-linux-aarch64.so.1").exists():
        raise DebianUnavailable(f"{CROSS_SYSROOT} has no ld-linux-aarch64.so.1: install g++-aarch64-linux-gnu")
    qemu = ensure_unpacked("qemu-user-static", log) / "usr/bin/qemu-aarch64-static"
    root = ensure_unpacked("python-3.11-arm64", log)
    sysroot = root.parent / "sysroot"
    if not (sysroot / "lib/ld-linux-aarch64.so.1").exists():
        staging = root.parent / f"sysroot.{os.getpid()}"
        (staging / "lib").mkdir(parents=True)
        for folder in (CROSS_SYSROOT / "lib", root / "lib/aarch64-linux-gnu", root / "usr/lib/aarch64-linux-gnu"):
            for library in folder.iterdir():
                link = staging / "lib" / library.name
                if not link.exists() and not link.is_symlink():
                    link.symlink_to(library)
        try:
            staging.rename(sysroot)
        except OSError:  # another test made it first
            shutil.rmtree(staging)
    return Arm64Python(qemu, sysroot, root / "usr/bin/python3.11")


def amd64_python_3_13(log=lambda line: None) -> list[str]:
    """The command that runs Debian trixie's python3.13 here, under its own glibc; append the Python arguments."""
    usr = ensure_unpacked("python-3.13-amd64", log) / "usr"
    libs = usr / "lib/x86_64-linux-gnu"
    # Run through the loader, /proc/self/exe is ld.so, so Python is told its prefix.
    return [
        "env",
        f"PYTHONHOME={usr}",
        str(libs / "ld-linux-x86-64.so.2"),
        "--library-path",
        str(libs),
        str(usr / "bin/python3.13"),
    ]

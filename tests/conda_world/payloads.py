"""The files inside the conda world's stand-in packages, made from real artifacts on this machine.

Each builder fills a staging folder laid out like the conda package it stands in for, and returns
what write_conda needs beside it: the text files holding the build prefix (rewritten at install
time) and, for noarch python packages, link.json. Every way a payload differs from the real
package is listed in tests/conda_world/world.yaml next to the package.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import stat
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from faforge import wheelfetch
from tests.conda_world.archive import PLACEHOLDER

# Requirements a conda build of torch does not declare: conda installs CUDA, cuDNN, NCCL and
# triton as conda packages, so pip metadata naming their PyPI wheels would fail `pip check`.
PYPI_ONLY_TORCH_REQUIREMENT = re.compile(r"^Requires-Dist: (nvidia-|cuda-|triton)", re.IGNORECASE)


@dataclass
class Payload:
    root: Path
    text_prefix_files: set[str] = field(default_factory=set)
    link: dict | None = None


def _patchelf(*args: str) -> str:
    return subprocess.run(["patchelf", *args], capture_output=True, text=True, check=True).stdout.strip()


def is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def is_linked_elf(path: Path) -> bool:
    """An executable or shared object (ET_EXEC/ET_DYN), the ELF files that have a RUNPATH."""
    if not is_elf(path):
        return False
    with open(path, "rb") as fh:
        header = fh.read(18)
    return int.from_bytes(header[16:18], "little") in (2, 3)


def _mark_prefix_text(root: Path, old_prefix: str) -> set[str]:
    """Replace old_prefix by the placeholder in every text file under root; return their paths."""
    marked = set()
    needle = old_prefix.encode()
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file() or is_elf(path):
            continue
        data = path.read_bytes()
        if needle not in data or b"\x00" in data:
            continue
        path.write_bytes(data.replace(needle, PLACEHOLDER.encode()))
        marked.add(path.relative_to(root).as_posix())
    return marked


def cpython(source_prefix: Path, version: str, stage: Path) -> Payload:
    """A CPython built here with --enable-shared (pyenv), relocated the way conda's python is:
    RUNPATHs become $ORIGIN-relative, and the build prefix in _sysconfigdata, the Makefile and
    scripts becomes the placeholder the installer rewrites to the environment's prefix."""
    lib = f"lib/python{version}"
    skip = {
        f"{lib}/test",
        f"{lib}/idlelib",
        f"{lib}/tkinter",
        f"{lib}/turtledemo",
        f"{lib}/site-packages",
        f"{lib}/ensurepip",
    }
    for sub in ("bin", "lib", "include"):
        for path in sorted((source_prefix / sub).rglob("*")):
            rel = path.relative_to(source_prefix).as_posix()
            if any(rel == s or rel.startswith(s + "/") for s in skip) or "__pycache__" in rel:
                continue
            if sub == "bin" and not (path.name.startswith("python") or path.name.startswith("pydoc")):
                continue
            if sub == "lib" and not (
                rel.startswith(f"{lib}/") or path.name.startswith("libpython") or rel.startswith("lib/pkgconfig")
            ):
                continue
            target = stage / rel
            if path.is_symlink():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(os.readlink(path))
            elif path.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    (stage / lib / "site-packages").mkdir(parents=True, exist_ok=True)
    (stage / lib / "site-packages" / "README.txt").write_text(
        "This directory exists so that 3rd party packages can be installed here.\n"
    )
    old = str(source_prefix)
    for path in stage.rglob("*"):
        if not is_linked_elf(path):
            continue
        runpath = _patchelf("--print-rpath", str(path))
        if old in runpath:
            depth = len(path.parent.relative_to(stage).parts)
            _patchelf("--set-rpath", "$ORIGIN/" + "/".join([".."] * depth) + "/lib", str(path))
    return Payload(stage, _mark_prefix_text(stage, old))


def _entry_points(dist_info: Path) -> list[str]:
    ep = dist_info / "entry_points.txt"
    if not ep.is_file():
        return []
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str
    parser.read_string(ep.read_text())
    return [
        f"{name.strip()} = {target.strip()}"
        for name, target in (parser["console_scripts"].items() if parser.has_section("console_scripts") else [])
    ]


def _unpack_wheel(wheel: Path, site: Path, scripts: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
        # this wheel's own dist-info: several wheels may share one site-packages (python_wheels)
        (metadata,) = (n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
    dist_info = site / metadata.split("/")[0]
    for data in site.glob("*.data"):
        for kind in data.iterdir():
            if kind.name in ("purelib", "platlib"):
                shutil.copytree(kind, site, dirs_exist_ok=True)
            elif kind.name == "scripts":
                shutil.copytree(kind, scripts, dirs_exist_ok=True)
        shutil.rmtree(data)
    (dist_info / "INSTALLER").write_text("conda\n")
    (dist_info / "RECORD").unlink(missing_ok=True)  # conda's own paths.json is the record
    return dist_info


def noarch_python_wheel(wheel: Path, stage: Path) -> Payload:
    """A pure-Python wheel as a noarch: python package (site-packages/ + link.json entry points)."""
    dist_info = _unpack_wheel(wheel, stage / "site-packages", stage / "python-scripts")
    link = {"noarch": {"type": "python", "entry_points": _entry_points(dist_info)}, "package_metadata_version": 1}
    return Payload(stage, set(), link)


def _console_scripts(dist_info: Path, bin_dir: Path, python_version: str) -> set[str]:
    written = set()
    for spec in _entry_points(dist_info):
        name, target = (s.strip() for s in spec.split("="))
        module, func = target.split(":")
        script = bin_dir / name
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(
            f"#!{PLACEHOLDER}/bin/python{python_version}\nimport sys\nfrom {module} import {func.split('.')[0]}\n"
            f"if __name__ == '__main__':\n    sys.exit({func}())\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        written.add(f"bin/{name}")
    return written


def python_wheel(wheels: list[Path], stage: Path, python_version: str) -> Payload:
    """Wheels with compiled code as one python-version-specific package (lib/pythonX.Y/site-packages): one wheel,
    or several that conda-forge ships as one package (nvidia-cutlass-dsl: PyPI's meta wheel, whose .pth puts its
    dsl_packages/ on sys.path, and the libs wheels). Every file of each wheel is kept, .pth files included."""
    site = stage / f"lib/python{python_version}/site-packages"
    scripts = set()
    for wheel in wheels:
        scripts |= _console_scripts(_unpack_wheel(wheel, site, stage / "bin"), stage / "bin", python_version)
    return Payload(stage, scripts)


# The one torch library conda-forge's pytorch (not libtorch) ships: it needs python.
TORCH_PYTHON_LIBRARY = "libtorch_python.so"


def _relink_torch_library(path: Path, prefix_lib: Path) -> None:
    """Point a torch ELF's RUNPATH at the environment's lib/ instead of pip's nvidia/*/lib."""
    runpath = _patchelf("--print-rpath", str(path))
    kept = [
        entry
        for entry in runpath.split(":")
        if entry and "nvidia" not in entry and "cuda" not in entry and entry != "$ORIGIN"
    ]
    to_lib = os.path.relpath(prefix_lib, path.parent)
    _patchelf("--set-rpath", ":".join(["$ORIGIN" if to_lib == "." else f"$ORIGIN/{to_lib}", *kept]), str(path))


def torch_wheel(wheel: Path, stage: Path, python_version: str) -> Payload:
    """PyPI's torch as conda-forge's `pytorch`: the python package, with torch/lib/* symlinks into the
    environment's lib/ where `libtorch` keeps the libraries (conda-forge's build.sh does the same),
    libtorch_python.so itself in lib/, RUNPATHs at lib/ instead of pip's nvidia/*/lib, and METADATA
    that lists what a conda build's does (no nvidia-*/cuda-*/triton wheels)."""
    payload = python_wheel([wheel], stage, python_version)
    site = stage / f"lib/python{python_version}/site-packages"
    _drop_pypi_only_requirements(site)
    prefix_lib = stage / "lib"
    prefix_lib.mkdir(exist_ok=True)
    torch_lib = site / "torch" / "lib"
    for path in sorted(torch_lib.iterdir()):
        if not path.name.endswith(".so") and ".so." not in path.name:
            continue
        if path.name == TORCH_PYTHON_LIBRARY:
            shutil.move(str(path), prefix_lib / path.name)
            _relink_torch_library(prefix_lib / path.name, prefix_lib)
        else:
            path.unlink()
        path.symlink_to(os.path.relpath(prefix_lib / path.name, torch_lib))
    for path in (site / "torch").rglob("*.so*"):
        if is_linked_elf(path) and not path.is_symlink():
            _relink_torch_library(path, prefix_lib)
    return payload


def _drop_pypi_only_requirements(site: Path) -> None:
    metadata = next(site.glob("torch-*.dist-info")) / "METADATA"
    metadata.write_text(
        "".join(
            line
            for line in metadata.read_text().splitlines(keepends=True)
            if not PYPI_ONLY_TORCH_REQUIREMENT.match(line)
        )
    )


def legacy_torch_wheel(wheel: Path, stage: Path, python_version: str) -> Payload:
    """PyPI's torch as the legacy pytorch channel's `pytorch`: one package whose libraries stay in
    site-packages/torch/lib (where that channel's packages keep them), each RUNPATH its own folder and
    the environment's lib/ (the nvidia channel's CUDA libraries) instead of pip's nvidia/*/lib."""
    payload = python_wheel([wheel], stage, python_version)
    site = stage / f"lib/python{python_version}/site-packages"
    _drop_pypi_only_requirements(site)
    for path in (site / "torch").rglob("*.so*"):
        if is_linked_elf(path) and not path.is_symlink():
            kept = [e for e in _patchelf("--print-rpath", str(path)).split(":") if e and "nvidia" not in e]
            to_lib = "$ORIGIN/" + os.path.relpath(stage / "lib", path.parent)
            _patchelf("--set-rpath", ":".join([*kept, to_lib]), str(path))
    return payload


def libtorch_wheel(wheel: Path, stage: Path) -> Payload:
    """PyPI's torch as conda-forge's `libtorch`: torch's C++ libraries in lib/ (all but libtorch_python)."""
    prefix_lib = stage / "lib"
    prefix_lib.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = Path(info.filename).name
            if (
                info.filename.startswith("torch/lib/")
                and (name.endswith(".so") or ".so." in name)
                and name != TORCH_PYTHON_LIBRARY
            ):
                (prefix_lib / name).write_bytes(zf.read(info))
                (prefix_lib / name).chmod(0o755)
                _relink_torch_library(prefix_lib / name, prefix_lib)
    return Payload(stage)


def wheel_members(wheel: Path, stage: Path, members: dict[str, str]) -> Payload:
    """Files of a (nvidia-*) wheel at conda's places: {glob inside the wheel: folder in the package}."""
    matched = set()
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            for pattern, folder in members.items():
                if Path(info.filename).match(pattern) and not info.is_dir():
                    target = stage / folder / Path(info.filename).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(info))
                    if (info.external_attr >> 16) & 0o111 or ".so" in target.name or folder == "bin":
                        target.chmod(0o755)
                    matched.add(pattern)
    if set(members) - matched:
        raise FileNotFoundError(f"{wheel.name}: nothing matches {sorted(set(members) - matched)}")
    return Payload(stage)


def remote_wheel_members(spec: dict, stage: Path) -> Payload:
    """A few files of a PyPI wheel, read with HTTP range requests (faforge.wheelfetch), not downloaded whole."""
    wheel = wheelfetch.pick_wheel(
        wheelfetch.list_files(spec["project"]), spec["version"], spec["python_tag"], spec["platform"]
    )
    remote = wheelfetch.RemoteZip(wheel.url, wheel.size)
    for member, folder in spec["members"].items():
        data = remote.read(member)
        if Path(member).name == "METADATA":
            data = b"".join(
                line for line in data.splitlines(keepends=True) if not PYPI_ONLY_TORCH_REQUIREMENT.match(line.decode())
            )
        target = stage / folder / Path(member).name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return Payload(stage)


def copy_tree(source: Path, stage: Path, members: dict[str, str]) -> Payload:
    """Files of a local toolkit at conda's places: {path or glob under source: folder in the package}."""
    for pattern, folder in members.items():
        found = sorted(source.glob(pattern))
        if not found:
            raise FileNotFoundError(f"{source}: nothing matches {pattern!r}")
        for src in found:
            dest = stage / folder / src.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest)
    return Payload(stage)


def symlinks(stage: Path, links: dict[str, str]) -> Payload:
    """Relative symlinks, e.g. the unversioned lib/libcudart.so a -dev package adds for linking."""
    for rel, target in links.items():
        link = stage / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    return Payload(stage)


def files(stage: Path, contents: dict[str, str], executable: tuple[str, ...] = ()) -> Payload:
    """Small files written from text (activation scripts, compiler wrappers, markers)."""
    marked = set()
    for rel, text in contents.items():
        target = stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if rel in executable:
            target.chmod(0o755)
        if PLACEHOLDER in text:
            marked.add(rel)
    return Payload(stage, marked)

"""Find the extension modules inside what the user passed: a .so, a wheel, a conda package or a folder."""

from __future__ import annotations

import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from faforge.abi.elf import read_dynamic_symbols
from faforge.abi.elf_file import ElfError
from faforge.errors import FaforgeError, why_not_a_file

ARCHIVE_SUFFIXES = (".whl", ".zip", ".conda", ".tar.bz2")


@contextmanager
def extension_modules(path: str | Path) -> Iterator[list[tuple[str, Path]]]:
    """(name to show, file on disk) of each extension module in `path`; archives are unpacked to a
    temporary folder that lives as long as the context."""
    path = Path(path)
    if not (path.is_dir() or path.is_file()):
        raise ElfError(f"{path}: {why_not_a_file(path)}")
    if path.is_dir():
        yield _modules_in(path, path)
    elif path.name.endswith(ARCHIVE_SUFFIXES):
        with tempfile.TemporaryDirectory(prefix="faforge-abi-") as tmp:
            _unpack(path, Path(tmp))
            yield _modules_in(Path(tmp), path)
    else:
        yield [(str(path), path)]


def _modules_in(folder: Path, shown_as: Path) -> list[tuple[str, Path]]:
    modules = [(str(p.relative_to(folder)), p) for p in sorted(folder.rglob("*.so")) if p.is_file() and _is_extension(p)]
    if not modules:
        raise ElfError(f"{shown_as}: no Python extension module (a .so exporting PyInit_*) inside")
    return modules


def _is_extension(path: Path) -> bool:
    try:
        symbols = read_dynamic_symbols(path)
    except ElfError:
        return False
    return any(name.startswith("PyInit_") for name in symbols.names)


def _unpack(archive: Path, dest: Path) -> None:
    """Extract only the shared objects (a wheel's data files can be large and are not needed)."""
    try:
        if archive.name.endswith(".conda"):
            _unpack_conda(archive, dest)
        elif archive.name.endswith(".tar.bz2"):
            with tarfile.open(archive, "r:bz2") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".so")]
                tar.extractall(dest, members=members, filter="data")
        else:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(dest, members=[n for n in zf.namelist() if n.endswith(".so")])
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise ElfError(f"{archive}: cannot unpack ({exc})", hint="is it a complete wheel or conda package? Rebuild or re-download it") from None


def _unpack_conda(archive: Path, dest: Path) -> None:
    try:
        from rattler.package_streaming import extract  # noqa: PLC0415  (only the CLI has py-rattler)
    except ImportError:
        raise FaforgeError(f"{archive}: reading .conda packages needs py-rattler; install faforge with its "
                           "dependencies, or pass the unpacked package folder") from None
    try:
        extract(archive, dest)
    except Exception as exc:  # rattler raises its own exception types for corrupt archives
        raise ElfError(f"{archive}: cannot unpack this .conda package ({exc})") from None

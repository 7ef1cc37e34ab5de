"""Find what a package loads inside what the user passed (a .so, a wheel, a conda package or a folder): its
extension modules, and the torch.ops libraries its own Python code loads."""

from __future__ import annotations

import re
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf import read_elf
from faforge.abi.elf_file import ElfError
from faforge.abi.library_sets import split_sets
from faforge.abi.report import IMPORT, LOAD_LIBRARY, LibrarySet, TorchFacts
from faforge.abi.resolve import is_torch_library
from faforge.errors import FaforgeError, why_not_a_file

ARCHIVE_SUFFIXES = (".whl", ".zip", ".conda", ".tar.bz2")
# What an archive's check needs: its shared objects, versioned ones too: auditwheel's vendored libraries
# (torchvision.libs/libpng16.6f3a47c5.so.16, which torchvision/image.so needs) are found beside the
# modules that need them only if they are unpacked with them.
SHARED_OBJECT = re.compile(r"\.so(?:\.[0-9]+)*$")


@dataclass(frozen=True)
class Binary:
    shown: str  # its path in the package (as given, for a lone .so)
    path: Path  # the file on disk
    loaded_by: str  # IMPORT or LOAD_LIBRARY


@dataclass(frozen=True)
class Found:
    binaries: list[Binary]  # what the package loads with this torch: the check's modules
    sets: list[LibrarySet]  # its per-torch library sets, each with the members it loads (among `binaries`)


@contextmanager
def package_binaries(path: str | Path, torch: TorchFacts) -> Iterator[Found]:
    """The binaries in `path` that the package loads with `torch`: its extension modules (PyInit_*) and the
    torch.ops libraries its Python code loads itself (no PyInit_, needs torch's libraries), of a per-torch set
    only the member its loader picks; archives are unpacked to a temporary folder that lives as long as the context."""
    path = Path(path)
    if not (path.is_dir() or path.is_file()):
        raise ElfError(f"{path}: {why_not_a_file(path)}")
    if path.is_dir():
        yield _binaries_in(path, path, torch)
    elif path.name.endswith(ARCHIVE_SUFFIXES):
        with tempfile.TemporaryDirectory(prefix="faforge-abi-") as tmp:
            _unpack(path, Path(tmp))
            yield _binaries_in(Path(tmp), path, torch)
    else:  # a lone file is checked as named, whatever it is
        yield Found([Binary(str(path), path, _loaded_by(path) or LOAD_LIBRARY)], [])


def _binaries_in(folder: Path, shown_as: Path, torch: TorchFacts) -> Found:
    kinds = {str(p.relative_to(folder)): (p, _loaded_by(p)) for p in sorted(folder.rglob("*.so")) if p.is_file()}
    rest, choices = split_sets([(shown, p, kind is not None) for shown, (p, kind) in kinds.items()], torch)
    chosen = [*rest, *((m.shown, m.path) for c in choices for m in c.loads)]
    if not chosen and not choices:
        raise ElfError(
            f"{shown_as}: no Python extension module (a .so exporting PyInit_*) or torch.ops library "
            "(a .so without PyInit_* that needs torch's libraries) inside"
        )
    return Found(
        sorted((Binary(shown, p, kinds[shown][1] or LOAD_LIBRARY) for shown, p in chosen), key=lambda b: b.shown),
        [c.report for c in choices],
    )


def _loaded_by(path: Path) -> str | None:
    """IMPORT for an extension module, LOAD_LIBRARY for a library that needs torch's (the package's Python code
    opens it: torch.ops.load_library, ctypes.CDLL), None for the rest (vendored libraries, torch's own)."""
    try:
        info, symbols = read_elf(path)
    except ElfError:
        return None
    if any(name.startswith("PyInit_") for name in symbols.names):
        return IMPORT
    if not is_torch_library(path.name) and any(is_torch_library(need) for need in info.needed):
        return LOAD_LIBRARY
    return None


def _unpack(archive: Path, dest: Path) -> None:
    """Extract only the shared objects (a wheel's data files can be large and are not needed)."""
    try:
        if archive.name.endswith(".conda"):
            _unpack_conda(archive, dest)
        elif archive.name.endswith(".tar.bz2"):
            with tarfile.open(archive, "r:bz2") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and SHARED_OBJECT.search(m.name)]
                tar.extractall(dest, members=members, filter="data")
        else:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(dest, members=[n for n in zf.namelist() if SHARED_OBJECT.search(n)])
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise ElfError(
            f"{archive}: cannot unpack ({exc})",
            hint="is it a complete wheel or conda package? Rebuild or re-download it",
        ) from None


def _unpack_conda(archive: Path, dest: Path) -> None:
    try:
        from rattler.package_streaming import extract  # noqa: PLC0415  (only the CLI has py-rattler)
    except ImportError:
        raise FaforgeError(
            f"{archive}: reading .conda packages needs py-rattler; install faforge with its "
            "dependencies, or pass the unpacked package folder"
        ) from None
    try:
        extract(archive, dest)
    except Exception as exc:  # rattler raises its own exception types for corrupt archives
        raise ElfError(f"{archive}: cannot unpack this .conda package ({exc})") from None

"""Where the repository's data lives, found from the installed package or the cwd."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from faforge import untrusted
from faforge.errors import FaforgeError, path_error, shorten, why_not_a_file, why_not_a_folder
from faforge.family import FLASH_ATTN

MARKER = Path("variants") / "releases.yaml"


def repo_root() -> Path:
    """The checkout holding variants/ and recipes/ (editable installs and CI run from it)."""
    named = os.environ.get("FAFORGE_ROOT")
    if named:  # a root named on purpose is used or refused, never silently passed over for another checkout
        if not (Path(named) / MARKER).is_file():
            raise FaforgeError(
                f"$FAFORGE_ROOT {shorten(named, 200)!r} holds no {MARKER}",
                hint="point it at a faforge checkout (the folder with variants/ and recipes/), or unset it",
            )
        return Path(named)
    candidates = list(Path(__file__).resolve().parents)
    candidates += [Path.cwd(), *Path.cwd().parents]
    for candidate in candidates:
        if (candidate / MARKER).is_file():
            return candidate
    raise FaforgeError(
        f"cannot find {MARKER} above {Path(__file__).parent} or the current directory",
        hint="run faforge from the repository checkout, install it with `pip install -e .`, or set FAFORGE_ROOT",
    )


def variants_dir() -> Path:
    return repo_root() / "variants"


def recipe_dir() -> Path:
    return repo_root() / FLASH_ATTN.recipe_dir


@contextmanager
def user_path(option: str | None, path: str | os.PathLike) -> Iterator[None]:
    """OS errors in the block are about `path`, which the user chose with `option`: bad input (exit 2) naming both."""
    try:
        yield
    except OSError as exc:
        raise path_error(exc, option, path) from None


def require_input_file(path: Path, hint: str) -> None:
    """A file argument that does not exist: an unmatched shell glob (`output/dist/*.whl` before any build)
    arrives as the pattern itself, and is said to be one."""
    if not path.exists() and not path.is_symlink():
        what = "no file matches this pattern" if any(c in str(path) for c in "*?[") else "no such file"
        raise FaforgeError(f"{path}: {what}", hint=hint)


def output_dir(path: Path, option: str, *, create: bool = True) -> Path:
    """The folder a command writes into, proven writable before any work starts, so a file, a read-only
    place or an over-long name is reported at once (exit 2) and not after an hour of building. With
    create=False nothing is made: the probe goes into the nearest folder that exists."""
    with user_path(option, path):
        if create:
            path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=nearest_folder(path, option)).close()
    return path


def output_file(path: str | os.PathLike, option: str) -> Path:
    """A file a command appends to later (e.g. $GITHUB_OUTPUT), checked now: its folder exists and it can be opened."""
    if not os.fspath(path):  # `--github-output "$UNSET"`
        raise FaforgeError(f"{option} is empty", hint='name a file, e.g. "$GITHUB_OUTPUT"')
    with user_path(option, path):
        open(path, "a").close()  # only proving it opens
    return Path(path)


def replaceable_file(path: str | os.PathLike, option: str) -> Path:
    """A file a command replaces atomically when it is done (faforge.atomic), checked now: absent or a
    regular file (never a folder or a device such as /dev/full, which a rename would replace), in a
    folder it may write into."""
    if not os.fspath(path):
        raise FaforgeError(f"{option} is empty", hint="name a file, e.g. plan.json")
    with user_path(option, path):
        if os.path.lexists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            raise FaforgeError(
                f"{option} {os.fsdecode(path)} {why_not_a_file(path)}, so it is not replaced",
                hint="name a file",
                input=os.fsdecode(path),
            )
        tempfile.TemporaryFile(dir=Path(path).parent).close()
    return Path(path)


def input_file(path: str, option: str, what: str) -> Path:
    """A path the user named, which must be a regular file (a FIFO or device is refused before anything reads it)."""
    found = Path(path)
    try:
        with user_path(option, path):
            mode = os.stat(found).st_mode
    except ValueError:  # a NUL byte in the name
        raise FaforgeError(
            f"{option} {path!r} is not a usable path (it holds a NUL byte)", hint=f"pass {what}", input=path
        ) from None
    if not stat.S_ISREG(mode):
        raise FaforgeError(f"{option} {path} {why_not_a_file(found)}", hint=f"pass {what}", input=path)
    return found


def read_user_file(
    path: str | os.PathLike, option: str | None = None, *, hint: str | None = None, kind: str = "data"
) -> str:
    """The text of a file the user (or a data folder) names, through faforge.untrusted: a FIFO, a device,
    a file past its kind's size cap or random bytes are bad input naming the path, never a hang or a traceback."""
    return untrusted.read_text(path, kind, option, hint=hint or "name a file")


def nearest_folder(path: Path, option: str) -> Path:
    """`path`, or the nearest folder above it when it does not exist yet (nothing recorded there so far).
    Whatever is there must be a folder: a file, a symlink loop or a file as a parent is bad input."""
    with user_path(option, path):
        existing = next(p for p in [path, *path.absolute().parents] if p.exists() or p.is_symlink())
        if not existing.is_dir():
            where = "" if existing == path else f": {existing}"
            raise FaforgeError(
                f"{option} {path}{where} {why_not_a_folder(existing)}", hint="name a folder", input=str(path)
            )
    return existing

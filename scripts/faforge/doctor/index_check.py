"""Whether the wheel index a pip or uv fix names serves the exact file that fix installs.

A fix that cannot be installed is not a fix: doctor prints `pip install --extra-index-url INDEX ...
flash-attn==VERSION`, and if INDEX has no such wheel, pip backtracks to PyPI's sdist or refuses. So for each
pip-install / uv-install fix, the index's flash-attn page is read as pip reads it (faforge.pipindex.read, one
request under faforge.httpclient's read timeout and deadline) and its files are matched against the cell's
glue wheel (PipBuild.glue_wheel_pattern). An index that answers and lacks the file blocks the fix (doctor's
exit 4); one that gives no answer leaves the diagnosis and its exit code as they are, and the fix says it
could not be checked. `--offline` skips the read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from faforge.doctor.fix_commands import Fix
from faforge.errors import FaforgeError, RemoteError
from faforge.family import FLASH_ATTN
from faforge.matrix.pip_builds import PipBuild
from faforge.pipindex.read import PageError, PageRefused, project_files

# How a check ended. SERVED: the file is listed. The index answered but does not serve it: NOT_FOUND (an HTTP
# 4xx for its flash-attn page), NO_SUCH_FILE (the page lists other files), NOT_AN_INDEX (a page pip skips or
# cannot parse). UNCHECKED: no usable answer (unreachable, silent past the read timeout, a 5xx). OFFLINE: not read.
SERVED, NOT_FOUND, NO_SUCH_FILE, NOT_AN_INDEX, UNCHECKED, OFFLINE = (
    "served",
    "not-found",
    "no-such-file",
    "not-an-index",
    "unchecked",
    "offline",
)
BLOCKING = (NOT_FOUND, NO_SUCH_FILE, NOT_AN_INDEX)
PIP_FIX_KINDS = ("pip-install", "uv-install")


@dataclass(frozen=True)
class IndexCheck:
    index: str  # the index URL the fix names
    wheel: str  # the file it must serve (the glue wheel's name, `manylinux_*` where the build decides)
    status: str  # SERVED, one of BLOCKING, UNCHECKED or OFFLINE
    message: str  # what was found, in words
    found: str | None = None  # the matching file's name (SERVED)
    hint: str | None = None  # what to do (a blocking status, UNCHECKED)

    @property
    def blocks(self) -> bool:
        """The index answered, and the fix's line cannot install from it."""
        return self.status in BLOCKING

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "wheel": self.wheel,
            "status": self.status,
            "served": self.status == SERVED,
            "found": self.found,
            "message": self.message,
            "hint": self.hint,
        }


def check(index: str, build: PipBuild) -> IndexCheck:
    """Read `index`'s flash-attn page and look for `build`'s glue wheel."""
    wheel = build.glue_wheel()
    page = f"{index.rstrip('/')}/{FLASH_ATTN.package}/"
    publish = (
        "publish the cell's wheels there (`faforge publish --index "
        "ROOT`), or set FAFORGE_PIP_INDEX to the index that has them"
    )
    try:
        files = project_files(index, FLASH_ATTN.package)
    except PageRefused as exc:
        return IndexCheck(
            index, wheel, NOT_FOUND, f"{exc.message}: the index has no {FLASH_ATTN.package} page", hint=publish
        )
    except PageError as exc:
        return IndexCheck(
            index, wheel, NOT_AN_INDEX, f"{exc}", hint="check the index (`faforge index --pip --check URL`)"
        )
    except RemoteError as exc:
        return IndexCheck(index, wheel, UNCHECKED, f"the line could not be checked: {exc.message}", hint=exc.hint)
    except FaforgeError as exc:  # a local index whose pages cannot be read
        return IndexCheck(index, wheel, NOT_AN_INDEX, exc.message, hint=exc.hint)
    pattern = build.glue_wheel_pattern()
    found = next((f.filename for f in files if pattern.fullmatch(f.filename) and not f.yanked), None)
    if found is None:
        return IndexCheck(
            index, wheel, NO_SUCH_FILE, f"{page} lists {len(files)} file(s), none of them {wheel}", hint=publish
        )
    return IndexCheck(index, wheel, SERVED, f"{page} serves {found}", found=found)


def checked(fixes: Iterable[Fix], builds: Iterable[PipBuild], *, offline: bool = False) -> tuple[Fix, ...]:
    """The fixes with each pip or uv line's index checked (each index read once)."""
    by_cell = {b.cell.id: b for b in builds}
    seen: dict[tuple[str, str], IndexCheck] = {}
    out = []
    for fix in fixes:
        index = fix.index_url if fix.kind in PIP_FIX_KINDS else None
        build = by_cell.get(fix.cell) if index and fix.cell else None
        if index is None or build is None:
            out.append(fix)
            continue
        key = (index, build.cell.id)
        if key not in seen:
            seen[key] = (
                IndexCheck(index, build.glue_wheel(), OFFLINE, "not checked (--offline)")
                if offline
                else check(index, build)
            )
        out.append(replace(fix, index_check=seen[key]))
    return tuple(out)


def blocked(fixes: Iterable[Fix]) -> bool:
    """Whether a fix's index answered without the file its line installs (doctor's exit 4)."""
    return blocking_error(fixes) is not None


def blocking_error(fixes: Iterable[Fix]) -> RemoteError | None:
    """The error of doctor's exit 4 for the first fix whose index answered without its wheel, else None."""
    check = next((f.index_check for f in fixes if f.index_check is not None and f.index_check.blocks), None)
    if check is None:
        return None
    return RemoteError(
        f"the fix's pip/uv line cannot install from its wheel index: {check.message}",
        input=check.index,
        hint=check.hint,
    )

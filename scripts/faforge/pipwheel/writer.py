"""Write a wheel: the same inputs give the same bytes, and a reader sees the whole file or none.

The layout is PEP 427's (the binary distribution format): the files, then `{name}-{version}.dist-info/`
with METADATA (core metadata 2.1: Name, Version, Requires-Python, Requires-Dist), WHEEL (Root-Is-Purelib:
false, a Tag line per tag, Build for a build tag) and RECORD (each file's sha256, urlsafe base64 without
padding, and size; RECORD itself last, without either). Members are sorted, the dist-info folder last,
every timestamp is ZIP_EPOCH and every mode 0644 (0755 for ELF files), so a rebuild from the same inputs
is the same file, byte for byte. The wheel is written to a temporary file beside its final name and
renamed into place.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import secrets
import stat
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from faforge import __version__
from faforge.errors import FaforgeError, path_error

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip member can carry
ELF_MAGIC = b"\x7fELF"
WRITTEN = ("METADATA", "WHEEL", "RECORD")  # the dist-info files the writer makes, never taken from the inputs


@dataclass(frozen=True)
class WheelSpec:
    """What a wheel holds: its project and version, its tags, its requirements and its files
    (the path inside the wheel -> the bytes, or a file whose bytes are read when the wheel is written)."""

    name: str  # the project, PEP 503 normalised (flash-attn)
    version: str  # PEP 440, local label included
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]
    files: dict[str, bytes | Path]
    build_tag: str | None = None
    requires_python: str | None = None
    requires_dist: tuple[str, ...] = ()
    summary: str | None = None
    extra_metadata: tuple[tuple[str, str], ...] = field(default=())  # further core-metadata fields, in order

    @property
    def escaped_name(self) -> str:
        """The project as file and folder names spell it (flash-attn -> flash_attn)."""
        return re.sub(r"[-_.]+", "_", self.name).lower()

    @property
    def dist_info(self) -> str:
        return f"{self.escaped_name}-{self.version}.dist-info"

    @property
    def filename(self) -> str:
        parts = [
            self.escaped_name,
            self.version,
            *([self.build_tag] if self.build_tag else []),
            ".".join(self.python_tags),
            ".".join(self.abi_tags),
            ".".join(self.platform_tags),
        ]
        return "-".join(parts) + ".whl"

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(f"{p}-{a}-{t}" for p in self.python_tags for a in self.abi_tags for t in self.platform_tags)


def record_hash(data: bytes) -> str:
    """RECORD's hash of `data`: `sha256=` and the digest in urlsafe base64 without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata_text(spec: WheelSpec) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}"]
    lines += [f"Summary: {spec.summary}"] if spec.summary else []
    lines += [f"Requires-Python: {spec.requires_python}"] if spec.requires_python else []
    lines += [f"Requires-Dist: {r}" for r in spec.requires_dist]
    lines += [f"{key}: {value}" for key, value in spec.extra_metadata]
    for line in lines:
        if "\n" in line or "\r" in line:
            raise FaforgeError(
                f"the wheel's METADATA line {line[:80]!r} holds a line break", hint="pass single-line values"
            )
    return "\n".join(lines) + "\n"


def wheel_text(spec: WheelSpec) -> str:
    lines = ["Wheel-Version: 1.0", f"Generator: faforge {__version__}", "Root-Is-Purelib: false"]
    lines += [f"Tag: {tag}" for tag in spec.tags]
    lines += [f"Build: {spec.build_tag}"] if spec.build_tag else []
    return "\n".join(lines) + "\n"


def _bytes(content: bytes | Path) -> bytes:
    return content if isinstance(content, bytes) else Path(content).read_bytes()


def _check_name(name: str, spec: WheelSpec) -> None:
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise FaforgeError(
            f"{spec.filename}: member {name!r} is not a plain relative path", hint="name files inside the wheel plainly"
        )
    if parts[0] == spec.dist_info and parts[-1] in WRITTEN:
        raise FaforgeError(
            f"{spec.filename}: {name} is written by faforge, not taken from the inputs",
            hint="leave it out of the files",
        )


def wheel_members(spec: WheelSpec) -> list[tuple[str, bytes]]:
    """(name, bytes) of every member, in the order they are written: files sorted, then the dist-info folder
    (its own files sorted), METADATA, WHEEL and RECORD last."""
    for name in spec.files:
        _check_name(name, spec)
    inside = lambda n: n.split("/")[0] == spec.dist_info  # noqa: E731 (a one-line helper)
    order = sorted(n for n in spec.files if not inside(n)) + sorted(n for n in spec.files if inside(n))
    members = [(name, _bytes(spec.files[name])) for name in order]
    members += [
        (f"{spec.dist_info}/METADATA", metadata_text(spec).encode()),
        (f"{spec.dist_info}/WHEEL", wheel_text(spec).encode()),
    ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for name, data in members:
        writer.writerow([name, record_hash(data), len(data)])
    writer.writerow([f"{spec.dist_info}/RECORD", "", ""])
    return [*members, (f"{spec.dist_info}/RECORD", out.getvalue().encode())]


def _mode(data: bytes) -> int:
    return 0o755 if data.startswith(ELF_MAGIC) else 0o644


def write_wheel(spec: WheelSpec, out_dir: str | os.PathLike) -> Path:
    """Write the wheel `spec` describes into `out_dir` (created if missing); returns its path. An existing file
    of the same name is replaced whole (readers see the old wheel or the new one)."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise path_error(exc, "--out", out_dir) from None
    target = out_dir / spec.filename
    if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
        raise FaforgeError(
            f"{target} exists and is not a regular file, so it is not replaced",
            hint="remove it or choose another --out",
            input=str(target),
        )
    members = wheel_members(spec)
    tmp = out_dir / f".{spec.filename}-{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with os.fdopen(fd, "wb") as handle:
            with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as archive:
                for name, data in members:
                    info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
                    info.external_attr = (stat.S_IFREG | _mode(data)) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.create_system = 3  # Unix, so that installers read the mode bits
                    archive.writestr(info, data, compresslevel=6)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise path_error(exc, "--out", out_dir) from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return target


def rewrite_wheel(
    spec: WheelSpec,
    contents: dict[str, bytes],
    dist_info: str,
    *,
    member: str,
    patched: Path,
    out_dir: str | os.PathLike,
) -> Path:
    """Write `spec` (its files left empty) holding another wheel's `contents` (name -> bytes, as wheel_contents
    reads them): the files of its dist-info folder `dist_info` move under spec's, but for those the writer makes
    anew (WRITTEN); `member` (its extension) is the file `patched` instead. Returns the new wheel's path."""
    files: dict[str, bytes | Path] = {}
    for name, data in contents.items():
        top, _, rest = name.partition("/")
        if top == dist_info:
            if rest not in WRITTEN:
                files[f"{spec.dist_info}/{rest}"] = data
        else:
            files[name] = patched if name == member else data
    return write_wheel(replace(spec, files=files), out_dir)

"""Local conda channels through py-rattler and py-rattler-build: assemble, index, solve, install.

Everything here works offline against file:// (or loopback http://) channels, which is how the
tests prove the run requirements and how `faforge publish` writes its default channel.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.channel.index import channel_lock, heal
from faforge.errors import FaforgeError

if TYPE_CHECKING:
    from rattler import GenericVirtualPackage, RepoDataRecord

# The virtual packages of a typical GPU box; solves pass them explicitly so results do not
# depend on the machine the tests run on.
DEFAULT_VIRTUALS = {"__glibc": "2.36", "__cuda": "13.0", "__linux": "6.1", "__unix": "0"}


@dataclass(frozen=True)
class PackageSpec:
    """A package to assemble: real metadata, optional files (path in package -> text, or bytes for binaries)."""

    name: str
    version: str
    build: str
    subdir: str
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()
    build_number: int = 0
    files: dict = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build}.conda"


def assemble(spec: PackageSpec, channel_dir: Path) -> Path:
    """Write one .conda into channel_dir/<subdir>/ with py-rattler-build's package assembler."""
    from rattler_build import assemble_package  # noqa: PLC0415 (py-rattler-build: slow to import)

    out_dir = channel_dir / spec.subdir
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="faforge-pkg-") as staging_dir:
        staging = Path(staging_dir)
        files = spec.files or {f"share/faforge-standins/{spec.name}.txt": f"{spec.name} {spec.version} {spec.build}\n"}
        for rel, text in files.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text) if isinstance(text, bytes) else target.write_text(text)
        output = assemble_package(
            name=spec.name,
            version=spec.version,
            target_platform=spec.subdir,
            build_string=spec.build,
            output_dir=out_dir,
            files_dir=staging,
            depends=list(spec.depends),
            constrains=list(spec.constrains),
            build_number=spec.build_number,
            # about.json, as every real package has (artifactory's upload reads it).
            summary=f"{spec.name} {spec.version} ({spec.build})",
            noarch="generic" if spec.subdir == "noarch" else None,
            detect_prefix=False,
        )
    return Path(output.path)


def index(channel_dir: Path) -> None:
    """(Re)write repodata.json for every subdir (noarch/ included), as `faforge index` does.

    Raises FaforgeError(exit 1) naming any file that cannot be indexed.
    """
    with channel_lock(channel_dir):
        found = heal(channel_dir)
    if found.bad:
        raise FaforgeError(
            f"{channel_dir}: cannot index " + "; ".join(f"{b.path}: {b.reason}" for b in found.bad), exit_code=1
        )


def _virtual_packages(virtuals: dict[str, str]) -> list[GenericVirtualPackage]:
    from rattler import (  # noqa: PLC0415 (py-rattler: slow to import)
        BuildString,
        GenericVirtualPackage,
        PackageName,
        Version,
    )

    return [
        GenericVirtualPackage(PackageName(name), Version(version), BuildString("0"))
        for name, version in virtuals.items()
    ]


def solve(
    channels: list[str], specs: list[str], platform: str, virtuals: dict[str, str] | None = None, strict: bool = True
) -> dict[str, RepoDataRecord]:
    """Solve like conda/mamba with strict channel priority; returns name -> RepoDataRecord.

    Raises FaforgeError(exit_code=1) when unsatisfiable, with the solver's explanation.
    """
    from rattler import Channel, ChannelConfig, ChannelPriority, Subdir  # noqa: PLC0415 (py-rattler: slow to import)
    from rattler import solve as rattler_solve  # noqa: PLC0415 (py-rattler: slow to import)

    config = ChannelConfig()
    sources = [Channel(c, config) if "://" not in c else Channel(c) for c in channels]
    try:
        records = asyncio.run(
            rattler_solve(
                sources=sources,
                specs=specs,
                platforms=[Subdir(platform), Subdir("noarch")],
                virtual_packages=_virtual_packages(virtuals or DEFAULT_VIRTUALS),
                channel_priority=ChannelPriority.Strict if strict else ChannelPriority.Disabled,
            )
        )
    except Exception as exc:  # rattler's SolverError / parse errors carry the explanation
        raise FaforgeError(f"cannot solve {specs} on {platform} from {channels}: {exc}", exit_code=1) from None
    return {record.name.normalized: record for record in records}


def install(records: dict[str, RepoDataRecord], prefix: Path, platform: str, cache_dir: Path | None = None) -> None:
    """Link solved records into a real prefix (conda-meta/ and all)."""
    from rattler import Subdir  # noqa: PLC0415 (py-rattler: slow to import)
    from rattler import install as rattler_install  # noqa: PLC0415 (py-rattler: slow to import)

    asyncio.run(
        rattler_install(
            list(records.values()),
            target_prefix=prefix,
            cache_dir=cache_dir,
            platform=Subdir(platform),
            show_progress=False,
            execute_link_scripts=False,
        )
    )

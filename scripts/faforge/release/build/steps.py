"""Build cells with py-rattler-build: one log per cell, resumable, one failure never stops the rest.

The channels come from the cell's torch world in variants/releases.yaml (conda-forge for the
conda-forge world; pytorch, nvidia, conda-forge for the legacy one), in priority order; channel
aliases point any of those names at another URL (a mirror, a proxy, a local file:// channel).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast
from urllib.parse import urlsplit

from faforge.errors import FaforgeError
from faforge.release.build.stage import Buildable, RenderedBuild
from faforge.release.package_cache import evict
from faforge.release.plan.jobs import job_slug, package_filename
from faforge.release.reporter import Reporter

if TYPE_CHECKING:
    from rattler_build import RenderedVariant
    from rattler_build.progress import (
        BuildStepEvent,
        DownloadCompleteEvent,
        DownloadProgressEvent,
        DownloadStartEvent,
        LogEvent,
    )

# Split kernel packages (faforge.costmodel.runners). A piece job renders the recipe with this variable
# holding its TU names; the recipe passes it on (build.script.env: ${{ env.get("FAFORGE_BUILD_TUS", default="") }})
# and its build script compiles only those TUs into the compiler cache, then stops. The
# `kernels-link` job is an ordinary full build whose kernel objects come from the pieces' restored
# caches: a missing object costs time (it is compiled there), never correctness.
TUS_ENV = "FAFORGE_BUILD_TUS"
CACHE_LINE = re.compile(r"compiler cache: (\d+) hits, (\d+) misses")

# Every conda-forge CUDA pytorch depends on the __cuda virtual package, which a solver sees only
# with an NVIDIA driver or this override; rattler-build's solves read it (VirtualPackageOverrides::
# from_env). conda-forge's CI sets it on its GPU-less runners to the config's cuda_compiler_version
# (https://github.com/conda-forge/conda-forge-ci-setup-feedstock/blob/21dbc177d730ca00b0b5f7b9fec339734a1f0e8d/recipe/run_conda_forge_build_setup_linux#L80-L84),
# and so do we, per cell, unless the caller set it (.github/workflows/build-cells.yml does, from the plan).
CUDA_OVERRIDE_ENV = "CONDA_OVERRIDE_CUDA"
# NAME=URL entries, whitespace-separated; `faforge build --channel-alias` entries win over these.
CHANNEL_ALIAS_ENV = "FAFORGE_CHANNEL_ALIAS"
ALIAS_SCHEMES = ("http", "https", "file")


def parse_channel_aliases(entries: list[str], known: set[str], origin: str = "--channel-alias") -> dict[str, str]:
    """NAME=URL entries -> {channel name: URL}; names must be channels of variants/releases.yaml."""
    aliases: dict[str, str] = {}
    for entry in entries:
        name, sep, url = entry.partition("=")
        if not sep or not name or not url:
            raise FaforgeError(
                f"{origin} {entry!r}: expected NAME=URL", hint="e.g. conda-forge=https://mirror.example/conda-forge"
            )
        if name not in known:
            raise FaforgeError(
                f"{origin} {entry}: unknown channel name {name!r}",
                hint=f"name a channel of variants/releases.yaml: {', '.join(sorted(known))}",
            )
        parts = urlsplit(url)
        local_ok = parts.netloc in ("", "localhost") and parts.path.startswith("/")
        if (
            parts.scheme not in ALIAS_SCHEMES
            or not (local_ok if parts.scheme == "file" else parts.netloc)
            or not url.isprintable()
            or " " in url
        ):  # a control character or a blank is no channel URL
            raise FaforgeError(
                f"{origin} {entry}: {url!r} is not an http://, https:// or file:/// URL of a channel",
                hint="e.g. conda-forge=https://mirror.example/conda-forge or conda-forge=file:///srv/mirror/conda-forge",
            )
        if name in aliases:
            raise FaforgeError(
                f"{origin}: {name} is given twice ({aliases[name]} and {url})",
                hint=f"keep one {name}=URL entry in {origin}",
            )
        aliases[name] = url
    return aliases


def channels_for(cell: Buildable, aliases: dict[str, str], extra: Sequence[str] = ()) -> list[str]:
    """The extra channels (a cell job's kernel package), then the cell's world channels in priority
    order, each replaced by its alias if it has one."""
    return [*extra, *(aliases.get(channel, channel) for channel in cell.channels)]


@contextmanager
def cuda_override(cell: Buildable) -> Iterator[str]:
    """CONDA_OVERRIDE_CUDA for this cell's solves: the caller's value, else the cell's CUDA.
    Yields the line that says which, for the cell's log."""
    given = os.environ.get(CUDA_OVERRIDE_ENV)
    if given is not None:
        yield f"{CUDA_OVERRIDE_ENV}={given} (set by the caller)"
        return
    os.environ[CUDA_OVERRIDE_ENV] = cell.cuda
    try:
        yield (
            f"{CUDA_OVERRIDE_ENV}={cell.cuda} (unset, so faforge set it to the cell's CUDA: "
            "CUDA pytorch depends on __cuda, which a machine without an NVIDIA driver lacks)"
        )
    finally:
        os.environ.pop(CUDA_OVERRIDE_ENV, None)


@dataclass(frozen=True)
class CellBuild:
    cell: str
    part: str
    status: str  # built | present | failed | in-cell (a kernel job for a recipe that builds kernels inside each cell)
    seconds: float
    package: Path | None
    log: Path
    error: str | None = None
    cache: str = "-"  # the build script's compiler-cache hits/misses, e.g. "72 hits, 1 misses"


class _LogWriter:
    """py-rattler-build progress callback: every event to the cell's log, step titles to `live`."""

    def __init__(self, log: TextIO, live: Callable[[str], None]):
        self.log = log
        self.live = live
        self.started = time.monotonic()

    def _write(self, line: str) -> None:
        self.log.write(f"[{time.monotonic() - self.started:8.1f}s] {line}\n")
        self.log.flush()

    def on_build_step(self, event: BuildStepEvent) -> None:
        self._write(f"== {event.step_name}: {event.message}")
        self.live(f"{event.step_name}: {event.message}")

    def on_log(self, event: LogEvent) -> None:
        self._write(f"{event.level}: {event.message}" if event.level != "info" else event.message)
        if event.level == "error":
            self.live(f"error: {event.message.strip().splitlines()[0] if event.message.strip() else ''}")

    def on_download_start(self, event: DownloadStartEvent) -> None:
        self._write(f"download {event.url}")

    def on_download_progress(self, event: DownloadProgressEvent) -> None:
        return None

    def on_download_complete(self, event: DownloadCompleteEvent) -> None:
        self._write(f"downloaded {event.url}")


def require_piece_support(rendered: RenderedBuild, tus: tuple[str, ...]) -> None:
    """A recipe that ignored the TU list would build the whole cell in a job sized for a piece."""
    script = (rendered.recipe.get("build") or {}).get("script")
    env = (script.get("env") or {}) if isinstance(script, dict) else {}
    if str(env.get(TUS_ENV, "")).split() != list(tus):
        raise FaforgeError(
            f"{rendered.cell.id}: the recipe does not pass {TUS_ENV} to its build script, so it cannot build a piece",
            hint=f'add `{TUS_ENV}: ${{{{ env.get("{TUS_ENV}", default="") '
            "}}` to build.script.env, or build the cell whole",
        )


def cache_summary(log_path: Path) -> str:
    found = CACHE_LINE.findall(log_path.read_text(errors="replace")) if log_path.is_file() else []
    return f"{found[-1][0]} hits, {found[-1][1]} misses" if found else "-"


# rattler-build's log line for a source or package it could not fetch.
FAILED_FETCH = re.compile(r"Failed to fetch from (\S+?):? ")


def failed_download(log_path: Path) -> str | None:
    """The last URL rattler-build's log says it could not fetch."""
    found = FAILED_FETCH.findall(log_path.read_text(errors="replace")) if log_path.is_file() else []
    return found[-1] if found else None


def build_cell(
    rendered: RenderedBuild,
    *,
    output_dir: Path,
    log_dir: Path,
    live: Callable[[str], None],
    part: str = "all",
    tus: tuple[str, ...] = (),
    channel_aliases: dict[str, str] | None = None,
    extra_channels: Sequence[str] = (),
) -> CellBuild:
    """Build one cell or package into output_dir/<platform>/ (skipped if already there), or one piece of it.

    A piece (`tus` given; the recipe must have been rendered with them in TUS_ENV) only fills the
    compiler cache: its package is a by-product, built in a scratch dir and deleted.
    """
    from rattler_build import ToolConfiguration  # noqa: PLC0415 (py-rattler-build: slow to import)

    cell = rendered.cell
    target = output_dir / cell.platform / package_filename(rendered)
    log_path = log_dir / f"{job_slug(cell.id, part)}.log"
    if not tus and target.is_file():
        return CellBuild(cell=cell.id, part=part, status="present", seconds=0.0, package=target, log=log_path)
    if tus:
        require_piece_support(rendered, tus)
    log_dir.mkdir(parents=True, exist_ok=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{job_slug(cell.id, part)}-", dir=output_dir))
    evicted = evict(package_filename(rendered))  # its tests must run this build, not a cached older one
    started = time.monotonic()
    channels = channels_for(cell, channel_aliases or {}, extra_channels)
    with open(log_path, "w") as log, cuda_override(cell) as override:
        writer = _LogWriter(log, live)
        log.write(f"cell {cell.id} part {part} channels {' '.join(channels)}\n")
        log.write(f"{override}\n")
        if evicted:
            log.write(
                "dropped rattler's cached extraction of an earlier "
                f"build of the same name: {' '.join(map(str, evicted))}\n"
            )
        live(override.split(" (")[0])
        if tus:
            log.write(f"piece: {len(tus)} kernel TUs: {' '.join(tus)}\n")
        try:
            variant = cast("RenderedVariant", rendered.variant)  # typed `object` in faforge.matrix.render
            result = variant.run_build(
                # Run the recipe's own tests (import, ABI gate) on native builds; the default skips
                # them. A piece has no binary to test.
                tool_config=ToolConfiguration(test_strategy="skip" if tus else "native"),
                output_dir=scratch if tus else output_dir,
                channels=channels,
                progress_callback=writer,
            )
        except Exception as exc:  # py-rattler-build raises its own error types; the log has the details
            message = str(exc).strip() or type(exc).__name__
            log.flush()
            if "download" in message.lower() and (url := failed_download(log_path)):
                message += f" ({url})"  # its own message leaves the URL out: the source, or a channel?
            log.write(f"FAILED: {message}\n")
            return CellBuild(
                cell=cell.id,
                part=part,
                status="failed",
                seconds=time.monotonic() - started,
                package=None,
                log=log_path,
                error=message,
                cache=cache_summary(log_path),
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    packages = [Path(p) for p in result.packages]
    return CellBuild(
        cell=cell.id,
        part=part,
        status="built",
        seconds=time.monotonic() - started,
        package=None if tus else (packages[0] if packages else None),
        log=log_path,
        cache=cache_summary(log_path),
    )


def piece_env(tus: tuple[str, ...]) -> None:
    """A recipe reads a piece's TUs at render time (env.get), so set them (or clear them) before rendering."""
    if tus:
        os.environ[TUS_ENV] = " ".join(tus)
    else:
        os.environ.pop(TUS_ENV, None)


def build_step(title: str, rendered: RenderedBuild, report: Reporter, **build: Any) -> CellBuild:
    """One build with its progress lines; a failure is warned about, never raised."""
    with report.step(title) as state:
        result = build_cell(rendered, live=lambda line: report.say(f"  {title}: {line}"), **build)
        state.failed = result.status == "failed"
    if state.failed:
        report.warn(f"{result.cell} failed: {result.error}; log: {result.log}")
    return result

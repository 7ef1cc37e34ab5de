"""Build cells with py-rattler-build: one log per cell, resumable, one failure never stops the rest.

The channels come from the cell's torch world in variants/releases.yaml (conda-forge for the
conda-forge world; pytorch, nvidia, conda-forge for the legacy one), in priority order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import FaforgeError
from faforge.matrix.render import RenderedCell
from faforge.release.plan import job_slug, package_filename

# Split cells (faforge.release.cost): a recipe opts in by passing, in build.script.env,
#   FAFORGE_BUILD_PART: ${{ env.get("FAFORGE_BUILD_PART", default="all") }}
#   FAFORGE_OBJECT_DIR: ${{ env.get("FAFORGE_OBJECT_DIR", default="") }}
# and its build script then compiles only that piece's TUs (faforge.release.cost.split_cell names them)
# into FAFORGE_OBJECT_DIR, or, for `link`, links the objects found there. Until the recipe does,
# `faforge build --part` with anything but `all` is refused rather than silently building whole.
PART_ENV = "FAFORGE_BUILD_PART"


@dataclass(frozen=True)
class CellBuild:
    cell: str
    part: str
    status: str  # built | present | failed
    seconds: float
    package: Path | None
    log: Path
    error: str | None = None


class _LogWriter:
    """py-rattler-build progress callback: every event to the cell's log, step titles to `live`."""

    def __init__(self, log, live: Callable[[str], None]):
        self.log = log
        self.live = live
        self.started = time.monotonic()

    def _write(self, line: str) -> None:
        self.log.write(f"[{time.monotonic() - self.started:8.1f}s] {line}\n")
        self.log.flush()

    def on_build_step(self, event) -> None:
        self._write(f"== {event.step_name}: {event.message}")
        self.live(f"{event.step_name}: {event.message}")

    def on_log(self, event) -> None:
        self._write(f"{event.level}: {event.message}" if event.level != "info" else event.message)
        if event.level == "error":
            self.live(f"error: {event.message.strip().splitlines()[0] if event.message.strip() else ''}")

    def on_download_start(self, event) -> None:
        self._write(f"download {event.url}")

    def on_download_progress(self, event) -> None:
        return None

    def on_download_complete(self, event) -> None:
        self._write(f"downloaded {event.url}")


def require_part_support(rendered: RenderedCell, part: str) -> None:
    if part == "all":
        return
    script = (rendered.recipe.get("build") or {}).get("script")
    env = (script.get("env") or {}) if isinstance(script, dict) else {}
    if PART_ENV not in env:
        raise FaforgeError(
            f"{rendered.cell.id}: the recipe cannot build the piece {part!r} yet (its build.script.env has no {PART_ENV})",
            hint="build the cell whole (`faforge build CELL`) on a runner big enough for it (variants/build-cost.yaml: runners)",
        )


def build_cell(rendered: RenderedCell, *, output_dir: Path, log_dir: Path, live: Callable[[str], None], part: str = "all") -> CellBuild:
    """Build one cell (or one piece of it) into output_dir/<platform>/; skip it if already there."""
    from rattler_build import ToolConfiguration  # noqa: PLC0415

    cell = rendered.cell
    target = output_dir / cell.platform / package_filename(rendered)
    log_path = log_dir / f"{job_slug(cell.id, part)}.log"
    if part in ("all", "link") and target.is_file():
        return CellBuild(cell=cell.id, part=part, status="present", seconds=0.0, package=target, log=log_path)
    require_part_support(rendered, part)
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "w") as log:
        writer = _LogWriter(log, live)
        log.write(f"cell {cell.id} part {part} channels {' '.join(cell.channels)}\n")
        try:
            result = rendered.variant.run_build(
                # Run the recipe's own tests (import, ABI gate) on native builds; the default skips them.
                tool_config=ToolConfiguration(test_strategy="native"),
                output_dir=output_dir,
                channels=list(cell.channels),
                progress_callback=writer,
            )
        except Exception as exc:  # py-rattler-build raises its own error types; the log has the details
            message = str(exc).strip() or type(exc).__name__
            log.write(f"FAILED: {message}\n")
            return CellBuild(cell=cell.id, part=part, status="failed", seconds=time.monotonic() - started,
                             package=None, log=log_path, error=message)
    packages = [Path(p) for p in result.packages]
    return CellBuild(cell=cell.id, part=part, status="built", seconds=time.monotonic() - started,
                     package=packages[0] if packages else None, log=log_path)

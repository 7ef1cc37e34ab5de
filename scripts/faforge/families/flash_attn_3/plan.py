"""FlashAttention-3's part of `faforge plan` (faforge.release.plan.stage.PlanFamily): one job per package, after its
TU pieces when it is too long for one job.

Its packages (faforge.families.flash_attn_3.matrix: one per platform, CUDA and arch list, serving a range of torch
minors through the stable ABI) are built whole from recipes/flash-attn-3 and its generated variant file. It needs
no kernel package, so its two stages run beside flash-attn's:

- `flash_attn_3_pieces`: the TU pieces of each package too long for a hosted job, each filling the package's
  compiler cache, as a kernel package's pieces do;
- `flash_attn_3`: one job per package (`all`), after its pieces when it has them (then with their objects in
  the compiler cache, as a kernels-link job).

The pieces come from the cost model: the package's timed TU classes (variants/build-measurements.yaml, the model
of `faforge bench-build`: faforge.families.flash_attn_3.cost) through faforge.costmodel.runners.split_kernels, as a
kernel package's do. Without FA3 samples each package is one `all` job timed at the runner's job limit, an upper
bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge.costmodel import samples
from faforge.costmodel.runners import KERNELS_LINK_PART, KERNELS_PART, BuildCost, Part
from faforge.costmodel.samples import Measurements
from faforge.families.flash_attn_3 import cost_report
from faforge.families.flash_attn_3.cost_samples import fa3_measurements
from faforge.families.flash_attn_3.matrix import Fa3Package, RenderedFa3, packages_of
from faforge.families.flash_attn_3.render import recipe, render
from faforge.family import FLASH_ATTN_3
from faforge.matrix import Matrix
from faforge.matrix.inputs import objects_digests
from faforge.release.plan.held import stale_packages
from faforge.release.plan.jobs import job_slug, package_filename
from faforge.release.plan.reuse import CompiledStages, objects_keys
from faforge.release.plan.stage import FamilyPlan, Holdings
from faforge.table import format_table

STAGE = FLASH_ATTN_3.key
PIECES_STAGE = f"{STAGE}_pieces"
stages = (PIECES_STAGE, STAGE)
# A package's own job builds it whole (`faforge build ID`, its default part): alone, or after its pieces.
FA3_PART = "all"
ESTIMATE = f"; a {FLASH_ATTN_3.package} package's from its timed TUs, variants/build-measurements.yaml"


def piece_estimates(packages: list[Fa3Package], cost: BuildCost) -> dict[str, list[Part]]:
    """Each package's split_kernels jobs by id, from its timed TU classes (variants/build-measurements.yaml);
    none without FA3 samples (each package is then one job at the runner's limit)."""
    measurements = samples.load()
    if not packages or not fa3_measurements(measurements).samples:
        return {}
    return {p.id: list(p.jobs) for p in cost_report.report(measurements, packages, cost).packages}


def fa3_parts(cost: BuildCost, package: Fa3Package, pieces: Sequence[Part] = ()) -> list[Part]:
    """A package's jobs: its TU pieces (`faforge build ID --part PIECE`), then its whole build (`all`):
    split_kernels' [kernels] (it fits one job) or its pieces and kernels-link, either whole job its `all`."""
    if not pieces:
        return [Part(name=FA3_PART, tus=(), minutes=cost.runner_for(package.platform).job_limit_minutes)]
    return [
        Part(name=FA3_PART, tus=(), minutes=p.minutes) if p.name in (KERNELS_PART, KERNELS_LINK_PART) else p
        for p in pieces
    ]


def fa3_job(rendered: RenderedFa3, runner_label: str, part: Part, pieces: int = 0) -> dict:
    """A package's job: a piece, or the whole package from recipes/flash-attn-3 then its stable-ABI gate
    against the oldest and the newest torch minor it serves (`torch-range`). `kernels` keys the package's
    compiler cache and its pieces' artifacts, as a kernel package's slug does; `pieces` is how many piece
    artifacts its `all` job must find before it builds."""
    package = rendered.package
    return {
        "cell": package.id,
        "part": part.name,
        "slug": f"{FLASH_ATTN_3.package}-{job_slug(package.id, part.name)}",
        "name": f"{FLASH_ATTN_3.package} {package.id}" + ("" if part.name == FA3_PART else f" [{part.name}]"),
        "platform": package.platform,
        "runs-on": runner_label,
        "timeout-minutes": part.minutes,
        "python": package.python,
        "torch": package.torch,
        "cuda": package.cuda,
        "build-string": rendered.build_string,
        "package": package_filename(rendered),
        "kernels": f"{FLASH_ATTN_3.package}-{job_slug(package.id, FA3_PART)}",
        "pieces": pieces,
        "torch-range": f"{package.served[0]} {package.served[-1]}",
    }


def _table(listing: list[dict]) -> tuple[str, ...]:
    rows = [
        [
            p["id"],
            p["build_string"],
            f"{p['served_torch_minors'][0]} to {p['served_torch_minors'][-1]}",
            "in the channel" if p["in_channel"] else "to build",
        ]
        for p in listing
    ]
    if not rows:
        return ()
    return (format_table([f"{FLASH_ATTN_3.package} package", "build string", "serves torch", "status"], rows) + "\n",)


@dataclass(frozen=True)
class Packages:
    """The FA3 packages of the planned platforms, rendered."""

    rendered: list[RenderedFa3]
    root: Path  # the checkout whose build inputs the objects key digests (faforge.matrix.inputs.objects_digests)
    names: tuple[str, ...] = (FLASH_ATTN_3.package,)

    @property
    def platforms(self) -> frozenset[str]:
        return frozenset(r.package.platform for r in self.rendered)

    def plan(self, holdings: Holdings) -> FamilyPlan:
        cost, present = holdings.cost, holdings.present
        held = frozenset(
            r.package.id for r in self.rendered if (r.name, r.version, r.build_string, r.package.platform) in present
        )
        todo = [r for r in self.rendered if r.package.id not in held]
        estimates = piece_estimates([r.package for r in self.rendered], cost)
        jobs: dict[str, list[dict]] = {stage: [] for stage in stages}
        for fa in todo:
            runner = cost.runner_for(fa.package.platform)
            parts = fa3_parts(cost, fa.package, estimates.get(fa.package.id, ()))
            for part in parts:
                if part.name == FA3_PART:
                    jobs[STAGE].append(fa3_job(fa, runner.label, part, pieces=len(parts) - 1))
                else:
                    jobs[PIECES_STAGE].append(fa3_job(fa, runner.label, part))
        listing = [{**r.to_json(), "in_channel": r.package.id in held} for r in self.rendered]
        where = holdings.channel or "no channel"
        # Its objects follow its whole variant (no variant keys named).
        digest = objects_digests(self.root)[FLASH_ATTN_3.inputs_key] if holdings.objects else ""
        compiled = (CompiledStages(PIECES_STAGE, STAGE, digest),)
        return FamilyPlan(
            stages=jobs,
            compiled=compiled,
            objects=objects_keys(jobs, compiled, {r.package.id: r.package for r in self.rendered})
            if holdings.objects
            else {},
            listings={f"{STAGE}_packages": listing},
            stale=stale_packages(todo, present),
            tables=_table(listing),
            lines=(
                f"{len(todo)} {FLASH_ATTN_3.package} packages to build in {len(jobs[STAGE])} jobs, after "
                f"{len(jobs[PIECES_STAGE])} piece jobs; {len(held)} already in {where}",
            ),
            estimate=ESTIMATE,
        )


def wanted(matrix: Matrix, platform: str) -> Packages:
    """The platform's FA3 packages (`all`: every platform's), rendered from their generated variant files."""
    packages = [p for p in packages_of(matrix) if platform in ("all", p.platform)]
    return Packages(
        rendered=render(packages, recipe(matrix.variants_dir), matrix.variants_dir),
        root=matrix.variants_dir.parent,
    )


def cost_section(measurements: Measurements, matrix: Matrix, build_cost: BuildCost) -> cost_report.Fa3Report | None:
    """Its section of `faforge bench-build`: each package's cost and pieces from its timed TUs, if any."""
    if not fa3_measurements(measurements).samples:
        return None
    return cost_report.report(measurements, packages_of(matrix), build_cost)

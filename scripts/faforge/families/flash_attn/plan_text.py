"""flash-attn 2's lines in `faforge plan`'s text: its kernel packages' table, its summary, and the pip world's
lines (how many pip cells to build, and what each torch release adds to CI)."""

from __future__ import annotations

from faforge.table import format_table


def kernel_table(kernels: list[dict]) -> tuple[str, ...]:
    """The kernel packages the plan needs, each with its status and how many cells to build need it."""
    rows = [
        [k["id"], k["build_string_prefix"] + "*", "in the channel" if k["in_channel"] else "to build", len(k["cells"])]
        for k in kernels
    ]
    if not rows:
        return ()
    return (format_table(["kernel package", "build string", "status", "cells to build that need it"], rows) + "\n",)


def summary(jobs: tuple[int, int, int], todo: int, done: int, kernels: int, held: int, where: str) -> str:
    """`jobs`: how many cell, kernel and link jobs; `kernels` the kernel packages needed, `held` those there."""
    cell_jobs, kernel_jobs, link_jobs = jobs
    return (
        f"\n{todo} cells to build in {cell_jobs} "
        f"cell jobs, after {kernels - held} kernel packages in "
        f"{kernel_jobs} + {link_jobs} "
        f"link jobs ({held} kernel packages "
        f"already there); {done} cells already in {where}"
    )


def pip_lines(data: dict, wheel_jobs: int, index: str | None) -> tuple[str, ...]:
    """The pip cells' lines: how many to build, and what each torch release adds to CI."""
    lines = [
        f"{len(data['pip_to_build'])} pip cells to build in "
        f"{wheel_jobs} wheel jobs (glue and kernel wheel each, "
        "from the kernel packages above: no kernel TU compiled "
        f"for pip); {len(data['pip_in_index'])} already in {index or 'no index'}"
    ]
    if data["pip_not_built"]:
        lines.append(
            f"{len(data['pip_not_built'])} linux-aarch64 pip cells get no job yet: {data['pip_not_built'][0]['why']} "
            "(the table below counts them: what they will cost)"
        )
    rows = [
        [
            r["torch_minor"],
            r["world"],
            r["pip_cells"],
            r["wheel_jobs"],
            len(r["new_kernel_packages"]),
            r["kernel_jobs"],
            f"{r['runner_hours']:.1f}",
        ]
        for r in data["pip_cost"]["per_torch_release"]
    ]
    if rows:
        lines.append("\npip world: added runner hours per torch release")
        lines.append(
            format_table(
                ["torch", "world", "pip cells", "wheel jobs", "new kernel packages", "kernel jobs", "runner hours"],
                rows,
            )
        )
        lines.append(
            f"(a wheel job {data['pip_cost']['wheel_job_minutes']} min, as "
            "a conda cell's job; a new kernel package's jobs as planned "
            "above; both from variants/build-cost.yaml, setup and safety "
            "factor included. A kernel package a conda cell or an "
            "older torch minor needs is not counted again: it is built once and shared)"
        )
    return tuple(lines)

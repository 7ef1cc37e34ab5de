"""Rehearsal of a torch release on a real minor, offline: torch 2.13 from "released" to a bump PR.

The checkout is taken as it was before torch 2.13: its release rows and its kernel-abi row are removed and
the variant configs regenerated. Then, as the weekly workflow would, with nothing written by hand:

- `faforge bump --write` reads a mirror of conda-forge holding the real pytorch records of
  tests/fixtures/real_packages.yaml (2.13.0's among them), adds the rows they make and the kernel-abi
  row it measures from the real torch 2.13.0 PyPI wheel's headers, and regenerates;
- `faforge generate --check` agrees;
- `faforge plan` against a channel holding every other cell's flash-attn package and kernel packages
  schedules no kernel job and exactly 2.13's cells, and prints the runner time build-cost.yaml estimates.

The one network step is the fixture that fills the test cache with the wheel's four headers (range
reads), the flash-attn sdist and PyPI's listing of torch 2.13.0; the commands run with every proxy set
to a closed port, so only the loopback mirror and index answer. The test prints the diff the bump PR
would carry and the wall times of bump and plan.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from faforge.kernels import kernel_abi
from faforge.kernels.measure_abi import RAW_HEADER, fetch_headers, header_wheel
from faforge.matrix import load_matrix
from faforge.matrix.releases import dump_releases, header_of
from faforge.matrix.releases_read import load_releases
from faforge.matrix.render_cache import selected_cells
from faforge.release.plan.held import kernel_build
from tests.support.cache import cache_dir
from tests.support.http_server import serve_directory
from tests.support.measure_inputs import OFFLINE_ENV, measure_cache, simple_page
from tests.support.pypi import pypi_listing
from tests.support.real_records import torch_records, write_channel

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "tests" / "schemas"
MINOR, TORCH = "2.13", "2.13.0"

pytestmark = pytest.mark.slow


def faforge(root: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    environment = {**os.environ, "FAFORGE_ROOT": str(root), **(env or {})}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=environment, timeout=1200
    )
    return result, time.monotonic() - start


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A private faforge cache holding what the measurement reads, filled from the test cache (the one
    network step: range reads of the 2.13.0 wheel's headers and the sdist, both cached after once)."""
    wheel = header_wheel(list(pypi_listing("torch").values()), TORCH)
    headers = fetch_headers(wheel, cache_dir("torch-headers"))
    return measure_cache(tmp_path_factory.mktemp("faforge-cache"), {wheel.filename: headers})


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Path:
    """What the loopback server holds: the conda-forge mirror (real records) and a PEP 691 page of
    torch listing PyPI's real files of 2.13.0 (names, URLs and sha256 as PyPI gives them)."""
    root = tmp_path_factory.mktemp("served")
    write_channel(root, torch_records())
    simple_page(root, [f for name, f in pypi_listing("torch").items() if name.startswith(f"torch-{TORCH}-")])
    return root


def before_213(root: Path) -> None:
    """The checkout as it was before torch 2.13: no 2.13 release rows, no 2.13 kernel-abi row."""
    for name in ("variants", "recipes", "scripts"):  # scripts/: the variant files' input digests
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    path = root / "variants" / "releases.yaml"
    text = path.read_text()
    table = load_releases(path)
    path.write_text(
        dump_releases(
            replace(
                table,
                releases=tuple(r for r in table.releases if r.torch_minor != MINOR),
                pip_releases=tuple(r for r in table.pip_releases if r.torch_minor != MINOR),
            ),
            header_of(text),
        )
    )
    abi = root / "variants" / "kernel-abi.yaml"
    abi.write_text(re.sub(rf"- minor: '{re.escape(MINOR)}'\n(  .*\n)+", "", abi.read_text()))
    assert MINOR not in kernel_abi.load_kernel_abi(abi)


def channel_of_every_cell(root: Path, folder: Path) -> set[str]:
    """A channel folder listing the flash-attn package of every cell of `root`'s matrix and the kernel
    packages they link against, as they would be published; returns the cell ids."""
    matrix = load_matrix(root)
    rendered = selected_cells(matrix, "all")
    records = []
    for r in rendered:
        package = r.recipe["package"]
        records.append(
            {
                "name": package["name"],
                "version": str(package["version"]),
                "build": r.build_string,
                "build_number": int(r.build_string.rsplit("_", 1)[1]),
                "subdir": r.cell.platform,
                "depends": [],
            }
        )
    for k in matrix.kernels:  # the exact build the cells pin: its hash covers the kernel inputs' digest
        build = kernel_build(k, rendered)
        assert build and k.build_string_matches(build), (k.key.id, build)
        records.append(
            {
                "name": k.name,
                "version": k.version,
                "build": build,
                "build_number": k.build_number,
                "subdir": k.key.platform,
                "depends": [],
            }
        )
    write_channel(folder, records, name="published")
    return {r.cell.id for r in rendered}


def test_torch_213_goes_from_released_to_a_bump_pr_with_no_hand_written_file(tmp_path, cache, served, monkeypatch):
    root = tmp_path / "checkout"
    before_213(root)
    generated, _ = faforge(root, "generate")
    assert generated.returncode == 0, generated.stderr
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before torch 2.13")
    monkeypatch.setenv("FAFORGE_ROOT", str(root))
    published = tmp_path / "channel"
    other_cells = channel_of_every_cell(root, published)

    offline = {"FAFORGE_CACHE_DIR": str(cache), **OFFLINE_ENV}
    with serve_directory(served) as url:
        offline["FAFORGE_SIMPLE_INDEX"] = url + "simple"
        bump, bump_s = faforge(
            root,
            "bump",
            "--source",
            "conda-forge",
            "--channel-url",
            url + "conda-forge",
            "--write",
            "--json",
            env=offline,
        )
    assert bump.returncode == 0, bump.stderr
    report = json.loads(bump.stdout)
    jsonschema.validate(report, json.loads((SCHEMAS / "bump.json").read_text()))

    # The real rows: what the real 2.13.0 records publish (python 3.12 builds; cu130 also for sbsa aarch64).
    rows = [(r["torch"], r["cuda"], r["python"], r["platforms"]) for r in report["new_releases"]]
    assert rows == [(TORCH, "12.9", ["3.12"], ["linux-64"]), (TORCH, "13.0", ["3.12"], ["linux-64", "linux-aarch64"])]
    # The measured row: what kernel-abi.yaml in the repository records for 2.13 (measured by the test there).
    measured = kernel_abi.load_kernel_abi(root / "variants" / "kernel-abi.yaml")[MINOR]
    recorded = kernel_abi.load_kernel_abi(REPO / "variants" / "kernel-abi.yaml")[MINOR]
    assert replace(measured, reason=recorded.reason, source=None) == recorded
    assert measured.source == f"{pypi_listing('torch')[recorded.wheel].url}#torch/include/{RAW_HEADER}"

    regenerated, generate_s = faforge(root, "generate")
    check, _ = faforge(root, "generate", "--check")
    assert regenerated.returncode == 0 and check.returncode == 0, regenerated.stderr + check.stderr
    changed = git(root, "status", "--porcelain").split("\n")
    hand_written = [
        line
        for line in changed
        if line
        and not re.search(r"variants/(releases|kernel-abi|(flash-attn-3-)?linux-[^/]*)\.yaml$|variants/renders/", line)
    ]
    assert hand_written == [], "the bump changes only what bump and generate write"

    # FlashAttention-3's packages follow without a hand-written line: compiled against 2.13's headers, serving 2.13 too
    fa3 = {p["id"]: p for p in json.loads(faforge(root, "matrix", "--fa3", "--json")[0].stdout)}
    assert (
        fa3["linux-64/cu130/sm80_90a"]["headers_torch"] == TORCH
        and fa3["linux-64/cu130/sm80_90a"]["served_torch_minors"][-1] == MINOR
    )

    plan, plan_s = faforge(root, "plan", "--channel", str(published / "published"), "--json")
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    jsonschema.validate(data, json.loads((SCHEMAS / "plan.json").read_text()))
    new_cells = set(report["new_cells"])
    assert new_cells and all(f"/torch{MINOR}/" in c for c in new_cells)
    assert set(data["to_build"]) == new_cells and set(data["in_channel"]) == other_cells
    conda_kernel_jobs = [
        j
        for stage in ("kernels", "kernel_links")
        for c in data[stage]
        for j in c["include"]
        if not j["cell"].startswith("pypi/")
    ]
    assert conda_kernel_jobs == [], (
        "2.13's kernel packages are 2.10-2.12's (the pip world's own are not in this channel)"
    )
    cell_jobs = [j for chunk in data["flash_attn"] for j in chunk["include"]]
    assert sorted(j["cell"] for j in cell_jobs) == sorted(new_cells) and all(j["kernel-in-channel"] for j in cell_jobs)
    human, _ = faforge(root, "plan", "--channel", str(published / "published"))
    hours = data["estimated_runner_minutes"] / 60
    assert f"estimated runner time: {hours:.1f} hours" in human.stdout

    diff = git(root, "diff", "--", "variants/releases.yaml", "variants/kernel-abi.yaml")
    print(
        "\n=== the bump PR's diff: the facts (generated variant configs and render store below as --stat) ===\n" + diff
    )
    print(git(root, "diff", "--stat"))
    print(
        f"=== rehearsal: torch {TORCH}: {len(report['new_releases'])} release rows, kernel-abi row {measured.verdict} "
        f"({measured.offset_intragraph}), {len(new_cells)} new cells; plan: {len(data['kernels'])} kernel jobs, "
        f"{len(data['kernel_links'])} link jobs, {len(cell_jobs)} cell jobs, "
        f"{len(data['in_channel'])} cells in the channel; "
        f"estimated runner time {hours:.1f} h ({data['estimated_runner_minutes']} min); wall: bump {bump_s:.1f} s, "
        f"generate {generate_s:.1f} s, plan {plan_s:.1f} s ==="
    )
    print(human.stdout)

"""A local channel stays consistent through interrupts, concurrent publishers, bad neighbours and
file systems that refuse writes. Real .conda files (py-rattler-build), real `faforge` processes,
real signals, real tmpfs mounts; the invariant is checked here with hashlib, not with faforge's code."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faforge.channel.local import PackageSpec, assemble
from faforge.channel.repodata import query
from tests.release.test_publish import faforge, passed

FILE_COUNT = 6
# What CPython prints when SIGINT lands in its own startup (site.py, runpy), before `faforge` is imported.
CPYTHON_STARTUP = ("init_import_site: Failed to import the site module", "Could not import runpy module")


def default_sigint() -> None:
    """Children of a non-interactive shell's background job inherit SIGINT ignored; these must feel it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted_before_faforge(returncode: int, stderr: str) -> bool:
    """SIGINT inside CPython's startup (site, runpy finding faforge.__main__): its own message (exit 1), or an
    uncaught KeyboardInterrupt with only <frozen ...> frames, after which CPython ends itself with SIGINT (-2)."""
    frames = [line for line in stderr.splitlines() if line.strip().startswith("File ")]
    frozen_only = stderr.rstrip().endswith("KeyboardInterrupt") and frames and all('"<frozen ' in f for f in frames)
    return (returncode == 1 and any(m in stderr for m in CPYTHON_STARTUP)) or (
        returncode in (1, -2) and bool(frozen_only)
    )


# SIGINT in importlib's module-lock callback before faforge/__main__.py installed faforge.interrupts: CPython
# swallows it (unraisable) and the publish runs on. After that point faforge re-delivers it
# (tests/cli/test_interrupts.py).
SWALLOWED_IN_STARTUP = re.compile(
    r"Exception ignored in: <function _get_module_lock\.<locals>\.cb at 0x[0-9a-f]+>\n"
    r'Traceback \(most recent call last\):\n  File "<frozen importlib\._bootstrap>", line \d+, in cb\n'
    r"KeyboardInterrupt:? ?\n"
)


def build(i: int) -> str:
    return f"py311_torch2_14_cu130_cxx11abi1_h{i:07d}_0"


def make(directory: Path, i: int, payload: bytes | str = "") -> Path:
    return assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            build(i),
            "linux-64",
            depends=("python 3.11.*",),
            files={"share/flash-attn-standin.txt": payload or f"standin {i}\n"},
        ),
        directory,
    )


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> tuple[list[Path], Path]:
    """FILE_COUNT packages whose gates all passed, and their manifest."""
    root = tmp_path_factory.mktemp("packages")
    paths = [make(root / f"p{i}", i) for i in range(FILE_COUNT)]
    for path in paths:
        passed(root / "verification", path)
    return paths, root / "verification"


def publish(paths, manifest: Path, channel: Path, *extra):
    return faforge("publish", *map(str, paths), "--manifest", str(manifest), "--to", str(channel), *extra)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_consistent(channel: Path) -> dict[str, str]:
    """The invariant: each repodata.json parses whole, and each entry names a complete file with its sha256 and size."""
    indexed = {}
    for repodata in channel.glob("*/repodata.json"):
        data = json.loads(repodata.read_text())
        for name, record in {**data.get("packages", {}), **data.get("packages.conda", {})}.items():
            path = repodata.parent / name
            assert path.is_file(), f"{repodata} lists {name}, which is not there"
            assert path.stat().st_size == record["size"] and sha256(path) == record["sha256"], (
                f"{path} is not what {repodata} says"
            )
            indexed[f"{repodata.parent.name}/{name}"] = record["sha256"]
    return indexed


def assert_holds_all(channel: Path, paths: list[Path]) -> None:
    """Every package indexed with its sha256, as a client (py-rattler, which prefers shards and .zst) sees it."""
    expected = {p.name: sha256(p) for p in paths}
    assert {k.split("/")[1]: v for k, v in assert_consistent(channel).items()} == expected
    seen = {str(r.file_name): r.sha256.hex() for r in query(channel, ["flash-attn"], ["linux-64"])}
    assert seen == expected


def test_a_file_left_unindexed_is_indexed_by_the_next_publish(tmp_path, packages):
    """An interrupted publish leaves the file in linux-64/ but not in repodata.json; publishing again heals it."""
    paths, manifest = packages
    channel = tmp_path / "channel"
    assert publish(paths[:2], manifest, channel).returncode == 0
    shutil.copy(paths[2], channel / "linux-64")  # what a publish killed between copy and index leaves
    again = publish(paths[2:3], manifest, channel, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["packages"][0]["action"] == "published", "unchanged needs the index entry too"
    assert_holds_all(channel, paths[:3])
    same = publish(paths[2:3], manifest, channel, "--json")
    assert json.loads(same.stdout)["packages"][0]["action"] == "unchanged"
    assert not (channel / ".tmp").exists(), "no empty .tmp/ left behind"


def test_index_heals_missing_stale_and_orphaned_entries(tmp_path, packages):
    paths, manifest = packages
    channel = tmp_path / "channel"
    assert publish(paths[:3], manifest, channel).returncode == 0
    (channel / "linux-64" / paths[0].name).unlink()  # indexed without a file
    shutil.copy(make(tmp_path / "other", 1, "different bytes\n"), channel / "linux-64" / paths[1].name)  # wrong sha256
    shutil.copy(paths[3], channel / "linux-64")  # not indexed
    result = faforge("index", str(channel))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "1 not indexed" in result.stdout
        and "1 indexed without a file" in result.stdout
        and "1 with a wrong sha256" in result.stdout
    )
    indexed = assert_consistent(channel)
    assert indexed[f"linux-64/{paths[1].name}"] == sha256(channel / "linux-64" / paths[1].name)
    assert sorted(indexed) == sorted(f"linux-64/{p.name}" for p in paths[1:4])
    clean = faforge("index", str(channel))
    assert clean.returncode == 0 and "already right" in clean.stdout


def test_a_repodata_json_cut_short_is_rebuilt(tmp_path, packages):
    paths, manifest = packages
    channel = tmp_path / "channel"
    assert publish(paths[:2], manifest, channel).returncode == 0
    repodata = channel / "linux-64" / "repodata.json"
    repodata.write_text(repodata.read_text()[:100])
    assert faforge("index", str(channel)).returncode == 0
    assert_holds_all(channel, paths[:2])


def test_bad_neighbours_are_named_and_everything_else_is_indexed(tmp_path, packages):
    paths, manifest = packages
    channel = tmp_path / "channel"
    assert publish(paths[:1], manifest, channel).returncode == 0
    (channel / "linux-64" / "broken-1.0-0.conda").write_bytes(b"not a zip archive")
    shutil.copy(paths[2], channel / "linux-64" / "misnamed.conda")
    result = publish(paths[1:2], manifest, channel)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output, output
    assert "linux-64/broken-1.0-0.conda: not a readable conda package" in result.stdout
    assert "linux-64/misnamed.conda: its metadata says flash-attn-2.8.3.post2-" in result.stdout
    assert_holds_all(channel, paths[:2])
    index = faforge("index", str(channel))
    assert index.returncode == 1 and "broken-1.0-0.conda" in index.stdout and "Traceback" not in index.stderr
    page = faforge("page", "--channel", str(channel))
    assert page.returncode == 0 and "(2 packages, " in page.stdout, page.stdout + page.stderr


def test_a_package_that_cannot_be_indexed_is_refused_before_it_is_copied(tmp_path, packages):
    paths, manifest = packages
    renamed = tmp_path / "flash-attn-renamed.conda"
    shutil.copy(paths[0], renamed)
    passed(manifest, renamed)
    channel = tmp_path / "channel"
    result = publish([renamed], manifest, channel)
    assert result.returncode == 1 and "refused" in result.stdout and "cannot be indexed" in result.stdout, result.stdout
    assert not list(channel.glob("*/*.conda"))


@pytest.mark.slow  # FILE_COUNT publishes at once, each a faforge process (2 to 3 s of CPU)
@pytest.mark.parametrize("same", [True, False], ids=["same-package", "different-packages"])
def test_concurrent_publishers_are_serialised(tmp_path, packages, same):
    paths, manifest = packages
    channel = tmp_path / "channel"
    runs = [paths[:1] if same else [p] for p in paths]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faforge",
                "publish",
                *map(str, r),
                "--manifest",
                str(manifest),
                "--to",
                str(channel),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in runs
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert all(code == 0 for code, _ in results), results
    assert_holds_all(channel, paths[:1] if same else paths)
    assert not [p for p in channel.rglob(".*") if p.name != ".faforge.lock"], "no temporary file or staging folder left"


def _snapshot(channel: Path) -> dict[str, str]:
    return {
        str(p.relative_to(channel)): sha256(p)
        for p in sorted(channel.rglob("*"))
        if p.is_file() and p.name != ".faforge.lock"
    }


def test_linux_64_that_is_a_file_is_refused_and_the_channel_is_unchanged(tmp_path, packages):
    paths, manifest = packages
    channel = tmp_path / "channel"
    (channel / "noarch").mkdir(parents=True)
    (channel / "linux-64").write_text("oops")
    before = _snapshot(channel)
    result = publish(paths[:1], manifest, channel)
    assert (
        result.returncode == 2
        and result.stderr.count("\n") <= 2
        and "linux-64 is a file, not a folder" in result.stderr
    ), result.stderr
    assert "Traceback" not in result.stderr and _snapshot(channel) == before


# Runs inside its own mount namespace (unshare -m): mounts a small tmpfs over the channel, copies the
# prepared channel in, optionally makes it read-only, publishes, and reports before/after snapshots.
IN_MOUNT = r"""
import hashlib, json, shutil, subprocess, sys
from pathlib import Path
source, mount, size, read_only, option, *publish = sys.argv[1:]
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount], check=True)
shutil.copytree(source, mount, dirs_exist_ok=True)
if read_only == "ro":
    subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
snap = lambda: {str(p.relative_to(mount)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(Path(mount).rglob("*")) if p.is_file() and p.name != ".faforge.lock"}
before = snap()
result = subprocess.run([sys.executable, "-m", "faforge", "publish", *publish, option, mount],
                        capture_output=True, text=True)
print(json.dumps({"rc": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
                  "before": before, "after": snap()}))
"""


def publish_in_mount(
    tmp_path: Path, source: Path, size: str, read_only: bool, paths, manifest, option: str = "--to"
) -> dict:
    """Publish `paths` into a copy of `source` on a tmpfs of `size` (`option` names the folder: --to a channel,
    --index a wheel index)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to mount a tmpfs in a private mount namespace")
    mount = tmp_path / "mount"
    mount.mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or user namespaces): {probe.stderr.strip()}")
    result = subprocess.run(
        [
            "unshare",
            "-m",
            sys.executable,
            "-c",
            IN_MOUNT,
            str(source),
            str(mount),
            size,
            "ro" if read_only else "rw",
            option,
            *map(str, paths),
            "--manifest",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_read_only_channel_gives_one_line_and_changes_nothing(tmp_path, packages):
    paths, manifest = packages
    channel = tmp_path / "channel"
    assert publish(paths[:1], manifest, channel).returncode == 0
    seen = publish_in_mount(tmp_path, channel, "4m", True, paths[1:2], manifest)
    assert seen["rc"] == 2 and "read-only file system" in seen["stderr"] and "Traceback" not in seen["stderr"], seen
    # refused before anything is copied, in one line (the CLI contract)
    assert seen["stderr"].startswith("faforge publish: error: --to ") and seen["stderr"].count("\n") == 1
    assert seen["after"] == seen["before"]


def test_full_disk_gives_one_line_and_changes_nothing(tmp_path, packages):
    paths, manifest = packages
    channel = tmp_path / "channel"
    assert publish(paths[:1], manifest, channel).returncode == 0
    big = make(tmp_path / "big", 99, random.Random(13).randbytes(400_000))  # incompressible: larger than the tmpfs
    passed(manifest, big)
    seen = publish_in_mount(tmp_path, channel, "256k", False, [big], manifest)
    assert seen["rc"] == 2 and "No space left on device" in seen["stderr"] and "Traceback" not in seen["stderr"], seen
    assert seen["after"] == seen["before"]


@pytest.mark.slow
def test_interrupts_at_random_moments_never_break_the_invariant(tmp_path, packages):
    """SIGINT or SIGKILL at a random moment of a publish, >= 50 times (seeded, time-capped): after each,
    the invariant holds; a rerun then holds every package, indexed, with the right sha256."""
    paths, manifest = packages
    seed = int(os.environ.get("FAFORGE_FAULT_SEED", time.time_ns() % 100_000))
    budget = float(os.environ.get("FAFORGE_FAULT_SECONDS", "150"))
    rounds = int(os.environ.get("FAFORGE_FAULT_ROUNDS", "50"))
    print(f"fault injection seed {seed} (rerun with FAFORGE_FAULT_SEED={seed})")
    rng = random.Random(seed)
    prefilled = tmp_path / "prefilled"
    assert publish(paths[:2], manifest, prefilled).returncode == 0
    started = time.monotonic()
    timed = time.monotonic()
    assert publish(paths, manifest, tmp_path / "timing").returncode == 0
    span = time.monotonic() - timed
    done = startup = 0
    codes: dict[int, int] = {}
    while done < rounds and time.monotonic() - started < budget:
        channel = tmp_path / f"c{done}"
        shutil.copytree(prefilled, channel)
        signal_, delay = rng.choice([2, 9]), rng.uniform(0, span * 1.1)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faforge",
                "publish",
                *map(str, paths),
                "--manifest",
                str(manifest),
                "--to",
                str(channel),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,
        )
        time.sleep(delay)
        proc.send_signal(signal_)
        stderr = proc.communicate(timeout=120)[1]
        if interrupted_before_faforge(proc.returncode, stderr):
            stderr, startup = "", startup + 1  # interrupted inside CPython's own startup, before any faforge code
        else:
            if SWALLOWED_IN_STARTUP.match(stderr):
                stderr, startup = SWALLOWED_IN_STARTUP.sub("", stderr, count=1), startup + 1
            # -2: SIGINT before the interpreter installed its handler (it dies of the signal, like -9).
            assert proc.returncode in (0, 130, -2, -9), f"seed {seed} round {done}: exit {proc.returncode}: {stderr}"
        assert "Traceback" not in stderr and "panicked" not in stderr and "Fatal Python error" not in stderr, (
            f"seed {seed} round {done}: {stderr}"
        )
        codes[proc.returncode] = codes.get(proc.returncode, 0) + 1
        assert_consistent(channel)
        rerun = publish(paths, manifest, channel)
        assert rerun.returncode == 0, f"seed {seed} round {done}: {rerun.stdout}{rerun.stderr}"
        assert_holds_all(channel, paths)
        shutil.rmtree(channel)
        done += 1
    print(
        f"fault injection: {done} interrupts in {time.monotonic() - started:.0f}s, "
        f"exit codes {codes} ({startup} hit CPython's startup)"
    )
    assert codes.get(130), f"no SIGINT ever interrupted faforge itself (seed {seed}): {codes}"
    assert done >= min(rounds, 50), (
        f"only {done} interrupts fit in {budget}s (seed {seed}); raise FAFORGE_FAULT_SECONDS"
    )


@pytest.mark.slow
def test_publishes_into_fresh_channels_exit_cleanly(tmp_path, packages):
    """Today's py-rattler crashed 9 of 80 such processes at exit (134/139); each must exit 0, two at a time
    as CI runners sharing a machine would (seeded choice of packages, time-capped, seed printed)."""
    paths, manifest = packages
    seed = int(os.environ.get("FAFORGE_CRASH_SEED", time.time_ns() % 100_000))
    runs, budget = (
        int(os.environ.get("FAFORGE_CRASH_RUNS", "40")),
        float(os.environ.get("FAFORGE_CRASH_SECONDS", "120")),
    )
    print(f"crash loop seed {seed} (rerun with FAFORGE_CRASH_SEED={seed})")
    rng = random.Random(seed)
    started, codes = time.monotonic(), []
    while len(codes) < runs and time.monotonic() - started < budget:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "faforge",
                    "publish",
                    *map(str, rng.sample(paths, rng.randint(1, FILE_COUNT))),
                    "--manifest",
                    str(manifest),
                    "--to",
                    str(tmp_path / f"c{len(codes) + k}"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for k in range(2)
        ]
        for proc in procs:
            stderr = proc.communicate(timeout=120)[1]
            codes.append(proc.returncode)
            assert proc.returncode == 0, f"seed {seed} run {len(codes)}: exit {proc.returncode}: {stderr[-500:]}"
    print(f"crash loop: {len(codes)} publishes, exit codes {sorted(set(codes))}")
    assert len(codes) >= min(runs, 30), f"only {len(codes)} runs fit in {budget}s (seed {seed})"

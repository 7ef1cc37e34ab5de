"""Files faforge did not write (a channel's repodata.json, a plan, a gate result, a data file) are read
through faforge.untrusted: a link to /dev/zero, a FIFO, a 2 GB sparse file, JSON nested 10^5 deep,
a 10^5-digit integer, NaN, a repeated key. Real files, real `faforge` processes with a short timeout
(a hang fails the test instead of stalling the suite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.channel.local import PackageSpec, assemble, index
from faforge.errors import FaforgeError
from faforge.release.manifest import results_for
from tests.release.test_publish import passed
from tests.release.test_verify_kernels import KERNEL_FILE, kernel_package, split_flash_attn

QUICK_S = 30  # far more than any refusal needs; a read of /dev/zero or a blocked FIFO never ends

HOSTILE_JSON = {
    "nested": "[" * 100_000 + "]" * 100_000,
    "bigint": '{"packages": {}, "n": ' + "9" * 100_000 + "}",
    "nan": '{"info": {"subdir": "linux-64", "x": NaN}, "packages": {}, "packages.conda": {}}',
    "infinity": '{"packages": {}, "packages.conda": {"x-1-0.conda": {"size": Infinity, "sha256": "00"}}}',
    "duplicate": '{"packages": {}, "packages": {"evil.conda": {}}}',
}
HOSTILE = ["dev-zero", "fifo", "sparse", *HOSTILE_JSON]


def make_hostile(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(2 << 30)  # 2 GiB, no blocks on disk
    else:
        path.write_text(HOSTILE_JSON[kind])


def faforge(*args, env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-m", "faforge", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=QUICK_S,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"faforge {' '.join(map(str, args))}: no exit within {QUICK_S} s (a blocking or endless read)")


def package(directory: Path, build: str = "py311_torch2_14_cu130_cxx11abi1_h0000001_0") -> Path:
    return assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            build,
            "linux-64",
            depends=("python 3.11.*",),
            files={"share/standin.txt": "standin\n"},
        ),
        directory,
    )


def strict_entries(repodata: Path) -> set[str]:
    """The package names of a repodata.json that parses strictly (no NaN, no repeated key)."""

    def unique(pairs):
        assert len(dict(pairs)) == len(pairs), "a repeated key"
        return dict(pairs)

    def no_constant(name):
        raise AssertionError(name)

    data = json.loads(repodata.read_text(), parse_constant=no_constant, object_pairs_hook=unique)
    return set(data["packages"]) | set(data["packages.conda"])


# py-rattler parses a channel's JSON for plan (serde: no NaN, a depth limit); what it cannot guard is the file itself.
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "sparse", "nested"])
def test_plan_refuses_a_hostile_local_repodata_fast(tmp_path, kind):
    channel = tmp_path / "ch"
    make_hostile(channel / "linux-64" / "repodata.json", kind)
    (channel / "noarch").mkdir()
    (channel / "noarch" / "repodata.json").write_text(
        '{"info": {"subdir": "noarch"}, "packages": {}, "packages.conda": {}}'
    )
    result = faforge("plan", "--channel", channel, "--platform", "linux-64")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert str(channel) in result.stderr and " — " in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["index", "publish"])
@pytest.mark.parametrize("kind", HOSTILE)
def test_index_and_publish_rebuild_a_hostile_repodata_never_keep_it(tmp_path, kind, command):
    """The hostile file is an index faforge did not write: it is rebuilt from the channel's files (or the
    channel is refused, naming it), never read without end, never kept."""
    channel = tmp_path / "ch"
    published = package(channel)
    index(channel)
    repodata = channel / "linux-64" / "repodata.json"
    make_hostile(repodata, kind)
    if command == "index":
        result = faforge("index", channel)
        expected = {published.name}
    else:
        new = package(tmp_path / "new", build="py311_torch2_14_cu130_cxx11abi1_h0000002_0")
        passed(tmp_path / "verification", new)
        result = faforge("publish", new, "--to", channel, "--manifest", tmp_path / "verification")
        expected = {published.name, new.name}
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 2:  # refused: the message names the file
        assert "repodata.json" in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert repodata.is_file() and not repodata.is_symlink() and strict_entries(repodata) == expected


@pytest.mark.parametrize("kind", HOSTILE)
def test_build_refuses_a_hostile_plan_file_fast(tmp_path, kind):
    plan = tmp_path / "plan.json"
    make_hostile(plan, kind)
    result = faforge("build", "--plan", plan, "--output-dir", tmp_path / "out")
    assert result.returncode == 2 and "--plan" in result.stderr and str(plan) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("kind", ["sparse", *HOSTILE_JSON])
def test_a_hostile_gate_result_is_refused_naming_it(tmp_path, kind):
    sha256 = "a" * 64
    entry = tmp_path / sha256 / "abi.json"
    make_hostile(entry, kind)
    with pytest.raises(FaforgeError) as caught:
        results_for(tmp_path, sha256)
    assert caught.value.exit_code == 2 and str(entry) in caught.value.line() and " — " in caught.value.line()


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "sparse", "nested-yaml"])
def test_bench_build_refuses_a_hostile_data_file(tmp_path, kind):
    data = tmp_path / "measurements.yaml"
    if kind == "nested-yaml":
        data.write_text("[" * 100_000 + "]" * 100_000)
    else:
        make_hostile(data, kind)
    result = faforge("bench-build", "--data", data)
    assert result.returncode == 2 and str(data) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_kernel_record_without_sha256_is_exit_2_naming_channel_and_record(tmp_path):
    """A local channel folder's index is a local file: bad input (2), as README's caps section says; from a
    server the same record is exit 4."""
    fa = split_flash_attn(tmp_path / "out", subdir="linux-aarch64")
    channel = tmp_path / "channel"
    kernel_package(channel, subdir="linux-aarch64")
    index(channel)
    folder = channel / "linux-aarch64"
    for name in ("repodata.json.zst", "repodata_shards.msgpack.zst"):  # py-rattler would read these first
        (folder / name).unlink(missing_ok=True)
    data = json.loads((folder / "repodata.json").read_text())
    for record in data["packages.conda"].values():
        del record["sha256"]
    (folder / "repodata.json").write_text(json.dumps(data))
    result = faforge(
        "verify",
        fa,
        "--gates",
        "gpu",
        "--kernel-channel",
        channel,
        "--manifest",
        tmp_path / "v",
        env={"FAFORGE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 2, result.stderr
    assert str(channel) in result.stderr and KERNEL_FILE in result.stderr and "sha256" in result.stderr
    assert "Traceback" not in result.stderr and " — " in result.stderr

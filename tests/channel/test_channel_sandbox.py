"""The channel is a sandbox (the untrusted-input rules): a package's own subdir, links in the channel
and hostile archives never make faforge write outside the channel folder. Each case runs the real
CLI (in-process) on real .conda files (py-rattler-build, then rewritten by tests/support/hostile_package)
and a real index, and compares a snapshot of the channel's whole parent folder, link targets included,
before and after: nothing outside the channel may change."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

import pytest

from faforge import cli
from faforge.channel.local import PackageSpec, assemble
from faforge.packagefile import sha256_of
from faforge.release.manifest import record
from faforge.release.package import facts_from_metadata
from tests.support.hostile_package import member, rewrite

BUILD = "py311_torch2_14_cu130_cxx11abi1_h1234567_0"
GATES = ("abi", "import", "gpu")


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below `root`, links not followed: a link by its target, a file by its sha256."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def passed_as_is(manifest: Path, path: Path, subdir: str = "linux-64") -> None:
    """Record every gate passed for the file's sha256 without faforge reading its metadata (which
    refuses hostile ones): on the old code only the gates stood between it and the channel."""
    facts = facts_from_metadata(
        path=path,
        name="flash-attn",
        version="2.8.3.post2",
        build=BUILD,
        subdir=subdir,
        depends=(),
        sha256=sha256_of(path),
    )
    for gate in GATES:
        record(manifest, facts, gate, "passed", "test")


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    return assemble(
        PackageSpec("flash-attn", "2.8.3.post2", BUILD, "linux-64", depends=("python 3.11.*",)),
        tmp_path_factory.mktemp("real"),
    )


@pytest.fixture
def world(tmp_path) -> Path:
    """world/a/ch is the channel; world/target stands for `/` (what a link points to); world/x is
    where `../../x` from the channel lands."""
    (tmp_path / "world" / "a" / "ch").mkdir(parents=True)
    (tmp_path / "world" / "target").mkdir()
    (tmp_path / "world" / "target" / "victim.part").write_text("must survive\n")
    (tmp_path / "world" / "target" / ".victim.conda.1.ab.part").write_text("must survive\n")
    return tmp_path / "world"


def run(argv, capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def outside(world: Path, snap: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in snap.items() if not k.startswith("a/ch/") and k != "a/ch"}


SUBDIR_ATTACKS = {
    "up-two": {"subdir": "../../x"},
    "up-one": {"subdir": "../x"},
    "dot": {"subdir": "."},
    "empty": {"subdir": ""},
    "through": {"subdir": "linux-64/../../../x"},
    "absolute": {"subdir": "ABSOLUTE"},
    "unknown-platform": {"subdir": "osx-64"},
    "noarch-with-arch": {"subdir": "noarch"},
    "wrong-arch": {"subdir": "linux-aarch64"},
    "number": {"subdir": 5},
}


@pytest.mark.parametrize("attack", SUBDIR_ATTACKS, ids=list(SUBDIR_ATTACKS))
def test_a_package_subdir_cannot_leave_the_channel(attack, real, world, tmp_path, capsys):
    patch = {k: (str(world / "x") if v == "ABSOLUTE" else v) for k, v in SUBDIR_ATTACKS[attack].items()}
    hostile = rewrite(real, tmp_path / "in" / real.name, patch=patch)
    manifest = tmp_path / "verification"
    passed_as_is(manifest, hostile)
    channel = world / "a" / "ch"
    before = snapshot(world)
    code, out, err = run(["publish", hostile, "--manifest", manifest, "--to", channel], capsys)
    assert code == 2, (out, err)
    assert f'{hostile}: info/index.json: "subdir"' in err and "Traceback" not in err, err
    assert "--platform" not in err
    assert snapshot(world) == before, "nothing written anywhere, the channel included"
    verify = run(["verify", hostile, "--manifest", tmp_path / "v2"], capsys)
    assert verify[0] == 2 and '"subdir"' in verify[2] and "--platform" not in verify[2], verify


def test_index_leaves_a_misplaced_package_out(real, world, tmp_path, capsys):
    """A package whose metadata names another subdir, found already in the channel: named, not indexed (exit 1)."""
    channel = world / "a" / "ch"
    (channel / "linux-64").mkdir()
    rewrite(real, channel / "linux-64" / real.name, patch={"subdir": "../../x"})
    before = outside(world, snapshot(world))
    code, out, err = run(["index", channel], capsys)
    assert code == 1 and f"not indexed: {channel}/linux-64/{real.name}" in out and "\"subdir\" is '../../x'" in out, (
        out,
        err,
    )
    assert outside(world, snapshot(world)) == before


# Each: what to make a link inside the channel (relative to it), and where it points (relative to world).
LINKS = {
    "subdir-to-root": ("linux-64", "target"),
    "noarch-to-root": ("noarch", "target"),
    "repodata": ("linux-64/repodata.json", "target/victim.part"),
    "repodata-zst": ("linux-64/repodata.json.zst", "target/victim.part"),
    "shards": ("linux-64/shards", "target"),
    "lock": (".faforge.lock", "target/lock"),
    "staging": (".faforge-index-1-ab", "target"),
    "package-file": ("linux-64/PACKAGE", "pkg.conda"),
    "part-file": ("linux-64/.victim.conda.1.ab.part", "target/.victim.conda.1.ab.part"),
}


@pytest.mark.parametrize("command", ["index", "publish", "publish-dry-run"])
@pytest.mark.parametrize("case", LINKS, ids=list(LINKS))
def test_a_link_in_the_channel_is_refused_and_nothing_outside_changes(case, command, real, world, tmp_path, capsys):
    channel = world / "a" / "ch"
    manifest = tmp_path / "verification"
    passed_as_is(manifest, real)
    (world / "pkg.conda").write_bytes(real.read_bytes())
    name, target = LINKS[case]
    link = channel / name.replace("PACKAGE", "other-1.0-0.conda")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(world / target)
    before = snapshot(world)
    argv = ["index", channel] if command == "index" else ["publish", real, "--manifest", manifest, "--to", channel]
    code, out, err = run(argv + (["--dry-run"] if command == "publish-dry-run" else []), capsys)
    assert code == 2, (out, err)
    assert "is a symbolic link" in err and "Traceback" not in err and " — " in err, err
    assert snapshot(world) == before


HOSTILE_MEMBERS = {
    "absolute": ([member("/tmp/evil")], "is not a relative path"),
    "dot-dot": ([member("info/../../evil")], "is not a relative path"),
    # No link cases in info/: rattler-build's own packages hold info/licenses/ files as absolute links (the
    # conda world's real build, tests/conda_world/test_recipe_in_world.py); payload links are checked by the
    # harness (tests/cli/hostile_classes.yaml, archive member-symlink/-hardlink).
    "under-a-link": (
        [member("info/d", kind=tarfile.SYMTYPE, link="/tmp"), member("info/d/evil", b"x")],
        "lies under a symbolic link",
    ),
    "duplicate": ([member("info/index.json", b'{"name": "other"}')], "appears twice"),
}
HOSTILE_INDEX = {
    "subdir-number": ({"subdir": 5}, '"subdir" is 5'),
    "depends-string": ({"depends": "x"}, '"depends" is "x"'),
    "name-number": ({"name": 3}, '"name" is 3'),
    "name-path": ({"name": "../x"}, '"name" is "../x", not a plain name'),
    "build-list": ({"build": ["a"]}, '"build" is ["a"]'),
    "nan": (b'{"name": "flash-attn", "build_number": NaN}', "NaN is not a number JSON allows"),
    "infinity": (b'{"name": "flash-attn", "size": -Infinity}', "-Infinity is not a number JSON allows"),
    "not-an-object": (b"[1, 2]", "a JSON list, not an object"),
    "oversized": (b'{"name": "' + b"x" * (1 << 20) + b'"}', "over the cap"),
}


@pytest.mark.parametrize("case", [*HOSTILE_MEMBERS, *HOSTILE_INDEX])
def test_a_hostile_archive_is_exit_2_naming_the_file_and_the_part(case, real, world, tmp_path, capsys):
    if case in HOSTILE_MEMBERS:
        extra, says = HOSTILE_MEMBERS[case]
        hostile = rewrite(real, tmp_path / "in" / real.name, extra=extra)
    else:
        change, says = HOSTILE_INDEX[case]
        hostile = rewrite(
            real, tmp_path / "in" / real.name, **({"index": change} if isinstance(change, bytes) else {"patch": change})
        )
    manifest = tmp_path / "verification"
    passed_as_is(manifest, hostile)
    channel = world / "a" / "ch"
    before = snapshot(world)
    for argv in (
        ["publish", hostile, "--manifest", manifest, "--to", channel],
        ["verify", hostile, "--manifest", tmp_path / "v2"],
    ):
        code, out, err = run(argv, capsys)
        assert code == 2 and err.startswith(f"faforge {argv[0]}: error: {hostile}: ") and says in err, (
            argv[0],
            out,
            err,
        )
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert snapshot(world) == before
    (channel / "linux-64").mkdir()
    os.link(hostile, channel / "linux-64" / real.name)
    code, out, err = run(["index", channel], capsys)
    assert (
        code == 1
        and f"not indexed: {channel}/linux-64/{real.name}: not a readable conda package" in out
        and says in out
    ), (out, err)

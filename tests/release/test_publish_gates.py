"""No package reaches a channel past its gates (the untrusted-input rules): however the required-gate set
is spelled, and through whichever source (--require or $FAFORGE_REQUIRE), a degenerate set is exit 2
naming the source the user really used, and nothing is copied. Below the CLI, the layers that copy
(release.publish.publish, targets.upload) re-check the manifest for the exact sha256 themselves.
Real .conda files (py-rattler-build), the real CLI in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from faforge import cli
from faforge.errors import FaforgeError
from faforge.release.manifest import results_for
from faforge.release.package import read_package
from faforge.release.publish.channel import Decision, publish
from faforge.release.publish.targets import parse_target, upload
from tests.release.test_publish import package, passed

# Each is refused: empty, blank, only commas, a gap an unset variable leaves ($A,$B,abi / abi,$GPU),
# an unknown gate, a duplicate.
DEGENERATE = ["", " ", ",", ",,", " , ", ",,abi", "abi,", "abi,,gpu", "nope", "abi,nope", "abi,abi", "ABI"]


def run(argv, capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def unverified(tmp_path_factory) -> tuple[Path, Path]:
    """A real package and a manifest where it passed no gate at all (every gate `not run`)."""
    root = tmp_path_factory.mktemp("unverified")
    path = package(root / "out")
    (root / "verification").mkdir()
    return path, root / "verification"


@pytest.mark.parametrize("spelling", DEGENERATE)
@pytest.mark.parametrize("source", ["--require", "$FAFORGE_REQUIRE"])
def test_a_degenerate_required_set_is_exit_2_naming_its_source(
    spelling, source, unverified, tmp_path, capsys, monkeypatch
):
    path, manifest = unverified
    channel = tmp_path / "channel"
    argv = ["publish", str(path), "--manifest", str(manifest), "--to", str(channel)]
    monkeypatch.delenv("FAFORGE_REQUIRE", raising=False)
    if source == "--require":
        argv += ["--require", spelling]
    else:
        monkeypatch.setenv("FAFORGE_REQUIRE", spelling)
    code, out, err = run(argv, capsys)
    assert code == 2, (out, err)
    assert err.startswith(f"faforge publish: error: {source} ") and len(err.strip().splitlines()) == 1, err
    other = "$FAFORGE_REQUIRE" if source == "--require" else "--require"
    assert other not in err.split(" — ")[0], "the error must name the source the user used, not the other one"
    assert " — " in err, "and say what to do"
    assert not channel.exists(), "nothing copied, not even an empty channel"


def test_the_option_wins_over_the_environment(unverified, tmp_path, capsys, monkeypatch):
    """--require abi with a broken $FAFORGE_REQUIRE: the option is what counts (the package passed abi only)."""
    path, _ = unverified
    manifest = tmp_path / "verification"
    passed(manifest, path, ("abi",))
    monkeypatch.setenv("FAFORGE_REQUIRE", ",")
    code, _, err = run(
        ["publish", str(path), "--manifest", str(manifest), "--to", str(tmp_path / "ch"), "--require", "abi"], capsys
    )
    assert code == 0, err
    assert (tmp_path / "ch" / "linux-64" / path.name).is_file()


def test_spaces_around_names_are_a_clean_list(unverified, tmp_path, capsys, monkeypatch):
    path, _ = unverified
    manifest = tmp_path / "verification"
    passed(manifest, path, ("abi", "import"))
    monkeypatch.setenv("FAFORGE_REQUIRE", "abi, import")
    code, out, err = run(
        ["publish", str(path), "--manifest", str(manifest), "--to", str(tmp_path / "ch"), "--json"], capsys
    )
    assert code == 0, err
    assert '"required": [\n    "abi",\n    "import"\n  ]' in out


def test_publish_refuses_an_unverified_package_and_says_to_verify(unverified, tmp_path, capsys, monkeypatch):
    path, manifest = unverified
    monkeypatch.delenv("FAFORGE_REQUIRE", raising=False)
    code, out, _ = run(["publish", str(path), "--manifest", str(manifest), "--to", str(tmp_path / "ch")], capsys)
    assert code == 1 and "refused" in out
    assert f"run `faforge verify {path} --manifest {manifest}` first" in out, out
    assert not (tmp_path / "ch" / "linux-64" / path.name).exists()


def test_a_forged_decision_copies_nothing(unverified, tmp_path):
    """A caller that skips judge() and says `allowed` itself is stopped where the file is copied."""
    path, manifest = unverified
    facts = read_package(path)
    forged = Decision(facts, {}, True, "trust me")
    channel = tmp_path / "ch"
    for required in [("abi", "import", "gpu"), ()]:
        for dry_run, force in [(False, False), (False, True), (True, False)]:
            with pytest.raises(FaforgeError) as caught:
                publish(
                    [forged],
                    parse_target(str(channel)),
                    manifest_dir=manifest,
                    required=required,
                    dry_run=dry_run,
                    force=force,
                )
            assert path.name in caught.value.message or "names no gate" in caught.value.message
            assert not (channel / "linux-64" / path.name).exists()


def test_a_forged_upload_sends_nothing(unverified, monkeypatch):
    """targets.upload checks the manifest itself, before it even asks for the token."""
    path, manifest = unverified
    facts = read_package(path)
    monkeypatch.setenv("PREFIX_API_KEY", "secret")
    target = parse_target("prefix:http://127.0.0.1:9/channel")  # nothing listens: a send would be exit 4, not this
    with pytest.raises(FaforgeError) as caught:
        upload(target, [facts], manifest_dir=manifest, required=("abi",), force=False)
    assert caught.value.exit_code == 1 and "abi: not run" in caught.value.message


def test_a_file_changed_after_its_gates_is_not_copied(tmp_path):
    """Gates passed for one sha256; the file at that path now has other bytes: publish copies nothing."""
    path = package(tmp_path / "out", "one")
    manifest = tmp_path / "verification"
    passed(manifest, path)
    facts = read_package(path)
    other = package(tmp_path / "other", "two")
    path.write_bytes(other.read_bytes())
    assert results_for(manifest, facts.sha256)
    channel = tmp_path / "ch"
    with pytest.raises(FaforgeError) as caught:
        publish(
            [Decision(facts, results_for(manifest, facts.sha256), True, "judged")],
            parse_target(str(channel)),
            manifest_dir=manifest,
            required=("abi", "import", "gpu"),
            dry_run=False,
            force=False,
        )
    assert "changed since" in caught.value.message
    assert not (channel / "linux-64" / path.name).exists()

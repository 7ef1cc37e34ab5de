"""A flash-attn-3 package reaches a channel only through the gates every package passes:
publish judges it by the verification manifest of its exact sha256, as it does a flash-attn cell, and no
layer below the CLI lets it through unverified. Real .conda files (py-rattler-build) shaped as the
flash-attn-3 recipe makes them, a real `faforge verify` writing the manifest, a real file:// channel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faforge.channel.local import PackageSpec, assemble
from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.matrix import load_matrix
from faforge.release.manifest import results_for
from faforge.release.package import read_package
from faforge.release.publish.channel import Decision, publish
from faforge.release.publish.targets import parse_target, upload
from tests.release.test_publish import faforge, passed


def fa3_package(directory: Path, text: str = "one") -> Path:
    """The matrix's linux-64 cu130 FA3 package's shape: its name, version, build-string head and run requirements."""
    fa3 = next(p for p in packages_of(load_matrix()) if p.id == "linux-64/cu130/sm80_90a")
    build = f"{fa3.build_string_head}_faforge_h1a2b3c4_0"
    return assemble(
        PackageSpec(
            "flash-attn-3",
            "3.0.0",
            build,
            "linux-64",
            depends=("python >=3.10", f"pytorch >={fa3.min_torch} cuda*", "cuda-version >=13.0,<14"),
            files={"site-packages/flash_attn_3/standin.txt": text},
        ),
        directory,
    )


@pytest.fixture
def built(tmp_path) -> tuple[Path, Path, Path]:
    return fa3_package(tmp_path / "out"), tmp_path / "verification", tmp_path / "channel"


def test_an_fa3_package_without_verification_is_refused_and_nothing_is_copied(built):
    path, manifest, channel = built
    manifest.mkdir()
    result = faforge("publish", str(path), "--manifest", str(manifest), "--to", str(channel), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    [entry] = json.loads(result.stdout)["packages"]
    assert entry["action"] == "refused" and entry["gates"] == {}
    assert entry["detail"] == "abi: not run; import: not run; gpu: not run"
    assert not (channel / "linux-64" / path.name).exists()
    human = faforge("publish", str(path), "--manifest", str(manifest), "--to", str(channel))
    assert f"hint: {path.name}: run `faforge verify {path} --manifest {manifest}` first" in human.stdout


def test_what_verify_records_for_an_fa3_package_today_does_not_publish_it(built):
    """`faforge verify` (its CPU gates) without --against: the stable-ABI gate cannot see the torch range, so `skipped`,
    as is the import gate, not written for this family yet. Skipped is not passed, under the default gates or `--require
    abi`."""
    path, manifest, channel = built
    verified = faforge("verify", str(path), "--manifest", str(manifest))
    assert verified.returncode == 3, verified.stdout + verified.stderr
    assert {g: r.result for g, r in results_for(manifest, read_package(path).sha256).items()} == {
        "abi": "skipped",
        "import": "skipped",
    }
    for require in ([], ["--require", "abi"]):
        result = faforge("publish", str(path), "--manifest", str(manifest), "--to", str(channel), *require)
        assert result.returncode == 1 and "refused" in result.stdout, result.stdout + result.stderr
        assert not (channel / "linux-64" / path.name).exists()


def test_a_failed_gate_refuses_it_whatever_is_required_and_passed_gates_publish_it(built):
    path, manifest, channel = built
    passed(manifest, path, ("abi", "import"))
    passed(manifest, path, ("gpu",), result="failed")
    refused = faforge("publish", str(path), "--manifest", str(manifest), "--to", str(channel), "--require", "abi")
    assert refused.returncode == 1 and "gpu: failed" in refused.stdout
    passed(manifest, path, ("gpu",))
    published = faforge("publish", str(path), "--manifest", str(manifest), "--to", str(channel))
    assert published.returncode == 0, published.stdout + published.stderr
    assert (channel / "linux-64" / path.name).read_bytes() == path.read_bytes()
    listed = json.loads((channel / "linux-64" / "repodata.json").read_text())["packages.conda"]
    assert listed[path.name]["name"] == "flash-attn-3"


def test_no_layer_below_the_cli_copies_or_uploads_an_unverified_fa3_package(built):
    """A caller that skipped judge (a Decision forged `allowed`) and a direct upload are each stopped by the
    manifest re-check for the exact sha256 (exit 1), before any copy, token or network."""
    path, manifest, channel = built
    manifest.mkdir()
    facts = read_package(path)
    forged = Decision(facts, {}, True, "forged")
    with pytest.raises(FaforgeError, match="has not passed its gates") as caught:
        publish(
            [forged],
            parse_target(str(channel)),
            manifest_dir=manifest,
            required=("abi", "import", "gpu"),
            dry_run=False,
            force=False,
        )
    assert caught.value.exit_code == 1 and not channel.exists()
    with pytest.raises(FaforgeError, match="has not passed its gates"):
        upload(
            parse_target("prefix:https://prefix.invalid/channel"),
            [facts],
            manifest_dir=manifest,
            required=("abi",),
            force=False,
        )

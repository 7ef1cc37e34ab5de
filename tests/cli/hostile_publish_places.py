"""The placeholders of hostile_classes.yaml's block on publishing and healing the wheel index: gate records
that are not records (conda and pip side), wheels and .conda packages with a bomb or a declared-huge
member, wheels whose RECORD is missing or lies, two files of one wheel name, and wheel index roots with
foreign files in them. Made once per session (the `places` fixture), with faforge's own API."""

from __future__ import annotations

from pathlib import Path

from faforge.pipindex.layout import FILES
from faforge.pipwheel.facts import read_wheel
from faforge.release.manifest import record
from faforge.release.package import read_package
from faforge.release.publish.wheels import publish_wheel_files
from tests.cli.hostile_class_places import BUILD, INDEX, NAME, VERSION
from tests.release.test_gate_records import make_record
from tests.support import hostile_wheels as hw
from tests.support import tiny_wheels as tw

RECORD_KINDS = ("unknown-key", "missing-key", "result-int", "fifo", "device")
HAND_MADE = b"<html><body><a href='https://example.invalid/x.whl'>x.whl</a></body></html>\n"


def _key(kind: str) -> str:
    return kind.replace("-", "_")


def _records(tmp: Path, side: str, sha256: str, record_one) -> dict[str, str]:
    """pub_records_SIDE_KIND: a manifest whose gates passed for `sha256` but for abi.json, hostile as KIND."""
    found = {}
    for kind in RECORD_KINDS:
        manifest = tmp / f"records-{side}-{kind}"
        record_one(manifest)
        make_record(manifest / sha256 / "abi.json", sha256, kind)
        found[f"pub_records_{side}_{_key(kind)}"] = str(manifest)
    return found


def _passed(manifest: Path, *wheels: Path) -> str:
    for wheel in wheels:
        tw.record_gates(manifest, wheel)
    return str(manifest)


def publish_places(tmp: Path, conda: Path) -> dict[str, str]:
    tmp = tmp / "publish-heal"
    good = tw.build_wheel(tw.kernel(), tmp / "good")
    glue = tw.build_wheel(tw.glue("2.11"), tmp / "good")
    places = {
        "pub_kernel": str(good),
        "pub_glue": str(glue),
        "pub_manifest_good": _passed(tmp / "manifest-good", good, glue),
    }
    conda_facts = read_package(conda)
    places.update(
        _records(
            tmp,
            "conda",
            conda_facts.sha256,
            lambda m: [record(m, conda_facts, g, "passed", "hostile harness") for g in ("abi", "import", "gpu")],
        )
    )
    places.update(_records(tmp, "pip", read_wheel(good).sha256, lambda m: tw.record_gates(m, good)))
    places.update(
        pub_wheel_bomb=str(hw.bomb_wheel(good, tmp / "bomb")),
        pub_wheel_huge=str(hw.declared_huge_wheel(good, tmp / "huge")),
    )
    filename = f"{NAME}-{VERSION}-{BUILD}.conda"
    places["pub_conda_bomb"] = str(
        hw.conda_with_payload(
            tmp / "conda-bomb" / filename, INDEX, hw.tar_member("share/zeros.bin", hw.BOMB_BYTES) + bytes(1024)
        )
    )
    places["pub_conda_huge"] = str(
        hw.conda_with_payload(
            tmp / "conda-huge" / filename, INDEX, hw.tar_member("share/huge.bin", hw.HUGE_BYTES, data=b"x" * 4096)
        )
    )
    for how in hw.RECORD_LIES:
        places[f"pub_record_{_key(how)}"] = str(hw.record_lie(good, tmp / f"record-{how}", how))
    other = tw.build_wheel(tw.kernel(payload="y = 2\n"), tmp / "same-name")
    places.update(
        pub_same_a=str(good), pub_same_b=str(other), pub_manifest_same=_passed(tmp / "manifest-same", good, other)
    )
    blocked = tmp / "root-foreign-page"
    (blocked / "torch2.11-cu130").mkdir(parents=True)
    (blocked / "torch2.11-cu130" / "index.html").write_bytes(HAND_MADE)
    places["pub_root_foreign_page"] = str(blocked)
    root = tmp / "root-foreign"
    publish_wheel_files(
        [str(glue), str(good)],
        root,
        manifest_dir=Path(places["pub_manifest_good"]),
        required=("abi", "import", "gpu"),
        dry_run=False,
        force=False,
    )
    assert (root / FILES / glue.name).is_file()
    for rel, data in {
        "README.md": b"our wheels\n",
        "torch2.10-cu130/index.html": HAND_MADE,
        "torch2.11-cu130/docs/index.html": HAND_MADE,
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    places["pub_root_foreign"] = str(root)
    return places

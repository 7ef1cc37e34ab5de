"""The real conda-forge pytorch records of tests/fixtures/real_packages.yaml, as a channel would list them.

Each record there is copied from a published package (its `source` says where); `depends` here joins
the stood-in and the other real dependencies, as the record has them.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "real_packages.yaml"
RECORD_KEYS = ("name", "version", "build", "build_number", "subdir", "constrains", "track_features")


def torch_records(channel: str = "conda-forge") -> list[dict]:
    """repodata entries of every `pytorch` record of `channel` in the fixture."""
    packages = yaml.safe_load(FIXTURE.read_text())["packages"]
    return [
        {
            **{k: p[k] for k in RECORD_KEYS if k in p},
            "depends": [*p.get("depends", ()), *p.get("depends_not_stood_in", ())],
        }
        for p in packages
        if p["name"] == "pytorch" and p["channel"] == channel
    ]


def write_channel(root: Path, records: list[dict], name: str = "conda-forge") -> Path:
    """root/name/<subdir>/repodata.json listing `records` (no package files: bump reads repodata only)."""
    channel = root / name
    by_subdir: dict[str, dict] = {"noarch": {}}
    for r in records:
        entry = {"md5": "0" * 32, "sha256": "0" * 64, "size": 1, **r}
        by_subdir.setdefault(r["subdir"], {})[f"{r['name']}-{r['version']}-{r['build']}.conda"] = entry
    for subdir, entries in by_subdir.items():
        (channel / subdir).mkdir(parents=True)
        (channel / subdir / "repodata.json").write_text(
            json.dumps({"info": {"subdir": subdir}, "packages": {}, "packages.conda": entries})
        )
    return channel

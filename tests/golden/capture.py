"""What faforge tells its users, captured whole, so a refactoring of the house can prove it changed nothing.

`python -m tests.golden.capture` writes every output below into tests/golden/outputs/ and the canonical
digest of every identity input, under its logical name, into tests/golden/identity-inputs.json (emptying the
list of changes against it, tests/golden/identity-changes.yaml); tests/golden/test_outputs.py
captures them again and compares. The outputs: the matrix as JSON and text (every world, the kernel
packages, the FlashAttention-3 packages), a sample of rendered recipes per world, the plan against an empty
channel and index and against a channel holding half the conda cells, and the page of that channel. Paths
of the scratch folder read as <tmp>.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from faforge.family import families
from faforge.matrix.canonical import canonical_bytes
from faforge.matrix.inputs import named_files

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("outputs")
IDENTITY_INPUTS = Path(__file__).with_name("identity-inputs.json")
# Each identity input that differs from IDENTITY_INPUTS, and why (tests/golden/test_outputs.py reads it).
IDENTITY_CHANGES = Path(__file__).with_name("identity-changes.yaml")
NO_CHANGES = (
    "# Each identity input that differs from identity-inputs.json (the record before this change), as\n"
    "# family/logical name: {status: moved | edited | new | removed, from: old path, to: new path, why: ...}.\n"
    "# tests/golden/test_outputs.py fails on a change not listed here, or listed but not seen.\n{}\n"
)
SUBDIRS = ("linux-64", "linux-aarch64", "noarch")


def faforge(*args: str, cwd: Path) -> str:
    env = dict(
        os.environ,
        FAFORGE_ROOT=str(REPO),
        FAFORGE_CACHE_DIR=str(cwd / "cache"),
        COLUMNS="120",
        SOURCE_DATE_EPOCH="1796083200",
    )
    done = subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"faforge {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def write_channel(root: Path, held: list[dict], kernels: list[dict]) -> None:
    """A channel's repodata holding the cells `held` and the kernel packages `kernels` (no files: the plan and
    the page read repodata only)."""
    entries: dict[str, dict[str, dict]] = {subdir: {} for subdir in SUBDIRS}
    for cell in held:
        entries[cell["platform"]][f"flash-attn-{cell['build_string']}"] = {
            "name": "flash-attn",
            "build": cell["build_string"],
            "depends": cell["run_requirements"],
            "constrains": cell["run_constraints"],
            "subdir": cell["platform"],
        }
    for kernel in kernels:
        entries[kernel["platform"]][kernel["file"]] = {
            "name": kernel["name"],
            "build": kernel["build_string"],
            "depends": [],
            "subdir": kernel["platform"],
        }
    for subdir, packages in entries.items():
        version = "2.8.3.post2"
        records = {}
        for key, record in packages.items():
            name = f"{record['name']}-{version}-{record['build']}.conda"
            records[name] = {
                **record,
                "version": version,
                "build_number": int(record["build"].rsplit("_", 1)[1]),
                "md5": hashlib.md5(key.encode()).hexdigest(),
                "sha256": hashlib.sha256(key.encode()).hexdigest(),
                "size": 1000,
            }
        (root / subdir).mkdir(parents=True, exist_ok=True)
        (root / subdir / "repodata.json").write_text(
            json.dumps({"info": {"subdir": subdir}, "packages": {}, "packages.conda": records}, sort_keys=True)
        )


def capture(scratch: Path) -> dict[str, str]:
    """{file name: text} of every golden output, made in `scratch`."""
    out: dict[str, str] = {}
    out["matrix-all.json"] = faforge("matrix", "--world", "all", "--json", cwd=scratch)
    out["matrix-all.txt"] = faforge("matrix", "--world", "all", cwd=scratch)
    out["matrix-conda.txt"] = faforge("matrix", "--platform", "all", cwd=scratch)
    out["matrix-kernels.json"] = faforge("matrix", "--world", "all", "--kernels", "--json", cwd=scratch)
    out["matrix-fa3.json"] = faforge("matrix", "--fa3", "--json", cwd=scratch)
    cells = json.loads(out["matrix-all.json"])
    kernels = json.loads(out["matrix-kernels.json"])
    for world in sorted({c["torch_source"] for c in cells} - {"pypi"}):  # `render` shows conda cells
        of_world = [c for c in cells if c["torch_source"] == world]
        for cell in (of_world[0], of_world[len(of_world) // 2], of_world[-1]):
            name = "render-" + cell["id"].replace("/", "_") + ".json"
            out[name] = faforge("render", cell["id"], "--json", cwd=scratch)
    empty, half = scratch / "empty-channel", scratch / "half-channel"
    write_channel(empty, [], [])
    conda = [c for c in cells if c["torch_source"] != "pypi"]
    write_channel(half, conda[::2], [k for k in kernels if k["torch_source"] != "pypi"])
    (scratch / "index").mkdir()
    out["plan-empty.json"] = faforge("plan", "--channel", "empty-channel", "--index", "index", "--json", cwd=scratch)
    out["plan-half.json"] = faforge("plan", "--channel", "half-channel", "--json", cwd=scratch)
    faforge("page", "--channel", "half-channel", "--index", "index", "--out", "page", cwd=scratch)
    for page in sorted((scratch / "page").iterdir()):
        out["page-" + page.name] = page.read_text()
    return {name: text.replace(str(scratch), "<tmp>") for name, text in out.items()}


def identity_inputs() -> dict[str, dict[str, str]]:
    """{family key/logical name: {path, sha256 of its canonical form}} of every file a family names as a package
    input: the name a build string digests it under (faforge.matrix.inputs), and where it lies today."""
    out: dict[str, dict[str, str]] = {}
    for family in families():
        entries = tuple(entry for i in family.identities for entry in (*i.compile_inputs, *i.pack_inputs))
        for name, path in named_files(REPO, entries).items():
            out[f"{family.key}/{name}"] = {
                "path": path.relative_to(REPO).as_posix(),
                "sha256": hashlib.sha256(canonical_bytes(path, path.read_bytes())).hexdigest(),
            }
    return dict(sorted(out.items()))


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        outputs = capture(Path(scratch))
    GOLDEN.mkdir(exist_ok=True)
    for stale in GOLDEN.iterdir():
        stale.unlink()
    for name, text in outputs.items():
        (GOLDEN / name).write_text(text)
    IDENTITY_INPUTS.write_text(json.dumps(identity_inputs(), indent=1, sort_keys=True) + "\n")
    IDENTITY_CHANGES.write_text(NO_CHANGES)  # the new record holds what the listed changes made
    print(f"wrote {len(outputs)} outputs to {GOLDEN} and {IDENTITY_INPUTS}")


if __name__ == "__main__":
    main()

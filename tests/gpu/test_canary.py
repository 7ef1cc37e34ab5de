"""The GPU canary (tests/gpu/canary/): the committed file matches its manifest, and the staleness report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.gpu import canary

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_canary_matches_its_manifest():
    manifest = canary.load_manifest(canary.canary_dir(REPO))
    if manifest is None:
        pytest.skip(
            f"no canary committed yet: {canary.canary_dir(REPO)}/{canary.MANIFEST} is absent (the real sm_90 "
            "build is pending)"
        )
    assert canary.mismatches(canary.canary_dir(REPO), manifest) == []
    assert manifest["size"] <= 20 * 1024 * 1024, "the canary must stay at most 20 MB in git"
    assert set(manifest["inputs"]["git_blobs"]) == set(canary.KERNEL_INPUTS)


def test_git_blob_hash_is_gits():
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    script = REPO / canary.KERNEL_INPUTS[0]
    assert (
        canary.git_blob_hash(script)
        == subprocess.run(
            ["git", "hash-object", str(script)], capture_output=True, text=True, check=True
        ).stdout.strip()
    )


def fake_checkout(root: Path) -> Path:
    """A checkout holding the real build script and a canary file with its manifest."""
    for name in canary.KERNEL_INPUTS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, root / name)
    folder = canary.canary_dir(root)
    folder.mkdir(parents=True)
    (folder / "flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl.xz").write_bytes(b"stand-in canary bytes")
    manifest = canary.make_manifest(
        root, folder / "flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl.xz",
        build_command="python recipes/flash-attn/build_flash_attn.py ...", sdist_sha256="d0f9f0b0" * 8,
        torch="2.11.0+cu130", nvcc="13.0", archs="90", head_dims=[32, 64, 96, 128, 192, 256], built_on="2026-11-30",
    )  # fmt: skip
    (folder / canary.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return root


def test_status_reports_unchanged_then_changed_kernel_inputs_and_a_corrupt_file(tmp_path):
    root = fake_checkout(tmp_path)
    lines = canary.status_lines(root)
    assert lines[-1] == "canary: kernel inputs unchanged since it was built"
    assert not any("DOES NOT MATCH" in line for line in lines)
    with open(root / canary.KERNEL_INPUTS[0], "a") as script:
        script.write("# a change that enters the kernels\n")
    assert canary.status_lines(root)[-1].startswith(
        f"canary: kernel inputs changed since it was built: {canary.KERNEL_INPUTS[0]}; rebuild it with: python "
    )
    (canary.canary_dir(root) / "flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl.xz").write_bytes(b"other bytes")
    assert any(
        line.startswith("canary: DOES NOT MATCH its manifest: flash_attn-") for line in canary.status_lines(root)
    )


def test_test_gpu_canary_status_is_a_report_exit_0(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "test-gpu", "--canary-status"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("canary: ")
    root = fake_checkout(tmp_path)
    (root / "variants").mkdir()
    (root / "variants/releases.yaml").write_text("")  # what faforge.paths recognises a checkout by
    env = {"PATH": "/usr/bin:/bin", "FAFORGE_ROOT": str(root), "PYTHONPATH": str(REPO / "scripts")}
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "test-gpu", "--canary-status"], capture_output=True, text=True, env=env
    )
    assert (
        result.returncode == 0
        and result.stdout.splitlines()[-1] == "canary: kernel inputs unchanged since it was built"
    ), result.stderr

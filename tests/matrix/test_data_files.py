"""variants/releases.yaml, variants/matrix.yaml and variants/kernel-abi.yaml: canonical form, validation, sources."""

from __future__ import annotations

import re

import pytest

from faforge.errors import DataError
from faforge.kernels.kernel_abi import load_kernel_abi
from faforge.matrix.policy import load_policy
from faforge.matrix.releases import dump_releases, header_of
from faforge.matrix.releases_read import load_releases


def test_release_table_is_in_canonical_form(repo):
    path = repo / "variants" / "releases.yaml"
    text = path.read_text()
    assert dump_releases(load_releases(path), header_of(text)) == text


def test_every_release_row_cites_a_checkable_source(repo):
    table = load_releases(repo / "variants" / "releases.yaml")
    for row in table.releases:
        for source in row.source:
            assert re.match(r"https?://\S+$", source), f"{row}: source must be a URL a reviewer can open"
            if "github.com/conda-forge/" in source:
                assert re.search(r"/(blob|tree)/[0-9a-f]{40}/", source), f"{source}: pin the feedstock commit"


def test_both_worlds_are_in_the_table(repo):
    table = load_releases(repo / "variants" / "releases.yaml")
    assert {r.world for r in table.releases} == {"conda-forge", "pytorch"}
    assert table.worlds["conda-forge"].cxx11_abi == 1
    assert table.worlds["pytorch"].cxx11_abi == 0
    assert table.worlds["pytorch"].platforms == ("linux-64",)


def _write(tmp_path, text):
    path = tmp_path / "releases.yaml"
    path.write_text(text)
    return path


HEAD = (
    "schema: 1\nworlds:\n  conda-forge:\n    channels: [conda-forge]\n    cxx11_abi: 1\n"
    "    platforms: [linux-64, linux-aarch64]\nreleases:\n"
)


@pytest.mark.parametrize(
    ("row", "key", "value"),
    [
        (
            "- world: conda-forge\n  torch: 2.7.1\n  cuda: 12.9\n  python: ['3.12']\n  platforms: [linux-64]\n  source: https://x\n",
            "releases[0].cuda",
            "12.9",
        ),
        (
            "- world: conda-frge\n  torch: 2.7.1\n  cuda: '12.9'\n  python: ['3.12']\n"
            "  platforms: [linux-64]\n  source: https://x\n",
            "releases[0].world",
            "conda-frge",
        ),
        (
            "- world: conda-forge\n  torch: 2.7.1\n  cuda: '12.9'\n  python: ['3.12']\n  platforms: [win-64]\n  source: https://x\n",
            "releases[0].platforms[0]",
            "win-64",
        ),
        (
            "- world: conda-forge\n  torch: 2.7.1\n  cuda: '12.9'\n  python: ['3.12']\n"
            "  platforms: [linux-64]\n  source: ''\n",
            "releases[0].source",
            "",
        ),
        (
            "- world: conda-forge\n  torch: 2.7.1\n  cuda: '12.9'\n  python: ['3.12']\n"
            "  platforms: [linux-64]\n  source: https://x\n  abi: 1\n",
            "releases[0].abi",
            "unknown key",
        ),
    ],
)
def test_bad_release_rows_name_file_key_and_value(tmp_path, row, key, value):
    path = _write(tmp_path, HEAD + row)
    with pytest.raises(DataError) as info:
        load_releases(path)
    message = str(info.value)
    assert str(path) in message and key in message and value in message


def test_duplicate_rows_are_rejected(tmp_path):
    row = "- world: conda-forge\n  torch: 2.7.1\n  cuda: '12.9'\n  python: ['3.12']\n  platforms: [linux-64]\n  source: https://x\n"
    with pytest.raises(DataError, match=r"releases\[1\].*duplicate of releases\[0\]"):
        load_releases(_write(tmp_path, HEAD + row + row))


def test_policy_rules_pick_by_cuda(repo):
    policy = load_policy(repo / "variants" / "matrix.yaml")
    assert policy.pick("cuda_archs", "13.0") == "80;90;100;120+PTX"
    assert policy.pick("cuda_archs", "12.8") == "80;90;100;120+PTX"
    assert policy.pick("cuda_archs", "12.6") == "80;90+PTX"
    assert policy.pick("c_stdlib_version", "13.0") == "2.28"
    assert policy.pick("c_stdlib_version", "12.9") == "2.17"
    assert policy.pick("host_gcc", "12.1") == "12"


def test_policy_errors_name_the_key(tmp_path, repo):
    text = (repo / "variants" / "matrix.yaml").read_text().replace("archs: 80;90+PTX", "archs: 80;90+PTX\n  extra: 1")
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    with pytest.raises(DataError, match=r"matrix.yaml: cuda_archs\[1\]: invalid rule"):
        load_policy(path)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("offset_intragraph: uint64_t", "offset_intragraph: uint16_t", "offset_intragraph"),
        (
            "offset_intragraph: uint64_t\n  sizes: {philox_cuda_state: 32, flash_fwd_params: 472, "
            "flash_bwd_params: 648}\n  verdict: shared",
            "offset_intragraph: uint64_t\n  sizes: {philox_cuda_state: 32, flash_fwd_params: 472, "
            "flash_bwd_params: 648}\n  verdict: own-build",
            "verdict",
        ),
    ],
)
def test_a_kernel_abi_row_the_shim_cannot_build_names_its_key(repo, tmp_path, old, new, key):
    """Only two library layouts exist, the shim's (uint64_t: shared) and the shim's with
    --philox-offset-bits 32 (uint32_t: own-build); a width or a pairing outside those has no library."""
    path = tmp_path / "kernel-abi.yaml"
    text = (repo / "variants" / "kernel-abi.yaml").read_text()
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(DataError) as info:
        load_kernel_abi(path)
    assert info.value.path == path and info.value.key == f"torch[8].{key}", str(info.value)

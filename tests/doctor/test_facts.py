"""Parsing what the probe and the package records say: channels, import errors, claims."""

from __future__ import annotations

import pytest

from faforge.doctor.facts import CondaRecord, Distribution, ImportOutcome, ProbeError
from faforge.doctor.installs import Install, claim


@pytest.mark.parametrize(
    ("channel", "name", "world"),
    [
        ("https://conda.anaconda.org/conda-forge/linux-64", "conda-forge", "conda-forge"),
        ("https://conda.anaconda.org/pytorch", "pytorch", "pytorch"),
        ("file:///srv/channels/pytorch/", "pytorch", "pytorch"),
        ("https://prefix.dev/faforge/noarch", "faforge", "conda-forge"),
    ],
)
def test_channel_name_and_world(channel, name, world):
    record = CondaRecord("pytorch", "2.5.1", "b", channel, ())
    assert (record.channel_name, record.world) == (name, world)


@pytest.mark.parametrize(
    ("message", "symbol", "library", "version"),
    [
        (
            "/x/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
            "_ZN3c104cuda9SetDeviceEi",
            None,
            None,
        ),
        ("libcudart.so.12: cannot open shared object file: No such file or directory", None, "libcudart.so.12", None),
        (
            "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by /x/flash_attn_2_cuda.so)",
            None,
            None,
            "GLIBC_2.38",
        ),
    ],
)
def test_import_errors(message, symbol, library, version):
    outcome = ImportOutcome(ran=True, error=ProbeError("ImportError", message))
    assert (outcome.undefined_symbol, outcome.missing_library, outcome.missing_version) == (symbol, library, version)


def _pip(version: str, url: str | None) -> Install:
    dist = Distribution("flash-attn", version, "/s/flash_attn.dist-info", "/s", "pip", url)
    return Install("flash-attn", "pip", version, dist, None, (), url)


def test_claims_from_package_names():
    ours = CondaRecord("flash-attn", "2.8.3.post2", "py312_torch2_7_cu129_cxx11abi1_h1a2b3c4_0", "faforge", ())
    conda = claim(Install("flash-attn", "conda", "2.8.3.post2", None, ours, (), None))
    assert (conda.source, conda.python, conda.torch_minor, conda.cuda, conda.cxx11_abi) == (
        "conda build string",
        "3.12",
        "2.7",
        "12.9",
        1,
    )
    url = (
        "https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/"
        "flash_attn-2.8.3%2Bcu12torch2.8cxx11abiFALSE-cp312-cp312-linux_x86_64.whl"
    )
    wheel = claim(_pip("2.8.3", url))
    assert (wheel.source, wheel.python, wheel.torch_minor, wheel.cuda, wheel.cxx11_abi) == (
        "wheel name",
        "3.12",
        "2.8",
        "12",
        0,
    )
    assert claim(_pip("2.8.3+cu12torch2.6cxx11abiTRUE", None)).torch_minor == "2.6"
    assert claim(_pip("2.5.8+cu118torch2.3cxx11abiFALSE", None)).cuda == "11.8"
    assert claim(_pip("2.8.3", None)) is None

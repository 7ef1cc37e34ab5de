"""faforge.pipwheel.writer: deterministic wheels that pip's own checks accept, and read back as written."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faforge.errors import FaforgeError
from faforge.pipwheel.facts import read_wheel
from faforge.pipwheel.writer import ZIP_EPOCH, WheelSpec, write_wheel

ELF = Path(sys.executable).resolve()  # a real ELF file, so its member gets 0755


def spec(**changes) -> WheelSpec:
    fields = dict(
        name="flash-attn",
        version="2.8.3.post2+torch2.11.cu130.abi1",
        build_tag="0h1a2b3c4",
        python_tags=("cp312",),
        abi_tags=("cp312",),
        platform_tags=("manylinux_2_28_x86_64",),
        requires_python=">=3.12,<3.13",
        requires_dist=("torch>=2.11,<2.12", "einops"),
        files={"flash_attn/__init__.py": b"__version__ = '2.8.3.post2'\n", "zz_ext.so": ELF, "flash_attn/a/b.py": b""},
    )
    return WheelSpec(**{**fields, **changes})


def test_the_name_tags_and_metadata_read_back(tmp_path):
    wheel = write_wheel(spec(), tmp_path)
    assert wheel.name == "flash_attn-2.8.3.post2+torch2.11.cu130.abi1-0h1a2b3c4-cp312-cp312-manylinux_2_28_x86_64.whl"
    facts = read_wheel(wheel)
    assert (facts.name, facts.version, facts.local, facts.build_tag) == (
        "flash-attn",
        "2.8.3.post2+torch2.11.cu130.abi1",
        "torch2.11.cu130.abi1",
        "0h1a2b3c4",
    )
    assert facts.requires_dist == ("torch>=2.11,<2.12", "einops") and facts.requires_python == ">=3.12,<3.13"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        wheel_file = archive.read(f"{spec().dist_info}/WHEEL").decode()
        record = list(csv.reader(io.StringIO(archive.read(f"{spec().dist_info}/RECORD").decode())))
        modes = {i.filename: i.external_attr >> 16 & 0o777 for i in archive.infolist()}
        times = {i.date_time for i in archive.infolist()}
        contents = {n: archive.read(n) for n in names}
    assert names == [
        "flash_attn/__init__.py",
        "flash_attn/a/b.py",
        "zz_ext.so",
        *(f"{spec().dist_info}/{n}" for n in ("METADATA", "WHEEL", "RECORD")),
    ]
    assert (
        "Root-Is-Purelib: false\n" in wheel_file
        and "Tag: cp312-cp312-manylinux_2_28_x86_64\n" in wheel_file
        and "Build: 0h1a2b3c4\n" in wheel_file
    )
    assert modes["zz_ext.so"] == 0o755 and modes["flash_attn/__init__.py"] == 0o644 and times == {ZIP_EPOCH}
    assert record[-1] == [f"{spec().dist_info}/RECORD", "", ""]
    for name, digest, size in record[:-1]:
        data = contents[name]
        assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
            b"="
        ).decode() and int(size) == len(data)


def test_the_same_inputs_give_the_same_bytes(tmp_path):
    first = write_wheel(spec(), tmp_path / "a").read_bytes()
    again = spec(files=dict(reversed(list(spec().files.items()))))  # another order of the same files
    assert write_wheel(again, tmp_path / "b").read_bytes() == first


def test_pip_installs_it_with_its_own_wheel_checks(tmp_path):
    wheel = write_wheel(
        spec(python_tags=("py3",), abi_tags=("none",), platform_tags=("any",), requires_python=None, requires_dist=()),
        tmp_path,
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(tmp_path / "site"),
            "--no-compile",
            "--disable-pip-version-check",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site/zz_ext.so").read_bytes() == ELF.read_bytes()
    assert (tmp_path / "site/zz_ext.so").stat().st_mode & 0o111, "pip keeps the executable bit it reads from the zip"
    installed = (tmp_path / "site" / spec().dist_info / "RECORD").read_text()
    assert "flash_attn/a/b.py,sha256=" in installed


@pytest.mark.parametrize(
    "name",
    ["/abs.py", "../up.py", "a/../b.py", "a\\b.py", "", "flash_attn-2.8.3.post2+torch2.11.cu130.abi1.dist-info/RECORD"],
)
def test_a_member_name_that_is_not_plain_is_refused(tmp_path, name):
    with pytest.raises(FaforgeError, match=r"is not a plain relative path|is written by faforge"):
        write_wheel(spec(files={name: b"x"}), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_line_break_in_metadata_is_refused(tmp_path):
    with pytest.raises(FaforgeError, match="holds a line break"):
        write_wheel(spec(requires_dist=("torch\nRequires-Dist: evil",)), tmp_path)


def test_an_output_that_cannot_be_written_names_it(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(FaforgeError, match="--out") as caught:
        write_wheel(spec(), tmp_path / "file")
    assert caught.value.exit_code == 2
    (tmp_path / "out" / spec().filename).mkdir(parents=True)
    with pytest.raises(FaforgeError, match="is not a regular file"):
        write_wheel(spec(), tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == [spec().filename], "no temporary file left behind"

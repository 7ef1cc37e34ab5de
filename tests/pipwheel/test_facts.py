"""faforge.pipwheel.facts: a wheel's name, version, tags and METADATA, read from real wheels and refused
when the file or its members are hostile (the index holds what anyone put there)."""

from __future__ import annotations

import lzma
import os
import re
import stat
import zipfile
from pathlib import Path

import pytest

from faforge.errors import FaforgeError
from faforge.packagefile import sha256_of
from faforge.pipwheel import members as wheel_members
from faforge.pipwheel.facts import read_wheel
from faforge.pipwheel.filename import parse_wheel_filename

CANARY = (
    Path(__file__).resolve().parents[1]
    / "gpu"
    / "canary"
    / "flash-attn-3"
    / "flash_attn_3-3.0.0-cp310-abi3-linux_x86_64.whl.xz"
)


@pytest.fixture(scope="module")
def canary(tmp_path_factory) -> Path:
    """The committed FA3 GPU canary, our own real build, as the wheel pip installs."""
    wheel = tmp_path_factory.mktemp("canary") / CANARY.name.removesuffix(".xz")
    wheel.write_bytes(lzma.decompress(CANARY.read_bytes()))
    return wheel


def make_wheel(path: Path, members: dict[str, bytes], *, links: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            if name in links:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, data)
    return path


def glue_members(
    dist_info: str = "flash_attn-2.8.3.post2+torch2.11.cu130.abi1.dist-info", **metadata: str
) -> dict[str, bytes]:
    fields = {
        "Metadata-Version": "2.1",
        "Name": "flash-attn",
        "Version": "2.8.3.post2+torch2.11.cu130.abi1",
        "Requires-Python": ">=3.12,<3.13",
        **metadata,
    }
    text = "".join(f"{k}: {v}\n" for k, v in fields.items() if v is not None)
    text += "Requires-Dist: torch<2.12,>=2.11\nRequires-Dist: einops\n\nA description: not a header.\n"
    return {
        f"{dist_info}/METADATA": text.encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n",
        "flash_attn/__init__.py": b"",
    }


GLUE = "flash_attn-2.8.3.post2+torch2.11.cu130.abi1-0h1a2b3c4-cp312-cp312-manylinux_2_28_x86_64.whl"


def test_the_canary_reads_as_pip_sees_it(canary):
    found = read_wheel(canary)
    assert (found.name, found.version, found.local, found.build_tag) == ("flash-attn-3", "3.0.0", None, None)
    assert (found.python_tags, found.abi_tags, found.platform_tags) == (("cp310",), ("abi3",), ("linux_x86_64",))
    assert found.requires_python == ">=3.10" and found.requires_dist == ("torch>=2.9",)
    assert found.sha256 == sha256_of(canary) and found.size == canary.stat().st_size and found.filename == canary.name


def test_a_glue_wheel_name_and_metadata(tmp_path):
    found = read_wheel(make_wheel(tmp_path / GLUE, glue_members()))
    assert found.name == "flash-attn" and found.version == "2.8.3.post2+torch2.11.cu130.abi1"
    assert found.local == "torch2.11.cu130.abi1" and found.build_tag == "0h1a2b3c4"
    assert found.platform_tags == ("manylinux_2_28_x86_64",) and found.requires_python == ">=3.12,<3.13"
    assert found.requires_dist == ("torch<2.12,>=2.11", "einops")


@pytest.mark.parametrize(
    "filename, parts",
    [
        (
            "flash_attn_3-3.0.0+cu130.sm80.90a-cp310-abi3-manylinux_2_28_x86_64.manylinux2014_x86_64.whl",
            (
                "flash-attn-3",
                "3.0.0+cu130.sm80.90a",
                None,
                ("cp310",),
                ("abi3",),
                ("manylinux_2_28_x86_64", "manylinux2014_x86_64"),
            ),
        ),
        (
            "libflash_attn_kernels-2.8.3.post2+cu130.sm80.90.100.120ptx.philox64.ha5d2e90-0-py3-none-manylinux_2_17_x86_64.whl",
            (
                "libflash-attn-kernels",
                "2.8.3.post2+cu130.sm80.90.100.120ptx.philox64.ha5d2e90",
                "0",
                ("py3",),
                ("none",),
                ("manylinux_2_17_x86_64",),
            ),
        ),
        ("Foo.Bar-1.0-py2.py3-none-any.whl", ("foo-bar", "1.0", None, ("py2", "py3"), ("none",), ("any",))),
    ],
)
def test_file_names(filename, parts):
    name = parse_wheel_filename(filename)
    assert (name.name, name.version, name.build_tag, name.python_tags, name.abi_tags, name.platform_tags) == parts


@pytest.mark.parametrize(
    "filename",
    [
        "x.whl",
        "flash_attn-2.8.3-cp312-cp312.whl",
        "flash_attn-notaversion-cp312-cp312-linux_x86_64.whl",
        "flash_attn-2.8-x0-cp312-cp312-linux_x86_64.whl",
        "flash_attn-2.8-cp312-cp312-linux_x86_64.zip",
        "flash_attn-2.8-cp312..x-cp312-linux_x86_64.whl",
        "-2.8-cp312-cp312-linux_x86_64.whl",
    ],
)
def test_a_name_that_is_not_pep_427s_is_refused(filename):
    with pytest.raises(FaforgeError, match=r"is not a wheel file name|not a PEP 440 version|empty tag") as caught:
        parse_wheel_filename(filename)
    assert filename in caught.value.line()


@pytest.mark.parametrize(
    "members, links, says",
    [
        ({"/etc/passwd": b"x"}, (), "is not a relative path"),
        ({"flash_attn/../../evil.py": b"x"}, (), "is not a relative path"),
        ("C:", (), "is not a relative path"),
        ({"flash_attn\\x.py": b"x"}, (), "is not a relative path"),
        ({"flash_attn/link": b"/etc/passwd"}, ("flash_attn/link",), "is a symbolic link"),
        ({}, (), "has 0 .dist-info folders"),
        ({"torch-2.11.0.dist-info/METADATA": b"x"}, (), "has 2 .dist-info folders"),
    ],
)
def test_hostile_members_are_refused_naming_the_file(tmp_path, members, links, says):
    members = {"C:/x.py": b"x"} if members == "C:" else members
    path = make_wheel(tmp_path / GLUE, {**({} if not members else glue_members()), **members}, links=links)
    with pytest.raises(FaforgeError, match=says) as caught:
        read_wheel(path)
    assert str(path) in caught.value.line() and caught.value.exit_code == 2


def test_a_dist_info_of_another_project_is_refused(tmp_path):
    members = {
        k.replace("flash_attn-2.8.3.post2+torch2.11.cu130.abi1.dist-info", "torch-2.11.0.dist-info"): v
        for k, v in glue_members().items()
    }
    with pytest.raises(FaforgeError, match="is not of the project 'flash-attn'"):
        read_wheel(make_wheel(tmp_path / GLUE, members))


def test_a_member_twice_is_refused(tmp_path):
    path = tmp_path / GLUE
    with pytest.warns(UserWarning, match="Duplicate name"):
        make_wheel(path, glue_members())
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr("flash_attn/__init__.py", b"evil")
    with pytest.raises(FaforgeError, match="appears twice"):
        read_wheel(path)


def test_a_metadata_bomb_stops_at_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(wheel_members, "METADATA_CAP", 4096)
    members = glue_members()
    members[next(iter(members))] += b"x" * 100_000
    with pytest.raises(FaforgeError, match="more than the 4,096"):
        read_wheel(make_wheel(tmp_path / GLUE, members))


@pytest.mark.parametrize(
    "metadata, says",
    [
        ({"Name": "torch"}, "names the project 'torch'"),
        ({"Version": "2.8.3"}, "has the version '2.8.3', but the file name says"),
        ({"Version": "nope"}, "not a PEP 440 version"),
        ({"Name": None}, "has no Name field"),
        ({"Requires-Python": ">=3.12,<<3.13"}, "not a PEP 440 specifier"),
    ],
)
def test_metadata_that_contradicts_the_name_is_refused(tmp_path, metadata, says):
    with pytest.raises(FaforgeError, match=says):
        read_wheel(make_wheel(tmp_path / GLUE, glue_members(**metadata)))


def test_a_bad_requirement_and_a_bad_wheel_version_are_refused(tmp_path):
    members = glue_members()
    key = next(iter(members))
    members[key] = members[key].replace(b"Requires-Dist: einops", b"Requires-Dist: einops >>= 1")
    with pytest.raises(FaforgeError, match="not a PEP 508 requirement"):
        read_wheel(make_wheel(tmp_path / GLUE, members))
    members = glue_members()
    members[key.replace("METADATA", "WHEEL")] = b"Wheel-Version: 2.0\n"
    with pytest.raises(FaforgeError, match=re.escape("Wheel-Version '2.0'")):
        (tmp_path / "second").mkdir()
        read_wheel(make_wheel(tmp_path / "second" / GLUE, members))


@pytest.mark.parametrize("kind", ["fifo", "dir", "random", "missing", "loop", "device"])
def test_a_path_that_is_no_wheel_file_is_refused(tmp_path, kind):
    path = tmp_path / GLUE
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    with pytest.raises(FaforgeError) as caught:
        read_wheel(path)
    assert str(path) in caught.value.line() and caught.value.exit_code == 2

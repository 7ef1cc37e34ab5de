"""The ELF reader agrees with binutils' readelf on real files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from faforge.abi.elf import read_dynamic_symbols, read_elf, read_info
from faforge.abi.elf_file import ElfError, ElfFile
from faforge.abi.elf_hash import gnu_hash, hashed_exports
from faforge.abi.ld_search import system_library_dirs
from faforge.abi.library import Library
from tests.abi import elf_fixtures as fx

READELF = shutil.which("readelf")
needs_readelf = pytest.mark.skipif(
    READELF is None, reason="binutils' readelf is not installed (the cross-check needs it)"
)


def system_library(name: str) -> Path:
    for folder in system_library_dirs():
        if (folder / name).is_file():
            return folder / name
    pytest.skip(f"{name} is not in the system library path")


def readelf_symbols(path: Path) -> set[tuple[str, str | None, bool]]:
    """(name, version, defined) from `readelf --dyn-syms -W`."""
    out = subprocess.run([READELF, "--dyn-syms", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    symbols = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 8 or not parts[0].rstrip(":").isdigit() or parts[0] == "0:":
            continue
        name, version = re.split(r"@@?", parts[7], maxsplit=1) if "@" in parts[7] else (parts[7], None)
        symbols.add((name, version, parts[6] != "UND"))
    return symbols


def readelf_dynamic(path: Path) -> dict[str, list[str]]:
    out = subprocess.run([READELF, "-d", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    found: dict[str, list[str]] = {}
    for tag, value in re.findall(r"\((NEEDED|SONAME|RPATH|RUNPATH)\)\s+\S+.*?\[(.*)\]", out):
        found.setdefault(tag, []).append(value)
    return found


@pytest.fixture(scope="module")
def linked(gxx, tmp_path_factory) -> Path:
    """A library with a SONAME, a RUNPATH with $ORIGIN and versioned imports."""
    folder = tmp_path_factory.mktemp("linked")
    return fx.compile_shared(
        gxx,
        fx.LIBRARY_SOURCE + '#include <cstdlib>\nint home() { return getenv("HOME") != 0; }\n',
        folder / "liblinked.so",
        defines={"PARAMS": "int"},
        flags=["-Wl,-soname,liblinked.so.1", "-Wl,-rpath,$ORIGIN/../lib:/opt/x", "-Wl,--enable-new-dtags"],
    )


@needs_readelf
@pytest.mark.parametrize("which", ["fixture", "libstdc++", "libc"])
def test_symbols_match_readelf(which, linked):
    path = {
        "fixture": lambda: linked,
        "libstdc++": lambda: system_library("libstdc++.so.6"),
        "libc": lambda: system_library("libc.so.6"),
    }[which]()
    # readelf prints a version's own marker symbol (CXXABI_1.3.5@@CXXABI_1.3.5) without the suffix
    ours = {
        (s.name, None if s.version == s.name else s.version, s.defined)
        for s in read_dynamic_symbols(path).all_symbols()
    }
    assert ours == readelf_symbols(path)


@needs_readelf
def test_dynamic_section_matches_readelf(linked):
    info = read_info(linked)
    theirs = readelf_dynamic(linked)
    assert list(info.needed) == theirs["NEEDED"]
    assert info.soname == "liblinked.so.1" == theirs["SONAME"][0]
    assert info.runpath == ("$ORIGIN/../lib", "/opt/x") and theirs["RUNPATH"] == ["$ORIGIN/../lib:/opt/x"]
    assert (info.machine, info.elf_class, info.little_endian) == ("x86_64", 64, True)


def test_versions_needed_and_defined(linked):
    _, symbols = read_elf(linked)
    files = {need.file: need.versions for need in symbols.needs}
    assert any(v.startswith("GLIBC_") for v in files["libc.so.6"])
    libc = read_dynamic_symbols(system_library("libc.so.6"))
    assert "GLIBC_2.2.5" in libc.defines and "GLIBC_2.34" in libc.defines
    memcpy = libc.exports()["memcpy"]
    assert ("GLIBC_2.14", False) in memcpy and ("GLIBC_2.2.5", True) in memcpy  # memcpy@@GLIBC_2.14, memcpy@GLIBC_2.2.5


def test_exports_exclude_imports_and_the_null_symbol(linked):
    symbols = read_dynamic_symbols(linked)
    exports = symbols.exports()
    assert "_ZN3c104cuda9SetDeviceEi" in exports
    assert "getenv" not in exports and "" not in exports
    assert "getenv" in {s.name for s in symbols.undefined()}


@pytest.mark.slow  # an aarch64 g++ compile
def test_aarch64_header(tmp_path):
    tool = fx.aarch64_gxx()
    if tool is None:
        pytest.skip("aarch64-linux-gnu-g++ is missing (Debian g++-aarch64-linux-gnu; scripts/dev test installs it)")
    lib = fx.build_library(tool, tmp_path, "int8_bool", 1)
    info = read_info(lib)
    assert (info.machine, info.elf_class, info.little_endian, info.soname) == ("aarch64", 64, True, "libc10_cuda.so")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\x7fELF\x02", "truncated ELF"),
        (b"MZ\x90\x00" * 20, "not an ELF file"),
        (b"\x7fELF\x03\x01" + b"\0" * 58, "malformed ELF header"),
    ],
)
def test_bad_files_raise_elf_error(tmp_path, content, message):
    path = tmp_path / "bad.so"
    path.write_bytes(content)
    with pytest.raises(ElfError, match=message) as raised:
        read_elf(path)
    assert raised.value.exit_code == 2


@pytest.mark.parametrize("which", ["fixture", "libstdc++", "libc"])
def test_gnu_hash_lookups_agree_with_the_full_table(which, linked):
    path = {
        "fixture": lambda: linked,
        "libstdc++": lambda: system_library("libstdc++.so.6"),
        "libc": lambda: system_library("libc.so.6"),
    }[which]()
    symbols = read_dynamic_symbols(path)
    with ElfFile(path) as elf:
        hashed = hashed_exports(elf)
    assert hashed is not None
    exports = symbols.exports()
    for name, definitions in exports.items():
        assert sorted(hashed.lookup(name, gnu_hash(name)), key=str) == sorted(definitions, key=str), name
    for name in {s.name for s in symbols.undefined()} - set(exports) | {"no_such_symbol", "_ZN3c104cuda9SetDeviceEb"}:
        assert hashed.lookup(name, gnu_hash(name)) == (), name


def test_a_library_without_gnu_hash_falls_back_to_the_full_table(gxx, tmp_path):
    lib = fx.compile_shared(
        gxx, fx.LIBRARY_SOURCE, tmp_path / "libsysv.so", defines={"PARAMS": "int"}, flags=["-Wl,--hash-style=sysv"]
    )
    with ElfFile(lib) as elf:
        assert hashed_exports(elf) is None
    library = Library("libsysv.so", lib, read_info(lib), "test")
    assert library.provides("_ZN3c104cuda9SetDeviceEi", None)
    assert not library.provides("_ZN3c104cuda9SetDeviceEa", None)

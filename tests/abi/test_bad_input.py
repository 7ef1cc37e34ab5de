"""Bad input ends in exit 2 with one line and no traceback; mutated ELF files never crash or hang."""

from __future__ import annotations

import contextlib
import io
import signal
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faforge import cli
from faforge.abi.elf_file import ElfFile
from tests.abi.conftest import run_faforge

FUZZ_EXAMPLES = 300
FUZZED_SECTIONS = (
    ".dynamic",
    ".dynsym",
    ".dynstr",
    ".gnu.hash",
    ".gnu.version",
    ".gnu.version_r",
    ".gnu.version_d",
    ".shstrtab",
)
PER_INPUT_SECONDS = 20  # far above the ~0.05 s a fixture takes; only a hang can reach it


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def good(extensions, stand_ins) -> tuple[Path, Path]:
    return extensions[("int8_bool", 1)], stand_ins[("int8_bool", 1)]


def test_missing_file(good, tmp_path):
    assert_one_line_error(
        run_faforge("check-abi", tmp_path / "nope.so", "--against", good[1]), "nope.so", "does not exist"
    )


def test_text_file(good, tmp_path):
    text = tmp_path / "README.so"
    text.write_text("not a library\n")
    assert_one_line_error(run_faforge("check-abi", text, "--against", good[1]), "README.so", "not an ELF file")


@pytest.mark.parametrize("keep", [10, 64, 2000, -3000], ids=["ident", "header", "headers", "no-tail"])
def test_truncated_elf(good, tmp_path, keep):
    data = good[0].read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[:keep])
    assert_one_line_error(run_faforge("check-abi", cut, "--against", good[1]), "cut.so")


def test_empty_directory_as_path(good, tmp_path):
    assert_one_line_error(run_faforge("check-abi", tmp_path, "--against", good[1]), "no Python extension module")


def test_directory_without_torch(good, tmp_path):
    assert_one_line_error(run_faforge("check-abi", good[0], "--against", tmp_path), "no torch libraries")


def test_missing_against(good, tmp_path):
    assert_one_line_error(run_faforge("check-abi", good[0], "--against", tmp_path / "gone"), "no such directory")


def test_bad_glibc(good):
    assert_one_line_error(run_faforge("check-abi", good[0], "--against", good[1], "--glibc", "new"), "--glibc")


# -- fuzzing ------------------------------------------------------------------------------------


def regions(path: Path) -> list[tuple[int, int]]:
    """(offset, size) of the parts a mutation should hit: headers and the dynamic sections."""
    with ElfFile(path) as elf:
        table = [(0, 64)]
        for section in elf.sections:
            if section.name in FUZZED_SECTIONS and section.size:
                table.append((section.offset, section.size))
        shoff = int.from_bytes(path.read_bytes()[0x28:0x30], "little")
        table.append((shoff, 64 * len(elf.sections)))
    return table


def _hang(signum, frame):
    raise TimeoutError(f"check-abi ran longer than {PER_INPUT_SECONDS}s on one input")


def test_fuzz_mutated_elf_never_crashes(good, capsys):
    ext, lib = good
    original = ext.read_bytes()
    targets = regions(ext)
    exits: Counter[int] = Counter()
    mutation = st.tuples(
        st.sampled_from(targets),
        st.floats(0, 1, exclude_max=True),
        st.sampled_from([1, 2, 4, 8]),
        st.integers(0, 2**64 - 1),
    )

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        mutations=st.lists(mutation, min_size=1, max_size=6),
        truncate=st.one_of(st.none(), st.integers(0, len(original))),
    )
    def run(mutations, truncate):
        data = bytearray(original)
        for (start, size), where, width, value in mutations:
            at = start + int(where * max(size - width, 1))
            data[at : at + width] = value.to_bytes(8, "little")[:width]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "mutant.so"
            path.write_bytes(bytes(data[:truncate] if truncate is not None else data))
            signal.signal(signal.SIGALRM, _hang)
            signal.alarm(PER_INPUT_SECONDS)
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    code = cli.main(["check-abi", str(path), "--against", str(lib)])
            finally:
                signal.alarm(0)
        assert code in (0, 1, 2, 3)  # 3: a mangled DT_NEEDED names a library found nowhere (cannot tell)
        exits[code] += 1

    run()
    with capsys.disabled():
        print(f"\nELF fuzz: {sum(exits.values())} mutated inputs tried, exit codes {dict(sorted(exits.items()))}")
    assert sum(exits.values()) >= FUZZ_EXAMPLES // 2

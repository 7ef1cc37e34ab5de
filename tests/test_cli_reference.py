"""The CLI reference page (docs/reference/cli.md): rendered from the real parsers, fresh, deterministic,
and Markdown that says what --help says (faforge.cli_reference)."""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from faforge import cli, errors
from faforge.cli_reference import COMMAND, PAGE, inline, render

REPO = Path(__file__).resolve().parents[1]


def page() -> str:
    return render(cli.build_parser([]), cli.EXIT_STATUS)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_committed_page_is_fresh():
    committed = (REPO / PAGE).read_text() if (REPO / PAGE).is_file() else ""
    expected = page()
    diff = difflib.unified_diff(committed.splitlines(True), expected.splitlines(True), str(PAGE), "regenerated")
    diff = "".join(list(diff)[:40])
    assert committed == expected, f"{PAGE} is stale: run `{COMMAND}` and commit it\n{diff}"


def test_the_page_says_it_is_generated_and_by_what():
    first = page().splitlines()[0]
    assert "generated" in first.lower() and f"`{COMMAND}`" in first
    assert f"{PAGE.as_posix()} linguist-generated=true" in (REPO / ".gitattributes").read_text()


def test_the_page_does_not_vary_with_the_terminal_the_program_name_or_cuda_home(monkeypatch):
    wide = page()
    monkeypatch.setenv("COLUMNS", "41")
    monkeypatch.setenv("CUDA_HOME", "/opt/elsewhere/cuda")
    monkeypatch.setattr(sys, "argv", ["/somewhere/else/bin/not-faforge", "generate"])
    assert page() == wide


def test_every_command_has_its_heading_usage_and_every_option():
    parser = cli.build_parser([])
    text = page()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    by_heading = {s.splitlines()[0]: s for s in sections[1:]}
    for name, sub in subparsers(parser).items():
        section = by_heading[f"faforge {name}"]
        assert f"usage: faforge {name}" in section and f"](#faforge-{name})" in text
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings or [action.metavar or action.dest]
            assert all(f"`{s}`" in section for s in shown), (name, shown)


def test_every_command_summary_is_a_whole_sentence():
    """`faforge --help` and the page's command table show a module docstring's first line alone."""
    for name, sub in subparsers(cli.build_parser([])).items():
        summary = sub.description.strip().splitlines()[0]
        assert summary.endswith(".") and summary.count("`") % 2 == 0, f"faforge {name}: {summary!r}"


def test_the_exit_code_table_holds_every_code_of_faforge_errors():
    codes = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert set(cli.EXIT_STATUS) == codes, "give each exit code of faforge.errors its words in faforge.cli.EXIT_STATUS"
    section = page().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code, what in cli.EXIT_STATUS.items():
        assert re.search(rf"^\| `{code}` \| `EXIT_\w+` \| {what} \|$", section, re.MULTILINE), code


def test_no_tracker_number_reaches_the_page():
    """A help text that says "issue N" names the concept instead, at its source."""
    assert re.findall(r".{40}\bissues?\s+\d+.{20}", page(), re.IGNORECASE | re.DOTALL) == []


def test_every_table_row_has_as_many_cells_as_its_header():
    for table in re.findall(r"(?:^\|.*\|\n)+", page(), re.MULTILINE):
        rows = table.splitlines()
        widths = {len(re.split(r"(?<!\\)\|", re.sub(r"`[^`]*`", "code", row))) for row in rows}
        assert len(widths) == 1, rows[0]


@pytest.mark.parametrize(
    ("text", "markdown"),
    [
        ("variants/<platform>-pypi.yaml", "variants/&lt;platform&gt;-pypi.yaml"),
        ("aoti_torch_*, torch_* or a|b", r"aoti\_torch\_\*, torch\_\* or a\|b"),
        ("keeps `code <spans> *as* a|b` whole", "keeps `code <spans> *as* a|b` whole"),
        ("`faforge matrix --world\npypi`: [x]", "`faforge matrix --world\npypi`: \\[x\\]"),
        ("- not a list", r"\- not a list"),
        ("a lone ` stays a backtick", r"a lone \` stays a backtick"),
    ],
)
def test_text_outside_code_spans_is_escaped(text, markdown):
    assert inline(text) == markdown


def run_generator(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge.cli_reference", *args],
        capture_output=True,
        text=True,
        env={"FAFORGE_ROOT": str(root), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_the_generator_writes_the_page_and_its_check_fails_on_a_stale_one(tmp_path):
    (tmp_path / "variants").mkdir()
    (tmp_path / "variants" / "releases.yaml").write_text("")  # the checkout's marker (faforge.paths.repo_root)
    check = run_generator(tmp_path, "--check")
    assert check.returncode == 1 and f"run `{COMMAND}`" in check.stderr, check
    written = run_generator(tmp_path)
    assert written.returncode == 0 and (tmp_path / PAGE).read_text() == page(), written
    assert run_generator(tmp_path, "--check").returncode == 0
    (tmp_path / PAGE).write_text(page().replace("show the cause chain", "show the chain"))
    stale = run_generator(tmp_path, "--check")
    assert stale.returncode == 1 and stale.stderr == f"stale: {tmp_path / PAGE} (run `{COMMAND}`)\n", stale

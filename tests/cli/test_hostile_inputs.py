"""Every subcommand keeps the CLI contract on hostile input (the hostile-input harness): the table is
hostile_cases.yaml.

Each case runs `faforge` with one hostile value and asserts the exit code, that no traceback is
printed, that an error is one `faforge CMD: error: what (input) — what to do` line naming the option
or the value, and, for commands with --json, that
stdout is exactly one JSON object (the report or the versioned error object). The parsers are
introspected: a subcommand, or an argument that takes a value, without a case fails the harness,
so a new argument cannot land without hostile cases.

Cases run in-process (faforge.cli.main) for speed; `subprocess: true` ones, and any that name a FIFO (a
reader blocks forever) or /dev/full (endless zeros to a reader), run as a child with a short timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from faforge import cli
from faforge.commands import COMMANDS

TABLE = Path(__file__).with_name("hostile_cases.yaml")
HANG_TIMEOUT_S = 20


def load_cases(table: Path = TABLE) -> list[dict]:
    """One dict per case: the table's groups expanded over their `values`, each with an id."""
    cases = []
    for group in yaml.safe_load(table.read_text())["groups"]:
        for value in group.get("values", [None]):
            argv = [value if token == "{value}" else token for token in group["argv"]]
            env = {k: value if v == "{value}" else v for k, v in group.get("env", {}).items()}
            case = {**group, "argv": argv, "env": env, "value": value}
            case["id"] = f"{group['command']} {group['arg']} {value if value is not None else ' '.join(argv)}"[:120]
            cases.append(case)
    return cases


CASES = load_cases()
PARAMS = [pytest.param(c, id=c["id"]) for c in CASES]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parsers = {}
    for name in COMMANDS:
        action = next(a for a in cli.build_parser([name])._actions if isinstance(a, argparse._SubParsersAction))
        parsers[name] = action.choices[name]
    return parsers


def value_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """Every argument that takes a value (options by their long name, positionals by dest)."""
    names = []
    for action in parser._actions:
        if action.nargs == 0 or isinstance(action, argparse._HelpAction):
            continue
        names.append(max(action.option_strings, key=len) if action.option_strings else action.dest)
    return names


def test_every_subcommand_and_every_argument_has_cases():
    covered = Counter((c["command"], c["arg"]) for c in CASES)
    parsers = subparsers_cache()
    missing = [
        f"{name} {arg}"
        for name, parser in parsers.items()
        for arg in value_arguments(parser)
        if not covered[(name, arg)]
    ]
    assert not missing, f"arguments without hostile cases in {TABLE.name}: {', '.join(missing)}"
    unknown = [f"{c} {a}" for c, a in covered if c not in COMMANDS or a not in [*value_arguments(parsers[c]), "-"]]
    assert not unknown, f"cases for arguments that do not exist: {unknown}"


def test_the_table_is_big_enough_and_spans_every_command():
    per_command = Counter(c["command"] for c in CASES)
    assert set(per_command) == set(COMMANDS)
    assert len(CASES) >= 300, per_command


def fill(text: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        text = text.replace("{" + key + "}", value)
    return text


def run_in_process(argv, env, cwd, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    saved = dict(os.environ)
    try:
        code = cli.main(argv)
    finally:  # some commands set variables for their children (build's TU list, test-gpu's declared archs)
        os.environ.clear()
        os.environ.update(saved)
    out, err = capsys.readouterr()
    return code, out, err


def run_child(argv, env, cwd, timeout: float = HANG_TIMEOUT_S) -> tuple[int, str, str]:
    try:
        result = subprocess.run(
            [sys.executable, "-m", "faforge", *argv],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**os.environ, **env},
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: no exit within {timeout} s")
    return result.returncode, result.stdout, result.stderr


def has_json_option(command: str) -> bool:
    return any("--json" in a.option_strings for a in subparsers_cache()[command]._actions)


_SUBPARSERS: dict = {}


def subparsers_cache() -> dict[str, argparse.ArgumentParser]:
    if not _SUBPARSERS:
        _SUBPARSERS.update(subparsers())
    return _SUBPARSERS


@pytest.mark.parametrize("case", PARAMS)
def test_hostile_input_keeps_the_contract(case, places, tmp_path, capsys, monkeypatch):
    json_mode = case.get("json", True) and has_json_option(case["command"])
    argv = [case["command"], *(["--json"] if json_mode else []), *(fill(str(a), places) for a in case["argv"])]
    env = {k: fill(str(v), places) for k, v in case.get("env", {}).items()}
    if case.get("subprocess") or any(p in " ".join(map(str, case["argv"])) for p in ("{fifo}", "{full}")):
        code, out, err = run_child(argv, env, tmp_path)
    else:
        code, out, err = run_in_process(argv, env, tmp_path, capsys, monkeypatch)
    assert_contract(case, code, out, err, places, json_mode)


def assert_contract(case: dict, code: int, out: str, err: str, places: dict[str, str], json_mode: bool) -> None:
    """The CLI contract for one case's run: exit code, no traceback, one error line, one JSON object."""
    shown = f"exit {code}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    assert "Traceback" not in err + out, shown
    assert code == case["exit"], shown
    errors = [line for line in err.splitlines() if line.startswith(f"faforge {case['command']}: error:")]
    if code in (2, 4):
        assert len(errors) == 1, f"one error line expected\n{shown}"
        assert len(errors[0]) < 1200, f"the error line echoes a long input in full ({len(errors[0])} chars)"
        assert " — " in errors[0], f"the error line says no `— what to do`\n{shown}"
    if json_mode:
        try:
            data = json.loads(out)
        except json.JSONDecodeError:
            pytest.fail(f"--json: stdout is not one JSON object\n{shown}")
        if code in (2, 4):
            assert data["version"] == 1 and data["error"]["kind"] == {2: "bad-input", 4: "remote"}[code], shown
    value = fill(str(case["value"] or ""), places)
    if code == 2 and case["arg"] != "-" and value:  # the error names what was wrong: the option or the value
        named = errors[0] if errors else err
        spellings = [case["arg"], value[:40], repr(value)[1:40], os.path.basename(value)[:40]]
        assert any(s in named for s in spellings), f"the error names neither {case['arg']} nor the value\n{shown}"
    for word in case.get("says", []):
        assert fill(word, places) in err + out, shown

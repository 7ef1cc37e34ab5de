"""The CLI contract in one place (faforge.errors, faforge.cli): one error line, the exit-code table,
OS errors on the user's paths, network failures, --json error objects and --verbose."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from faforge import cli, errors
from faforge.errors import FaforgeError, path_error, shorten
from tests.support.docs import EXIT_CODES, doc_text

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = sorted((REPO / "tests" / "schemas").glob("*.json"))


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_an_error_is_one_line_naming_the_input_and_what_to_do():
    error = FaforgeError("no such cell\nsecond line of detail", input="linux-64/py399", hint="see\n`faforge matrix`")
    assert error.line() == "no such cell (linux-64/py399) — see `faforge matrix`"
    assert error.detail == "second line of detail"


def test_a_131_kb_argument_is_shortened_with_its_size():
    huge = "A" * 131_000 + "Z"
    text = shorten(huge)
    assert len(text) <= errors.SHORTEN_AT and "[131001 bytes]" in text and text.endswith("Z")
    assert len(FaforgeError("bad runner", input=huge, hint="e.g. 2:24").line()) < 300


def real_os_error(action) -> OSError:
    try:
        action()
    except OSError as exc:
        return exc
    raise AssertionError("no OSError")


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("long", "name that is too long"),
        ("loop", "symbolic link loop"),
        ("full", "no space left"),
        ("exists", "exists and is not a folder"),
        ("not-a-dir", "a file, not a folder"),
    ],
)
def test_real_os_errors_on_a_users_path_become_bad_input_naming_it(tmp_path, case, words):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_text("x")
    actions = {
        "long": lambda: (tmp_path / ("x" * 300)).write_text("x"),
        "loop": lambda: (tmp_path / "loop").mkdir(),
        "full": write_dev_full,
        "exists": lambda: (tmp_path / "file").mkdir(),
        "not-a-dir": lambda: (tmp_path / "file" / "sub").mkdir(),
    }
    exc = real_os_error(actions[case])
    error = path_error(exc, "--out", exc.filename or "/dev/full")
    assert error.exit_code == 2 and words in error.line() and "--out" in error.line(), error.line()


def write_dev_full():
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        os.write(fd, b"x")  # ENOSPC, as on a full disk
    finally:
        os.close(fd)


def test_network_errors_are_remote_not_bad_input():
    error = path_error(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    assert error.exit_code == errors.EXIT_REMOTE and error.kind == "remote"


@pytest.mark.parametrize("kind_and_code", [("bad-input", 2), ("problems", 1), ("remote", 4), ("interrupted", 130)])
def test_every_schema_accepts_the_versioned_error_object(kind_and_code):
    kind, code = kind_and_code
    error = FaforgeError("what went wrong", input="x" * 300, hint="what to do", exit_code=code)
    data = error.to_json()
    assert data["error"]["kind"] == kind and len(data["error"]["input"]) <= errors.SHORTEN_AT
    for schema in SCHEMAS:
        jsonschema.validate(data, json.loads(schema.read_text()))
    with pytest.raises(jsonschema.ValidationError):  # still strict: an error object with extra fields is refused
        jsonschema.validate({**data, "extra": 1}, json.loads(SCHEMAS[0].read_text()))


def test_an_unreachable_channel_is_exit_4_in_one_line_and_verbose_adds_the_cause(capsys):
    code, out, err = run(capsys, "plan", "--json", "--platform", "linux-64", "--channel", "http://127.0.0.1:9/ch")
    assert code == 4 and json.loads(out)["error"]["kind"] == "remote"
    [line] = err.splitlines()
    assert line.startswith("faforge plan: error: cannot read repodata of http://127.0.0.1:9/ch")
    assert "— check the channel URL and your network" in line and "faforge publish" not in line
    assert "--verbose shows the cause" in line
    code, _, verbose = run(capsys, "--verbose", "plan", "--platform", "linux-64", "--channel", "http://127.0.0.1:9/ch")
    assert code == 4 and len(verbose.splitlines()) > 1


def test_a_subcommand_usage_error_shows_the_subcommands_usage(capsys):
    code, out, err = run(capsys, "matrix", "extra-arg", "--json")
    assert code == 2 and err.startswith("usage: faforge matrix")
    assert "faforge matrix: error: unrecognized arguments: extra-arg — see `faforge matrix --help`" in err
    assert json.loads(out)["error"]["message"] == "unrecognized arguments: extra-arg"


def test_the_readme_table_the_workflows_and_the_gpu_script_agree_with_the_exit_codes():
    table = dict(re.findall(r"^\| `(\d+)` \| ([^|]+) \|", doc_text(EXIT_CODES), re.M))
    codes = {name: value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert sorted(int(c) for c in table) == sorted(codes.values()), table
    assert "network" in table[str(errors.EXIT_REMOTE)] and "nothing was verified" in table[str(errors.EXIT_SKIPPED)]
    workflows = "".join(p.read_text() for p in (REPO / ".github" / "workflows").glob("*.yml"))
    assert set(re.findall(r"\|\| \[ \$\? -eq (\d+) \]", workflows)) == {str(errors.EXIT_SKIPPED)}
    gpu_script = (REPO / "tests" / "gpu" / "run_on_gpu_machine.sh").read_text()
    ok, skipped = (
        errors.EXIT_OK,
        errors.EXIT_SKIPPED,
    )  # three runs (FA2's suite, FA3's, the benchmark): each passed or skipped
    assert (
        f"{ok}/{ok}/{ok}) return {ok} ;;" in gpu_script
        and f"[{ok}{skipped}]/[{ok}{skipped}]/[{ok}{skipped}]) return {skipped} ;;" in gpu_script
    )


def test_errors_module_needs_only_the_standard_library():
    """The GPU suite's recipe test ships faforge/errors.py alone (faforge.gpu.run_suite.RECIPE_TEST_FILES)."""
    imports = re.findall(r"^(?:from|import) (\S+)", (REPO / "scripts" / "faforge" / "errors.py").read_text(), re.M)
    assert all(name.split(".")[0] in ("__future__", "errno", "os", "urllib") for name in imports), imports
    assert os.path.basename(errors.__file__) == "errors.py"

"""The CLI contract under the hostile classes: environment variables, closed/full/broken
streams, hostile archives, hostile channels and repodata, hostile servers on loopback, hostile
interpreters for doctor. The table is hostile_classes.yaml (the format of hostile_cases.yaml, plus the
keys below); the stream cases are made here, one per command with --json (and doctor without) per way
a stream can fail.

Every `FAFORGE_*` variable the product reads is found by scanning its source (string literals in
scripts/faforge/**/*.py, and shell files under scripts/ and recipes/): one without a case fails the
harness, as an option without a case does in test_hostile_inputs.py.

Keys beyond hostile_cases.yaml's:
  class        env | archive | channel | server | interpreter | gate-record | wheel-index
  var          (env) the variable the group attacks; `unknown: true` for names the product does not read
  channel      a hostile channel (hostile_class_places.CHANNEL_KINDS) made fresh at ./ch for the case
  unchanged    paths whose files must be the same after the run (nothing written, changed or removed;
               lock files and empty folders aside); a path that did not exist must hold no file after
  outside      paths whose parent folder, less the path itself, must be unchanged (nothing written beside it)
  timeout      the child's hard timeout in seconds (default 20): a hang is a failed case, not a hung suite
  within       the seconds the run may take at most (a server's deadline, doctor's probe timeout)
  concurrent   run in a pool of children started together (hanging servers and interpreters cost their
               timeout once per round, not once per case)

No case may print a raw escape sequence (faforge itself writes none), whatever the hostile value holds.
Cases that break the contract on today's code are listed in known_breaks.txt: each is a strict xfail
until its fix lands, so a fixed case that stays listed fails as XPASS and must be taken off the list.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
import tokenize
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from faforge.commands import COMMANDS
from tests.backend.test_options import CHECKED_IN_USE as BUILD_SCRIPT_CHECKED_IN_USE
from tests.backend.test_options import HOSTILE as BUILD_SCRIPT_HOSTILE
from tests.cli.hostile_class_places import make_channel
from tests.cli.test_hostile_inputs import (
    CASES as OPTION_CASES,
)
from tests.cli.test_hostile_inputs import (
    HANG_TIMEOUT_S,
    assert_contract,
    fill,
    has_json_option,
    load_cases,
    run_in_process,
)

REPO = Path(__file__).resolve().parents[2]
TABLE = Path(__file__).with_name("hostile_classes.yaml")
KNOWN_BREAKS_FILE = Path(__file__).with_name("known_breaks.txt")
# Cases that still break the contract (known_breaks.txt says which); each fix takes its case off the list.
KNOWN_BREAKS = {
    line.strip() for line in KNOWN_BREAKS_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")
}
VARIABLE = re.compile(r"FAFORGE_[A-Z0-9_]+")
SHELL_VARIABLE = re.compile(r"\$\{?(FAFORGE_[A-Z0-9_]+)")
# Concurrent cases run this many children at a time, after every other case (2 cores: hanging children cost
# no CPU, but the CPU-bound ones must not starve each other past their timeout).
POOL_WORKERS = 6
POOL_TIMEOUT_S = 40
# A child that reads /dev/zero or a 2 GB file into memory must fail alone, not take the machine with it.
CHILD_MEMORY_BYTES = 6 << 30
ESCAPE = "\x1b"


def printable(text: str) -> str:
    """A case id fit for known_breaks.txt: control characters as \\xNN."""
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return f"'{shown}'" if not shown or shown != shown.strip() else shown


def whole_value(text: str | None, value: str | None) -> str | None:
    """A field that is `{value}` whole (channel, outside) becomes the case's value."""
    return value if text == "{value}" else text


def load_class_cases() -> list[dict]:
    """hostile_classes.yaml's cases, their ids prefixed by class, `{value}` put into channel and outside too."""
    cases = []
    for case in load_cases(TABLE):
        words = [
            case["class"],
            case["command"],
            case.get("var", ""),
            case.get("label", ""),
            printable(case["value"] or " ".join(case["argv"])),
        ]
        argv = [
            a.replace("{value}", case["value"]) if case["value"] is not None else a for a in case["argv"]
        ]  # inside a token too
        env = {
            k: str(v).replace("{value}", case["value"]) if case["value"] is not None else v
            for k, v in case.get("env", {}).items()
        }
        cases.append(
            {
                **case,
                "argv": argv,
                **({"env": env} if "env" in case else {}),
                "id": " ".join(w for w in words if w)[:120],
                "channel": whole_value(case.get("channel"), case["value"]),
                "outside": [whole_value(p, case["value"]) for p in case.get("outside", [])],
            }
        )
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), (
        f"{TABLE.name}: two cases share an id: {sorted(i for i in ids if ids.count(i) > 1)}"
    )
    return cases


CASES = load_class_cases()
# Concurrent cases last: the pool starts with the first of them and shares the machine with no other case.
ORDERED = sorted(CASES, key=lambda c: bool(c.get("concurrent")))


# FAFORGE_* string constants that name no environment variable, each with what it is.
NOT_VARIABLES = {"FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS": "the torch shim's C macro (nvcc -D), faforge.backend.layout"}


def product_variables() -> set[str]:
    """Every FAFORGE_* name the product can read: a string literal of its Python that is exactly the name
    (os.environ.get("FAFORGE_X"), X_ENV = "FAFORGE_X"; a mention in help or a docstring is not a read), and
    every $FAFORGE_X / ${FAFORGE_X in its shell files."""
    names = set()
    for path in [*(REPO / "scripts" / "faforge").rglob("*.py"), *(REPO / "recipes").rglob("*.py")]:
        with path.open("rb") as f:
            names |= {
                tok.string[1:-1]
                for tok in tokenize.tokenize(f.readline)
                if tok.type == tokenize.STRING and VARIABLE.fullmatch(tok.string[1:-1])
            }
    for folder in ("scripts", "recipes"):
        for path in (REPO / folder).rglob("*.sh"):
            names |= set(SHELL_VARIABLE.findall(path.read_text(errors="replace")))
    return names - set(NOT_VARIABLES)


def test_every_faforge_variable_the_product_reads_has_cases():
    attacked = {c["var"] for c in CASES if c.get("class") == "env" and not c.get("unknown")}
    attacked |= {k for c in OPTION_CASES for k in c.get("env", {})}
    attacked |= {
        *BUILD_SCRIPT_HOSTILE,
        *BUILD_SCRIPT_CHECKED_IN_USE,
    }  # the recipe's build script: tests/backend/test_options.py
    found = product_variables()
    assert found, "the scan found no FAFORGE_* variable: it is broken"
    missing = sorted(found - attacked)
    assert not missing, f"FAFORGE_* variables without hostile cases in {TABLE.name}: {', '.join(missing)}"
    unread = sorted({c["var"] for c in CASES if c.get("class") == "env" and not c.get("unknown")} - found)
    assert not unread, f"cases for variables the product does not read (mark them `unknown: true`): {unread}"


def test_the_classes_table_spans_every_class():
    per_class = {c["class"] for c in CASES}
    assert per_class == {"env", "archive", "channel", "server", "interpreter", "gate-record", "wheel-index"}
    assert not KNOWN_BREAKS - {c["id"] for c in CASES} - {s.id for s in STREAM_CASES}, (
        f"{KNOWN_BREAKS_FILE.name} lists cases that do not exist"
    )


def expect_known_break(case_id: str) -> None:
    if case_id in KNOWN_BREAKS:
        pytest.xfail(f"{KNOWN_BREAKS_FILE.name}: breaks the contract until its fix")  # strict: see run_checked


def files_under(path: Path, skip: Path | None = None) -> dict[str, tuple]:
    """What a folder holds, file by file (folders aside): type, size, mtime, link count and link target."""
    if not path.exists() and not path.is_symlink():
        return {}
    if not path.is_dir() or path.is_symlink():
        return {str(path): _identity(path)}
    found = {}
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if skip is None or Path(root, d) != skip]
        for name in files + [d for d in dirs if Path(root, d).is_symlink()]:
            entry = Path(root, name)
            if entry != skip and not name.endswith(".lock"):
                found[str(entry)] = _identity(entry)
    return found


def _identity(path: Path) -> tuple:
    st = path.lstat()
    return st.st_mode, st.st_size, st.st_mtime_ns, st.st_nlink, os.readlink(path) if path.is_symlink() else None


def snapshots(case: dict, places: dict[str, str], cwd: Path) -> dict[str, dict]:
    taken = {}
    for raw in case.get("unchanged", []):
        path = cwd / fill(raw, places)
        taken[f"unchanged {path}"] = files_under(path)
    for raw in case.get("outside", []):
        path = cwd / fill(raw, places)
        taken[f"beside {path}"] = files_under(path.parent, skip=path)
    return taken


def check_snapshots(before: dict[str, dict], case: dict, places: dict[str, str], cwd: Path) -> None:
    after = snapshots(case, places, cwd)
    for key, files in before.items():
        changed = sorted(set(files.items()) ^ set(after[key].items()))
        assert not changed, f"{key}: files written, changed or removed: {[c[0] for c in changed][:10]}"


def argv_of(case: dict, places: dict[str, str]) -> tuple[list[str], dict[str, str], bool]:
    json_mode = case.get("json", True) and has_json_option(case["command"])
    argv = [case["command"], *(["--json"] if json_mode else []), *(fill(str(a), places) for a in case["argv"])]
    return argv, {k: fill(str(v), places) for k, v in case.get("env", {}).items()}, json_mode


# Hostile channels that block a reader (a FIFO) or feed it without end (/dev/zero, a sparse 2 GiB file, a huge
# page) run in a child, under CHILD_MEMORY_BYTES and a timeout; the other channel cases run in-process.
CHILD_CHANNELS = ("fifo", "zero", "sparse", "huge")


def needs_child(case: dict) -> bool:
    text = " ".join(map(str, [*case["argv"], *case.get("env", {}).values()]))
    return bool(
        case.get("subprocess")
        or case.get("concurrent")
        or any(k in (case.get("channel") or "") for k in CHILD_CHANNELS)
        or any(p in text for p in ("{fifo}", "{full}", "{srv}"))
    )


def prepare(case: dict, places: dict[str, str], cwd: Path) -> dict[str, str]:
    if case.get("channel"):
        return {**places, "ch": str(make_channel(case["channel"], cwd))}
    return places


class Pool:
    """Children of the `concurrent` cases pytest selected, run a pool at a time from the first such case on."""

    def __init__(self, cases: list[dict], places: dict[str, str], base: Path) -> None:
        self.executor = ThreadPoolExecutor(max_workers=POOL_WORKERS)
        self.futures: dict[str, Future] = {}
        for case in cases:
            cwd = base / re.sub(r"[^A-Za-z0-9._-]", "_", case["id"])[:80]
            cwd.mkdir(parents=True, exist_ok=True)
            filled = prepare(case, places, cwd)
            argv, env, _ = argv_of(case, filled)
            before = snapshots(case, filled, cwd)
            self.futures[case["id"]] = self.executor.submit(
                timed_child, argv, env, cwd, case.get("timeout", POOL_TIMEOUT_S)
            )
            self.futures[case["id"]].context = (cwd, filled, before)  # type: ignore[attr-defined]  # the case's folder and snapshots ride on its Future


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))


def timed_child(argv, env, cwd, timeout) -> tuple[int, str, str, float] | str:
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "faforge", *argv],
            capture_output=True,
            text=True,
            errors="replace",
            cwd=cwd,
            env={**os.environ, **env},
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            preexec_fn=limit_memory,
        )
    except subprocess.TimeoutExpired:
        return f"hung: no exit within {timeout} s"
    return result.returncode, result.stdout, result.stderr, time.monotonic() - started


@pytest.fixture(scope="session")
def pool(request, places, tmp_path_factory):
    """Started by the first concurrent case that asks (see ORDERED), for the concurrent cases pytest selected."""
    selected = {
        item.callspec.id
        for item in request.session.items
        if hasattr(item, "callspec") and item.name.startswith("test_hostile_class")
    }
    cases = [c for c in ORDERED if c.get("concurrent") and c["id"] in selected]
    started = Pool(cases, places, tmp_path_factory.mktemp("pool"))
    yield started
    started.executor.shutdown(wait=True, cancel_futures=True)


def run_checked(case_id: str, check) -> None:
    """Run `check`; a listed known break must fail (strict), an unlisted case must pass."""
    if case_id not in KNOWN_BREAKS:
        check()
        return
    try:
        check()
    except (Exception, pytest.fail.Exception):  # any failure of a listed case is the known break
        expect_known_break(case_id)
    pytest.fail(f"XPASS(strict): {case_id!r} keeps the contract now: take it off {KNOWN_BREAKS_FILE.name}")


# The concurrent cases (hanging and dripping servers, hostile interpreters) each wait out a deadline, 10 to 20 s
# of wall, and their `within` bounds are wall-clock: they are slow, run by the serial slow tier, where the pool
# shares the machine with no other test (tests/support/tiers.py). Under pytest-xdist (--dist loadgroup) they go
# to one worker together, whose pool then starts exactly them.
POOLED = (pytest.mark.slow, pytest.mark.xdist_group("hostile-pool"))


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c["id"], marks=POOLED if c.get("concurrent") else ()) for c in ORDERED]
)
def test_hostile_class_keeps_the_contract(case, places, request, tmp_path, capsys, monkeypatch):
    if case.get("concurrent"):
        future = request.getfixturevalue("pool").futures[case["id"]]
        cwd, filled, before = future.context
        result = future.result()
    else:
        cwd, filled = tmp_path, prepare(case, places, tmp_path)
        before = snapshots(case, filled, cwd)
        result = None

    def check() -> None:
        nonlocal result
        if result is None:
            argv, env, _ = argv_of(case, filled)
            started = time.monotonic()
            result = (
                timed_child(argv, env, cwd, case.get("timeout", HANG_TIMEOUT_S))
                if needs_child(case)
                else (*run_in_process(argv, env, cwd, capsys, monkeypatch), time.monotonic() - started)
            )
        if isinstance(result, str):
            pytest.fail(result)
        code, out, err, seconds = result
        assert seconds <= case.get("within", float("inf")), (
            f"took {seconds:.1f} s, more than {case['within']} s (exit {code})\n{err[-1500:]}"
        )
        assert ESCAPE not in out + err, f"a raw escape sequence reaches the terminal\n{(out + err)[-2000:]!r}"
        assert_contract(case, code, out, err, filled, argv_of(case, filled)[2])
        check_snapshots(before, case, filled, cwd)

    run_checked(case["id"], check)


# ---------------------------------------------------------------- closed, full and broken streams

# One command line per command with --json, each quick and offline; doctor runs without --json too.
STREAM_ARGV = {
    "bench-build": ["bench-build", "--json"],
    "bench-gpu": ["bench-gpu", "--json", "--report-dir", "reports"],
    "build": ["build", "--json", "pypi/linux-aarch64/py311/torch2.14/cu130/abi1", "--output-dir", "build-out"],
    "bump": ["bump", "--json", "--source", "conda-forge", "--channel-url", "http://127.0.0.1:9/x"],
    "check-abi": ["check-abi", "--json", "{random_so}", "--against", "{torch_lib}"],
    "doctor": ["doctor", "--json", "--python", "{python}"],
    "doctor (text)": ["doctor", "--python", "{python}"],
    "matrix": ["matrix", "--json", "--kernels"],
    "plan": ["plan", "--json", "--platform", "linux-64", "--channel", "{dir}"],
    "publish": ["publish", "--json", "{conda}", "--to", "ch"],
    "render": ["render", "--json", "nope"],
    "test-gpu": ["test-gpu", "--json", "--report-dir", "reports"],
    "verify": ["verify", "--json", "{conda}", "--gates", "abi", "--against", "{torch_lib}"],
    "wheel": ["wheel", "--json", "fa3", "{random_whl}", "--cuda", "13.0", "--archs", "90a", "--out", "wheel-out"],
}
# How stdout or stderr fails: the shell redirection that does it, and what the exit code must then be.
STREAM_MODES = {
    "stdout-full": ">/dev/full",
    "stdout-closed": ">&-",
    "stderr-full": "2>/dev/full",
    "stdout-reader-gone": None,  # a pipe whose reader has exited before the first write
}
STREAM_TIMEOUT_S = 60  # render and plan render every cell today (6-8 s alone, more beside other children)
STREAM_CASES = [pytest.param(cmd, mode, id=f"stream {cmd} {mode}") for cmd in STREAM_ARGV for mode in STREAM_MODES]


def test_every_command_with_json_has_stream_cases():
    with_json = {c for c in COMMANDS if has_json_option(c)}
    assert with_json | {"doctor (text)"} == set(STREAM_ARGV)


def shell_run(argv: list[str], redirection: str | None, cwd: Path) -> tuple[int, str, str]:
    """faforge ARGV under one stream failure; returns exit code, stdout (when it still goes somewhere), stderr."""
    command = " ".join(["exec", *(_quote(a) for a in [sys.executable, "-m", "faforge", *argv])])
    if redirection is None:
        child = subprocess.Popen(
            ["sh", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            preexec_fn=limit_memory,
        )
        child.stdout.close()  # the reader is gone before faforge starts
        try:
            err = child.stderr.read()
            child.wait(timeout=STREAM_TIMEOUT_S)
        finally:
            child.stderr.close()
        return child.returncode, "", err.decode(errors="replace")
    stdout = None if "2>" not in redirection else subprocess.PIPE
    result = subprocess.run(
        ["sh", "-c", f"{command} {redirection}"],
        stdout=stdout or subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=cwd,
        timeout=STREAM_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        preexec_fn=limit_memory,
    )
    return result.returncode, (result.stdout or b"").decode(errors="replace"), result.stderr.decode(errors="replace")


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


@pytest.fixture(scope="session")
def stream_baselines() -> dict[str, tuple[int, str, str]]:
    """Each stream command line run with working streams, once: the exit code the work finds, and its stdout."""
    return {}


def baseline(cmd: str, argv: list[str], places, tmp_path_factory, cache: dict) -> tuple[int, str, str]:
    if cmd not in cache:
        cwd = tmp_path_factory.mktemp("baseline")
        result = subprocess.run(
            [sys.executable, "-m", "faforge", *argv],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=STREAM_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        cache[cmd] = (result.returncode, result.stdout, result.stderr)
    return cache[cmd]


# Slow: each case is a shell and a faforge process under the failing stream, after a baseline process of the same
# command (0.5 to 1 s of CPU a case); tests/cli/test_streams.py keeps the stream contract in the fast tier.
@pytest.mark.slow
@pytest.mark.parametrize(("cmd", "mode"), STREAM_CASES)
def test_a_failing_stream_keeps_the_contract(cmd, mode, places, stream_baselines, tmp_path, tmp_path_factory):
    argv = [fill(a, places) for a in STREAM_ARGV[cmd]]
    found, good_out, _ = baseline(cmd, argv, places, tmp_path_factory, stream_baselines)
    assert "Traceback" not in good_out, "the baseline run itself breaks"
    code, out, err = shell_run(argv, STREAM_MODES[mode], tmp_path)
    shown = f"exit {code} (with working streams: {found})\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-3000:]}"

    def check() -> None:
        assert "Traceback" not in err + out, shown
        assert code >= 0, f"killed by signal {-code}\n{shown}"
        if mode in ("stdout-full", "stdout-closed"):
            # exit 2, or the failure the work found (the hostile classes' rule: "exit 2 (or what the work found)")
            assert code == 2 or code == found != 0, (
                f"a stdout that cannot be written is exit 2 or the work's failure\n{shown}"
            )
            assert len([line for line in err.splitlines() if line.startswith(f"faforge {argv[0]}: error:")]) == 1, shown
        elif mode == "stderr-full":
            assert code == found, f"a full stderr changed the exit code the work found\n{shown}"
            assert out == good_out or ("--json" in argv and json.loads(out).keys() == json.loads(good_out).keys()), (
                f"a full stderr cost stdout\n{shown}"
            )
        else:
            assert code in (found, 2), f"a reader that left early: the exit code is what the work found, or 2\n{shown}"

    run_checked(f"stream {cmd} {mode}", check)


def test_the_harness_is_big_enough():
    assert len(CASES) + len(STREAM_CASES) >= 200, (len(CASES), len(STREAM_CASES))

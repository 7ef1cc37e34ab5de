"""Every subcommand keeps the CLI contract on hostile input (issue 14): the table is hostile_cases.yaml.

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
import random
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from faforge import cli
from faforge.channel.local import PackageSpec, assemble
from faforge.commands import COMMANDS
from faforge.release.package import read_package
from tests.support.http_server import serve_directory

REPO = Path(__file__).resolve().parents[2]
TABLE = Path(__file__).with_name("hostile_cases.yaml")
HANG_TIMEOUT_S = 20
# Cases whose fix belongs to the other half of issue 14 (branch issue-14-path): the lead removes this list after merging.
def load_cases() -> list[dict]:
    """One dict per case: the table's groups expanded over their `values`, each with an id."""
    cases = []
    for group in yaml.safe_load(TABLE.read_text())["groups"]:
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
    missing = [f"{name} {arg}" for name, parser in subparsers().items() for arg in value_arguments(parser) if not covered[(name, arg)]]
    assert not missing, f"arguments without hostile cases in {TABLE.name}: {', '.join(missing)}"
    unknown = [f"{c} {a}" for c, a in covered if c not in COMMANDS or a not in value_arguments(subparsers()[c]) + ["-"]]
    assert not unknown, f"cases for arguments that do not exist: {unknown}"


def test_the_table_is_big_enough_and_spans_every_command():
    per_command = Counter(c["command"] for c in CASES)
    assert set(per_command) == set(COMMANDS)
    assert len(CASES) >= 300, per_command


def hostile_site(tmp: Path, rng: random.Random) -> Path:
    """What a hostile server serves: a wheel index of random bytes, one of names that only look like torch
    wheels, and a conda channel whose repodata is random bytes."""
    www = tmp / "www"
    (www / "random-index").mkdir(parents=True)
    (www / "random-index" / "index.html").write_bytes(rng.randbytes(8192))
    (www / "odd-index").mkdir()
    (www / "odd-index" / "index.html").write_text("".join(f'<a href="{name}">{name}</a>\n' for name in [
        "torch-2.99.0+cu1-cp39-cp39-linux_x86_64.whl", "torch-2.99.0+cu-cp310-cp310-linux_x86_64.whl",
        "torch-2.99.0+cu130-cp3-cp3-linux_x86_64.whl", "torch-2.99.0+cu130-cp312-cp312-linux_x86_64.whl%00", "torch-" * 5000]))
    for subdir in ("linux-64", "linux-aarch64", "noarch"):
        (www / "garbage-channel" / subdir).mkdir(parents=True)
        (www / "garbage-channel" / subdir / "repodata.json").write_bytes(rng.randbytes(4096))
    return www


def venv_with_wrong_metadata(tmp: Path) -> Path:
    """A Python whose flash-attn direct_url.json is valid JSON of the wrong type (doctor reads it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=120)
    python = tmp / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    meta = Path(site) / "flash_attn-2.8.3.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3\n")
    (meta / "direct_url.json").write_text('{"url": 5}\n')
    return python


@pytest.fixture(scope="session")
def places(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The placeholders the table uses, made once: hostile files, folders, names and a hostile server."""
    tmp = tmp_path_factory.mktemp("hostile")
    rng = random.Random(14)
    with serve_directory(hostile_site(tmp, rng)) as url:
        yield make_places(tmp, rng, url)


def make_places(tmp: Path, rng: random.Random, url: str) -> dict[str, str]:
    (tmp / "file.txt").write_text("hello\n")
    (tmp / "dir").mkdir()
    (tmp / "empty").write_bytes(b"")
    (tmp / "random.bin").write_bytes(rng.randbytes(4096))
    (tmp / "random.conda").write_bytes(rng.randbytes(4096))
    (tmp / "random.so").write_bytes(b"\x7fELF" + rng.randbytes(4092))
    (tmp / "loop").symlink_to(tmp / "loop")
    os.mkfifo(tmp / "fifo")
    (tmp / "list.json").write_text("[1, 2, 3]\n")
    (tmp / "wrong-types.json").write_text(json.dumps({"build": 5, "link": "x", "include": 7}))
    (tmp / "plan-int-cell.json").write_text(json.dumps({"include": [{"cell": 5, "part": "all"}]}))
    (tmp / "plan-no-link.json").write_text(json.dumps({"build": [{"include": [{"cell": "linux-64/py312/torch2.7/cu128/abi1"}]}]}))
    (tmp / "plan-part-int.json").write_text(json.dumps({"cell": "linux-64/py312/torch2.7/cu128/abi1", "part": 3}))
    (tmp / "measurements-wrong.yaml").write_text("schema: 1\nsamples: 5\nreuse: [1]\n")
    (tmp / "measurements-list.yaml").write_text("- 1\n- 2\n")
    read_only = tmp / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    # root writes through mode bits; sysfs refuses new entries to everyone
    ro = "/sys" if os.geteuid() == 0 else str(read_only)
    conda = assemble(PackageSpec("flash-attn", "2.8.3.post2", "py311_torch2_14_cu130_cxx11abi1_h1234567_0", "linux-64",
                                 depends=("python 3.11.*",), files={"share/flash-attn-standin.txt": "x"}), tmp / "pkg")
    manifest = tmp / "manifest-list"  # a manifest entry of valid JSON but the wrong type, for that package
    (manifest / read_package(conda).sha256).mkdir(parents=True)
    (manifest / read_package(conda).sha256 / "abi.json").write_text("[1, 2]\n")
    torch_lib = tmp / "torch-lib"  # passes check-abi's --against test (a torch library by name), so PATH is what gets checked
    torch_lib.mkdir()
    shutil.copy(sys.executable, torch_lib / "libc10.so")
    for name, content in [("releases-random", rng.randbytes(2048)), ("releases-list", b"- 1\n- 2\n"),
                          ("releases-wrong-types", b"schema: 1\nworlds: 5\nreleases: {a: 1}\n")]:
        project = tmp / name
        shutil.copytree(REPO / "variants", project / "variants")
        shutil.copytree(REPO / "recipes", project / "recipes")
        (project / "variants" / "releases.yaml").write_bytes(content)
    # {huge} is 131 KB: just under the kernel's limit on one argv string (MAX_ARG_STRLEN, 128 KiB), so a child gets it too
    return {
        "tmp": str(tmp), "file": str(tmp / "file.txt"), "dir": str(tmp / "dir"), "empty": str(tmp / "empty"),
        "random": str(tmp / "random.bin"), "random_conda": str(tmp / "random.conda"), "random_so": str(tmp / "random.so"),
        "loop": str(tmp / "loop"), "fifo": str(tmp / "fifo"), "ro": ro, "missing": str(tmp / "no" / "such"),
        "full": "/dev/full", "long": str(tmp / ("x" * 300)), "huge": "A" * 131_000, "unicode": "ünïcødé-✓-名前",
        "list_json": str(tmp / "list.json"), "wrong_json": str(tmp / "wrong-types.json"),
        "plan_int_cell": str(tmp / "plan-int-cell.json"), "plan_no_link": str(tmp / "plan-no-link.json"),
        "plan_part_int": str(tmp / "plan-part-int.json"), "manifest_list": str(manifest),
        "measurements_wrong": str(tmp / "measurements-wrong.yaml"), "measurements_list": str(tmp / "measurements-list.yaml"),
        "conda": str(conda), "torch_lib": str(torch_lib), "www": url.rstrip("/"), "bad_direct_url": str(venv_with_wrong_metadata(tmp)),
        **{name.replace("-", "_"): str(tmp / name) for name in ("releases-random", "releases-list", "releases-wrong-types")},
    }


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


def run_child(argv, env, cwd) -> tuple[int, str, str]:
    try:
        result = subprocess.run([sys.executable, "-m", "faforge", *argv], capture_output=True, text=True, cwd=cwd,
                                env={**os.environ, **env}, timeout=HANG_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: no exit within {HANG_TIMEOUT_S} s")
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

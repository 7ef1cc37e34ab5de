"""How the `faforge` process ends once py-rattler has run (faforge.cli.console_main).

py-rattler's runtime threads can outlive the command, still inside a request a deadline abandoned, and
CPython's finalization under them aborts about one exit in thirty (SIGABRT or SIGSEGV instead of exit 4). So a
command that loaded py-rattler ends its process as soon as its streams are flushed, before finalization: an
atexit handler registered in the process never runs, while the command's output and exit status stay whole."""

from __future__ import annotations

import json
import subprocess
import sys

RUN = """
import atexit, sys
from faforge import cli
atexit.register(lambda: print("finalized", file=sys.stderr))
sys.argv = ["faforge", *sys.argv[1:]]
sys.exit(cli.console_main())
"""


def faforge(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def empty_channel(root):
    for subdir in ("linux-64", "linux-aarch64", "noarch"):
        (root / subdir).mkdir(parents=True)
        (root / subdir / "repodata.json").write_text(json.dumps({"info": {"subdir": subdir}, "packages": {}}))
    return root


def test_a_command_that_ran_py_rattler_ends_before_finalization_with_its_output_whole(tmp_path):
    done = faforge("plan", "--channel", str(empty_channel(tmp_path / "channel")), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["in_channel"] == []  # the whole JSON document, flushed
    assert "finalized" not in done.stderr


def test_a_command_without_py_rattler_finalizes_as_usual(tmp_path):
    done = faforge("doctor", "--help", cwd=tmp_path)
    assert done.returncode == 0 and "usage: faforge doctor" in done.stdout
    assert "finalized" in done.stderr

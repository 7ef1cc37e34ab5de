"""An error about a setting's value names the setting (`$FAFORGE_ROOT`, ...), even when the value is too long
to print whole: an OSError on a path at or under a FAFORGE_* value names that variable (faforge.config.setting_of,
used by the CLI's one error path), and a shortened message keeps the set variables it names
(faforge.errors.shorten_message). The hostile-class cases (`label: named`) run the same through the CLI."""

from __future__ import annotations

import errno

import pytest

from faforge.cli import as_faforge_error
from faforge.config import setting_of
from faforge.errors import FaforgeError

HUGE = "A" * 131_000


def test_a_shortened_message_keeps_the_set_variable_it_names(monkeypatch):
    """Before: the name in the middle of a long message was cut with the value around it."""
    monkeypatch.setenv("FAFORGE_HTTP_TIMEOUT", HUGE)
    error = FaforgeError(f"{HUGE}: the value of FAFORGE_HTTP_TIMEOUT, {HUGE}, is no number", hint="unset it")
    assert "$FAFORGE_HTTP_TIMEOUT" in error.line() and len(error.line()) < 600
    assert "FAFORGE_HTTP_TIMEOUT" in error.to_json()["error"]["message"]


def test_a_name_inside_a_value_is_not_promoted(monkeypatch):
    """Only variables that are set count: a value spelling FAFORGE_* names puts none of them in front."""
    monkeypatch.delenv("FAFORGE_NOPE", raising=False)
    line = FaforgeError(f"{HUGE} FAFORGE_NOPE {'FAFORGE_X' * 20_000} {HUGE}").line()
    assert not line.startswith("$") and "FAFORGE_NOPE" not in line and len(line) < 500


@pytest.mark.parametrize(
    ("env", "path", "named"),
    [
        ({"FAFORGE_CACHE_DIR": "/c"}, "/c", "FAFORGE_CACHE_DIR"),
        ({"FAFORGE_CACHE_DIR": "/c/"}, "/c/torch-venvs/x", "FAFORGE_CACHE_DIR"),
        ({"FAFORGE_CACHE_DIR": "cache"}, "cache/renders/a.json", "FAFORGE_CACHE_DIR"),
        (
            {"FAFORGE_ROOT": "/r", "FAFORGE_CACHE_DIR": "/r/cache"},
            "/r/cache/x",
            "FAFORGE_CACHE_DIR",
        ),  # the longest value
        ({"FAFORGE_ROOT": "/r"}, "/r/variants/releases.yaml", "FAFORGE_ROOT"),
        ({"FAFORGE_ROOT": "/r"}, "/rx/variants", None),
        ({"FAFORGE_ROOT": "/"}, "/etc/x", None),  # `/` and `.` name no folder in particular
        ({"FAFORGE_ROOT": "."}, "x", None),
        ({"NOT_FAFORGE": "/r"}, "/r/x", None),
    ],
)
def test_setting_of_a_path(monkeypatch, env, path, named):
    for name in ("FAFORGE_CACHE_DIR", "FAFORGE_ROOT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert setting_of(path) == named


@pytest.mark.parametrize("name", ["FAFORGE_ROOT", "FAFORGE_CACHE_DIR", "FAFORGE_SYSROOT", "FAFORGE_GPU_KERNELS_JSON"])
def test_an_os_error_under_a_setting_names_it_whatever_its_length(monkeypatch, name):
    """Before: `AAAA…[131037 bytes]…/torch-venvs) — use a shorter name`, no word of the variable."""
    monkeypatch.setenv(name, f"/tmp/{HUGE}")
    error = as_faforge_error(OSError(errno.ENAMETOOLONG, "File name too long", f"/tmp/{HUGE}/torch-venvs"))
    assert error.line().startswith(f"${name} /tmp/AAA") and "has a name that is too long" in error.line()
    assert error.exit_code == 2 and len(error.line()) < 800

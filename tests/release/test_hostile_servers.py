"""Every remote read has a connect timeout and an overall deadline (FAFORGE_HTTP_TIMEOUT,
FAFORGE_HTTP_DEADLINE) and a body cap: against a real hostile server on loopback that hangs, drips,
redirects in a loop, resets, serves a gzip bomb, bad JSON or a huge Content-Length, each command exits 4
naming the URL, within the deadline (plus a margin for the process's start)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from faforge import httpclient, wheelfetch
from faforge.channel.local import index
from faforge.channel.repodata import query
from faforge.errors import FaforgeError
from faforge.release.bump.torch_wheels import read_index
from tests.release.test_bump import REPO
from tests.release.test_publish import package, passed
from tests.release.test_verify_kernels import kernel_package, split_flash_attn
from tests.support.hostile_server import serve_hostile

DEADLINE_S = 1.5
LIMITS = {httpclient.TIMEOUT_ENV: "1", httpclient.DEADLINE_ENV: str(DEADLINE_S)}
MARGIN_S = 20  # a process's start (imports, the matrix for plan) on a busy machine; a hang is endless
MODES = ["hang", "drip", "loop", "reset", "bomb", "badjson", "huge"]
# Modes in which the server answers slowly or never: a test against one waits out the deadline or the read
# timeout (2 to 12 s, mostly idle), so it is slow (tests/support/tiers.py); the quick modes stay fast.
WAITING = {"hang", "drip", "drip10", "silent", "probed"}


def modes(*names: str) -> list:
    return [pytest.param(name, marks=pytest.mark.slow) if name in WAITING else name for name in names]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The hostile server, and a real channel it serves under /files-MODE/ (a published kernel package)."""
    root = tmp_path_factory.mktemp("hostile")
    kernel_package(root / "channel", subdir="linux-aarch64")
    index(root / "channel")
    with serve_hostile(root) as base:
        yield base, root


@pytest.fixture
def limits(monkeypatch):
    for name, value in LIMITS.items():
        monkeypatch.setenv(name, value)


def faforge(*args, cwd=None, env=None):
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "faforge", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**os.environ, **LIMITS, **(env or {})},
            timeout=DEADLINE_S + MARGIN_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"faforge {' '.join(map(str, args))}: still running past the deadline + {MARGIN_S} s")
    return result, time.monotonic() - started


def assert_remote_failure(result, url: str) -> None:
    assert result.returncode == 4, result.stderr
    assert url in result.stderr and " — " in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("mode", modes(*MODES))
def test_channel_queries_stop_within_the_deadline(served, limits, mode):
    """py-rattler's reads (plan, page, bump): bounded by reqwest's timeout and a deadline around the query."""
    base, _ = served
    started = time.monotonic()
    with pytest.raises(FaforgeError) as caught:
        query(f"{base}/{mode}/ch", ["flash-attn"], ["linux-64"])
    assert time.monotonic() - started < DEADLINE_S + 5
    assert caught.value.exit_code == 4 and f"{base}/{mode}/ch" in caught.value.line() and " — " in caught.value.line()


@pytest.mark.parametrize("mode", modes(*MODES))
def test_index_pages_stop_within_the_deadline_and_the_cap(served, limits, mode):
    """faforge's own GET (PEP 691 and PEP 503 pages: bump --source pytorch-wheels, abi's wheel lookup)."""
    base, _ = served
    readers = [lambda: wheelfetch.list_files("torch", index=f"{base}/{mode}/simple")]
    if mode != "badjson":  # a PEP 503 page is HTML: any text parses
        readers.append(lambda: read_index(f"{base}/{mode}/whl/torch/"))
    for read in readers:
        started = time.monotonic()
        with pytest.raises(FaforgeError) as caught:
            read()
        assert time.monotonic() - started < DEADLINE_S + 5
        assert caught.value.exit_code == 4 and f"{base}/{mode}/" in caught.value.line() and " — " in caught.value.line()


@pytest.mark.parametrize("mode", modes("hang", "drip"))
def test_plan_page_and_bump_exit_4_within_the_deadline(served, tmp_path, mode):
    base, _ = served
    url = f"{base}/{mode}/ch"
    for args in (
        ["plan", "--channel", url, "--platform", "linux-64"],
        ["page", "--channel", url, "--out", tmp_path / "page"],
    ):
        result, _ = faforge(*args)
        assert_remote_failure(result, url)
    project = tmp_path / "project"
    for name in ("variants", "recipes", "scripts"):
        shutil.copytree(REPO / name, project / name)
    for source in ("conda-forge", "pytorch-wheels"):
        result, _ = faforge("bump", "--source", source, "--channel-url", url + "/", env={"FAFORGE_ROOT": str(project)})
        assert_remote_failure(result, url)


@pytest.mark.parametrize("mode", modes("hang", "drip", "bomb", "huge"))
def test_verify_kernel_download_exits_4_within_the_deadline(served, tmp_path, mode):
    """The channel's index answers; the kernel package itself is served by the hostile mode."""
    base, _ = served
    fa = split_flash_attn(tmp_path / "out", subdir="linux-aarch64")
    result, _ = faforge(
        "verify",
        fa,
        "--gates",
        "gpu",
        "--kernel-channel",
        f"{base}/files-{mode}/channel",
        "--manifest",
        tmp_path / "v",
        env={"FAFORGE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert_remote_failure(result, f"{base}/files-{mode}/channel/linux-aarch64/")
    assert not list((tmp_path / "cache").rglob("*.conda")), "nothing is cached from a failed download"


@pytest.mark.slow  # waits out the deadline (see WAITING)
def test_publish_to_a_hanging_server_exits_4_within_the_deadline(served, tmp_path):
    base, _ = served
    one = package(tmp_path / "a")
    passed(tmp_path / "verification", one)
    result, _ = faforge(
        "publish",
        one,
        "--manifest",
        tmp_path / "verification",
        "--to",
        f"artifactory:{base}/hang/artifactory/api/conda/my-channel",
        env={"ARTIFACTORY_TOKEN": "t0ken"},
    )
    assert_remote_failure(result, f"{base}/hang/artifactory/api/conda/my-channel")


# kind: (--to under the server's base, token variable, options); artifactory with --force skips its HEAD check.
# Not anaconda: its API paths start with /stage/, not with the mode the hostile server reads from the path;
# it runs through the same child process as these three. /probed/ answers faforge's HEAD probe, then hangs
# (a server silent from the start fails at the probe: test_every_url_command_stops_within_the_read_timeout).
UPLOADS = {
    "prefix": ("prefix:{base}/probed/my-channel", "PREFIX_API_KEY", ()),
    "quetz": ("quetz:{base}/probed/my-channel", "QUETZ_API_KEY", ()),
    "artifactory": ("artifactory:{base}/probed/artifactory/api/conda/my-channel", "ARTIFACTORY_TOKEN", ("--force",)),
}


@pytest.mark.slow  # waits out the deadline (see WAITING)
@pytest.mark.parametrize("kind", UPLOADS)
def test_an_upload_to_a_hanging_server_exits_4_within_the_deadline(served, tmp_path, kind):
    """py-rattler-build's uploads hold the GIL while they wait on the network, so only a child process
    killed at the deadline bounds them once the server has answered the probe (before, each of these
    waited forever)."""
    base, _ = served
    one = package(tmp_path / "a")
    passed(tmp_path / "verification", one)
    to, token_env, extra = UPLOADS[kind]
    result, took = faforge(
        "publish",
        one,
        "--manifest",
        tmp_path / "verification",
        "--to",
        to.format(base=base),
        *extra,
        env={token_env: "t0ken-s3cret"},
    )
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert httpclient.DEADLINE_ENV in result.stderr and " — " in result.stderr, result.stderr
    assert "t0ken-s3cret" not in result.stderr + result.stdout
    assert took < DEADLINE_S + MARGIN_S


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf", "0", ""])
@pytest.mark.parametrize("name", [httpclient.TIMEOUT_ENV, httpclient.DEADLINE_ENV])
def test_limits_from_the_environment_are_validated(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(FaforgeError) as caught:
        httpclient.limits()
    assert caught.value.exit_code == 2 and name in caught.value.line() and " — " in caught.value.line()


def test_a_bad_limit_is_exit_2_naming_the_variable(served):
    base, _ = served
    result, _ = faforge(
        "plan", "--channel", f"{base}/ok/ch", "--platform", "linux-64", env={httpclient.DEADLINE_ENV: "nan"}
    )
    assert result.returncode == 2 and httpclient.DEADLINE_ENV in result.stderr and "Traceback" not in result.stderr, (
        result.stderr
    )


# ---------------------------------------------------------------- the single-read timeout
# Only FAFORGE_HTTP_TIMEOUT is short here: the deadline stays at its default (600 s), so a command that
# waits for it instead of the read timeout runs into the child's timeout and fails the test.
READ_TIMEOUT_S = 2
READ_MARGIN_S = 10  # the single-read timeout: "within the read timeout plus 10 s" (a process's start included)
READ_CHILD_TIMEOUT_S = 30  # a hang is a failed case, not a 600 s wait


def faforge_read_timeout(*args, cwd=None, env=None):
    """faforge ARGS with the read timeout short and the deadline at its default; (result, seconds)."""
    environment = {k: v for k, v in os.environ.items() if k != httpclient.DEADLINE_ENV}
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "faforge", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**environment, httpclient.TIMEOUT_ENV: str(READ_TIMEOUT_S), **(env or {})},
            timeout=READ_CHILD_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"faforge {' '.join(map(str, args))}: still running after {READ_CHILD_TIMEOUT_S} s "
            f"({httpclient.TIMEOUT_ENV}={READ_TIMEOUT_S}, the deadline at its default)"
        )
    return result, time.monotonic() - started


def url_commands(base: str, mode: str, tmp_path) -> dict[str, tuple[list, str, dict]]:
    """Every command line that reads a URL, each pointed at the hostile server's `mode`:
    name -> (argv, the URL its error must name, extra environment)."""
    project = tmp_path / "project"
    for name in ("variants", "recipes", "scripts"):
        if not (project / name).exists():
            shutil.copytree(REPO / name, project / name)
    split = split_flash_attn(tmp_path / "split")  # needs its kernel package: verify and publish --channel look for it
    one = package(tmp_path / "one")  # needs none: a server target holds no channel to find it in
    passed(tmp_path / "verification", split)
    passed(tmp_path / "verification", one)
    ch = f"{base}/{mode}/ch"
    root = {"FAFORGE_ROOT": str(project)}
    return {
        "plan --channel": (["plan", "--channel", ch, "--platform", "linux-64"], ch, {}),
        "page --channel": (["page", "--channel", ch, "--out", tmp_path / "page"], ch, {}),
        "bump conda-forge --channel-url": (["bump", "--source", "conda-forge", "--channel-url", ch], ch, root),
        "bump pytorch-wheels --channel-url": (
            ["bump", "--source", "pytorch-wheels", "--channel-url", ch + "/"],
            ch,
            root,
        ),
        "verify --kernel-channel": (
            ["verify", split, "--gates", "abi", "--kernel-channel", ch, "--manifest", tmp_path / "v"],
            ch,
            {"FAFORGE_CACHE_DIR": str(tmp_path / "cache")},
        ),
        "publish --channel": (
            ["publish", split, "--to", tmp_path / "out", "--manifest", tmp_path / "verification", "--channel", ch],
            ch,
            {},
        ),
        "publish --to prefix:": (
            ["publish", one, "--to", f"prefix:{base}/{mode}/up", "--manifest", tmp_path / "verification"],
            f"{base}/{mode}",
            {"PREFIX_API_KEY": "t0ken"},
        ),
    }


URL_COMMANDS = [
    "plan --channel",
    "page --channel",
    "bump conda-forge --channel-url",
    "bump pytorch-wheels --channel-url",
    "verify --kernel-channel",
    "publish --channel",
    "publish --to prefix:",
]


@pytest.mark.parametrize("command", URL_COMMANDS)
@pytest.mark.parametrize("mode", modes("silent", "drip10"))
def test_every_url_command_stops_within_the_read_timeout(served, tmp_path, mode, command):
    """A server that accepts and never sends a byte, or sends one every 10 s (each read longer than the
    2 s read timeout): exit 4 naming the URL within the read timeout plus 10 s, never the 600 s deadline.
    An upload answered 200 at once is published whatever its body does (README, "Caps and deadlines")."""
    base, _ = served
    argv, url, env = url_commands(base, mode, tmp_path)[command]
    result, took = faforge_read_timeout(*argv, env=env)
    print(f"{command} {mode}: exit {result.returncode} in {took:.1f} s: {result.stderr.strip()}")
    if command == "publish --to prefix:" and mode == "drip10":
        assert result.returncode == 0, result.stderr
    else:
        assert_remote_failure(result, url)
    assert took <= READ_TIMEOUT_S + READ_MARGIN_S, f"{command}: {took:.1f} s\n{result.stderr}"


@pytest.mark.parametrize("mode", modes("silent", "drip10"))
def test_verify_kernel_download_stops_within_the_read_timeout(served, tmp_path, mode):
    """The channel's index answers; the kernel package's download (faforge's own client) is silent or drips."""
    base, _ = served
    fa = split_flash_attn(tmp_path / "out", subdir="linux-aarch64")
    result, took = faforge_read_timeout(
        "verify",
        fa,
        "--gates",
        "gpu",
        "--kernel-channel",
        f"{base}/files-{mode}/channel",
        "--manifest",
        tmp_path / "v",
        env={"FAFORGE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert_remote_failure(result, f"{base}/files-{mode}/channel/linux-aarch64/")
    assert httpclient.TIMEOUT_ENV in result.stderr and took <= READ_TIMEOUT_S + READ_MARGIN_S, (took, result.stderr)


@pytest.mark.slow  # waits out the read timeout (see WAITING)
def test_a_silent_server_ends_a_query_at_the_read_timeout(served, monkeypatch):
    base, _ = served
    monkeypatch.setenv(httpclient.DEADLINE_ENV, "60")  # far past the read timeout, short enough that a failure ends
    monkeypatch.setenv(httpclient.TIMEOUT_ENV, str(READ_TIMEOUT_S))
    started = time.monotonic()
    with pytest.raises(FaforgeError) as caught:
        query(f"{base}/silent/ch", ["flash-attn"], ["linux-64"])
    took = time.monotonic() - started
    assert took < READ_TIMEOUT_S + 3, took
    line = caught.value.line()
    assert caught.value.exit_code == 4 and f"{base}/silent/ch" in line and httpclient.TIMEOUT_ENV in line, line


@pytest.mark.parametrize("mode", modes("drip", "probed"))
def test_a_drip_within_the_read_timeout_or_a_server_silent_after_the_probe_ends_at_the_deadline(
    served, monkeypatch, mode
):
    """The bound a single-read timeout cannot give: one byte a second never makes a read wait 2 s, and
    py-rattler's client has only a whole-request timeout; the deadline ends both, naming it."""
    base, _ = served
    monkeypatch.setenv(httpclient.TIMEOUT_ENV, str(READ_TIMEOUT_S))
    monkeypatch.setenv(httpclient.DEADLINE_ENV, "5")
    started = time.monotonic()
    with pytest.raises(FaforgeError) as caught:
        query(f"{base}/{mode}/ch", ["flash-attn"], ["linux-64"])
    took = time.monotonic() - started
    assert 5 - 0.5 <= took < 5 + 3, took
    line = caught.value.line()
    assert caught.value.exit_code == 4 and f"{base}/{mode}/ch" in line and httpclient.DEADLINE_ENV in line, line

"""Where `faforge publish` puts packages: a local channel folder, or a server via py-rattler-build.

TARGET is a folder or file:// URL (the default, ./channel, works offline), or KIND:URL for a
server: prefix:https://prefix.dev/CHANNEL, quetz:https://HOST/CHANNEL,
artifactory:https://HOST/artifactory/api/conda/CHANNEL, anaconda:https://api.anaconda.org/OWNER[/LABEL].
Tokens come only from the environment variable named per kind, never from the command line
(where they would land in shell history and CI logs), and never appear in faforge's output.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit
from urllib.request import url2pathname

from faforge import httpclient
from faforge.errors import EXIT_PROBLEMS, FaforgeError, RemoteError
from faforge.release.manifest import require_passed
from faforge.release.package import PackageFacts

# How long the upload child may take to import rattler_build before the deadline starts: a local start,
# seconds on a busy machine, never the server's time.
CHILD_START_S = 120

# The variables rattler-build's own `upload` subcommands read, so one CI secret serves both.
TOKEN_ENV = {
    "prefix": "PREFIX_API_KEY",
    "quetz": "QUETZ_API_KEY",
    "artifactory": "ARTIFACTORY_TOKEN",
    "anaconda": "ANACONDA_API_KEY",
}


@dataclass(frozen=True)
class Target:
    kind: str  # folder | prefix | quetz | artifactory | anaconda
    url: str  # server base URL, or the folder path
    channel: str  # channel (or anaconda owner[/label]) on the server

    def __str__(self) -> str:
        return self.url if self.kind == "folder" else f"{self.kind}:{self.url}/{self.channel}"


def shown(text: str) -> str:
    """A URL as it may be printed: user-info and query values become ***, whatever they hold."""
    kind, sep, rest = text.partition(":")
    if sep and kind in TOKEN_ENV:
        return f"{kind}:{shown(rest)}"
    parts = urlsplit(text)
    if "://" not in text or not (parts.username or parts.password or parts.query):
        return text
    host = parts.hostname or ""
    netloc = ("***@" if parts.username or parts.password else "") + host + (f":{parts.port}" if parts.port else "")
    query = "&".join(f"{k}=***" if sep else "***" for k, sep, _ in (q.partition("=") for q in parts.query.split("&")))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def parse_target(text: str) -> Target:
    if not text.strip():  # `--to "$UNSET"` must not publish into the current folder
        raise FaforgeError("--to is empty", hint="pass a channel folder, file:///PATH or KIND:https://HOST/CHANNEL")
    kind, sep, rest = text.partition(":")
    parts = urlsplit(rest if sep and kind in TOKEN_ENV else text)
    if parts.username or parts.password or parts.query:
        # Typed into a URL, a token lands in shell history and CI logs; only the environment carries it.
        raise FaforgeError(
            f"--to {shown(text)}: credentials or a query in the URL are not accepted",
            hint="remove them from the URL and put the token in " + ", ".join(f"${v}" for v in TOKEN_ENV.values()),
        )
    if sep and kind in TOKEN_ENV:
        if parts.scheme not in ("http", "https") or not parts.netloc or not parts.path.strip("/"):
            raise FaforgeError(
                f"--to {text}: expected {kind}:https://HOST/CHANNEL", hint="e.g. prefix:https://prefix.dev/my-channel"
            )
        path = parts.path.strip("/")
        if kind == "artifactory":
            # The whole URL names the channel; rattler-build wants the server URL and that channel URL.
            return Target(kind=kind, url=f"{parts.scheme}://{parts.netloc}", channel=path)
        if kind == "anaconda":
            return Target(kind=kind, url=f"{parts.scheme}://{parts.netloc}", channel=path)
        base, _, channel = path.rpartition("/")
        return Target(kind=kind, url=f"{parts.scheme}://{parts.netloc}" + (f"/{base}" if base else ""), channel=channel)
    if text.startswith("file://"):
        # file:///ABS/PATH only: `file://` alone would be the current folder, `file://x/y` a host named x.
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise FaforgeError(
                f"--to {text}: expected file:///ABSOLUTE/PATH (three slashes)", hint="or pass the folder path itself"
            )
        return Target(kind="folder", url=url2pathname(parts.path), channel="")
    if "://" in text:
        raise FaforgeError(
            f"--to {text}: unknown target",
            hint=f"use a folder, file://PATH, or one of {', '.join(k + ':URL' for k in TOKEN_ENV)}",
        )
    return Target(kind="folder", url=str(Path(text).expanduser()), channel="")


def token_for(target: Target) -> str:
    name = TOKEN_ENV[target.kind]
    token = os.environ.get(name, "")
    if not token:
        raise FaforgeError(
            f"publishing to {target} needs a token in the environment variable {name}",
            hint=f"export {name} (in CI: a repository secret); tokens are never taken from the command line",
        )
    return token


def redact(text: str, secret: str) -> str:
    """Scrub the secret as typed and as a URL would spell it (percent-encoded)."""
    for spelling in dict.fromkeys((secret, quote(secret, safe=""), quote_plus(secret))) if secret else ():
        text = text.replace(spelling, "***")
    return text


def _artifactory_has(target: Target, token: str, subdir: str, filename: str) -> bool:
    """Artifactory's PUT replaces silently, so ask first (HEAD of the file's channel URL)."""
    url = f"{target.url}/{target.channel}/{subdir}/{filename}"
    try:
        httpclient.request(url, kind="status", method="HEAD", headers={"Authorization": f"Bearer {token}"})
        return True
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise RemoteError(
            f"cannot tell whether {url} exists: HTTP {exc.code}", hint="check the server and the token, then retry"
        ) from None


def upload(
    target: Target, packages: list[PackageFacts], *, manifest_dir: Path, required: tuple[str, ...], force: bool
) -> None:
    """Upload packages through py-rattler-build, in a child process killed at the deadline (server_upload);
    refuses to replace unless `force`. Each package's
    gates are checked against the manifest here first (require_passed), so no caller can skip them."""
    for package in packages:
        require_passed(manifest_dir, package, required)
    token = token_for(target)
    if target.kind == "quetz" and force:
        raise FaforgeError(
            "quetz uploads cannot replace a file (py-rattler-build sends force=false)",
            hint="delete the file on the server first, or publish without --force",
        )
    _probe_server(target)
    if target.kind == "artifactory" and not force:
        present = [p.filename for p in packages if _artifactory_has(target, token, p.subdir, p.filename)]
        if present:
            raise FaforgeError(f"{', '.join(present)} already on {target}", hint="pass --force to replace", exit_code=1)
    answer = _upload_in_child(
        target, [str(p.path) for p in packages], force=force, seconds=httpclient.limits().deadline_s * len(packages)
    )
    if "error" in answer:  # py-rattler-build's UploadError/AuthError; a server may echo the token back
        message = redact(str(answer["error"]), token)
        if "already exists" in message:  # the server refused to replace: a finding (exit 1), as for a folder
            raise FaforgeError(
                f"upload to {target} refused: {message}", exit_code=EXIT_PROBLEMS, hint="pass --force to replace it"
            )
        raise RemoteError(
            f"upload to {target} failed: {message}", hint="check the server, the channel and the token, then retry"
        )


def _probe_server(target: Target) -> None:
    """The upload child bounds a whole upload only (it is killed at the deadline): ask the server for its
    root's status first (HEAD, no token), under the connect and single-read timeout, so a server that
    says nothing fails in seconds, not at the deadline. Any HTTP status is an answer, and any
    other failure is left to the upload to report."""
    try:
        httpclient.probe(f"{target.url}/", method="HEAD")
    except httpclient.Stalled as exc:
        raise RemoteError(f"upload to {target}: {exc.message}", input=str(target), hint=exc.hint) from None


def _upload_in_child(target: Target, files: list[str], *, force: bool, seconds: float) -> dict:
    """faforge.release.publish.server_upload's answer, or a RemoteError when it has none within `seconds`
    (one overall deadline per package file: FAFORGE_HTTP_DEADLINE), counted from the child's "ready"."""
    spec = {
        "kind": target.kind,
        "url": target.url,
        "channel": target.channel,
        "files": files,
        "force": force,
        "token_env": TOKEN_ENV[target.kind],
    }
    with subprocess.Popen(
        [sys.executable, "-m", "faforge.release.publish.server_upload"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(),
    ) as child:
        try:
            ready = _first_line(child, CHILD_START_S)
            out, err = child.communicate(json.dumps(spec), timeout=seconds) if ready else child.communicate()
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise RemoteError(
                f"upload to {target}: no answer within {seconds:g} s ({httpclient.DEADLINE_ENV}, per package)",
                input=str(target),
                hint=httpclient.deadline_hint(),
            ) from None
    lines = out.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if ready and lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        token = os.environ.get(TOKEN_ENV[target.kind], "")
        tail = redact(err.strip()[-400:], token) or f"exit status {child.returncode}"
        raise RemoteError(
            f"upload to {target} failed: the upload process ended without an answer ({tail})",
            hint="check the server, the channel and the token, then retry",
        )
    return answer


def _first_line(child: subprocess.Popen[str], seconds: float) -> bool:
    """Whether the child printed its {"ready": true} line within `seconds` (it is killed if not)."""
    assert child.stdout is not None  # started with stdout=PIPE
    ready, _, _ = select.select([child.stdout], [], [], seconds)
    line = child.stdout.readline() if ready else ""
    if not line:
        child.kill()
        return False
    return line.strip() == '{"ready": true}'


def _child_env() -> dict[str, str]:
    """The environment, with faforge's package importable in the child as it is here."""
    package_root = str(Path(__file__).resolve().parents[3])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH", "")]))}

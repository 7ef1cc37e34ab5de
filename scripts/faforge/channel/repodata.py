"""Read a channel's repodata with py-rattler: local folders, file:// and http(s):// channels, or names.

`faforge plan` asks what a channel already holds, `faforge page` lists it, `faforge bump` reads
conda-forge's torch builds, and `verify --kernel-channel` and `publish --channel` find kernel packages;
all go through this one network code path.

py-rattler's client has a whole-request timeout only (reqwest's `timeout`: a server that answers nothing
and one that drips both run to it), so a query of an http(s) channel first probes the channel through
faforge.httpclient, which bounds each read (FAFORGE_HTTP_TIMEOUT): a server silent from the start fails
in seconds, not at the deadline. py-rattler then gets what is left of the query's one deadline
(FAFORGE_HTTP_DEADLINE), for each request and for the whole query.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import time
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from faforge import httpclient, paths, untrusted
from faforge.channel.sandbox import refuse_link
from faforge.errors import EXIT_BAD_INPUT, FaforgeError, RemoteError, why_not_a_folder


class ChannelNotFound(RemoteError):
    """The server answers but has no repodata there (HTTP 404): no such channel, or nothing published yet."""


def channel_url(
    channel: str | Path, option: str = "the channel", if_empty: str = "pass a channel folder, a URL or a channel name"
) -> str:
    """A URL py-rattler accepts: URLs and names pass through; a folder becomes file://. An empty value
    (`--channel "$UNSET"`) is refused, never read as "no channel"; `option` and `if_empty` say which
    argument it was and what to do instead."""
    text = str(channel)
    if not text.strip():
        raise FaforgeError(f"{option} {text!r}: empty", input=option, hint=if_empty)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    with paths.user_path(None, path):
        if text.startswith((".", "/", "~")) or "/" in text or path.exists():
            if not path.is_dir():
                raise FaforgeError(
                    f"channel folder {path} {why_not_a_folder(path)}",
                    hint="publish to it first (`faforge publish`), or pass the channel's URL",
                )
            return path.resolve().as_uri()
    return text  # a channel name such as conda-forge, resolved by py-rattler's channel alias


# What py-rattler may read in a local channel's subdir: each is checked first (regular file, within the cap).
INDEX_FILES = ("repodata.json", "repodata.json.zst", "repodata.json.bz2", "repodata_shards.msgpack.zst")


def check_local_index(folder: Path, subdirs: list[str]) -> None:
    """Refuse a local channel whose index file is a FIFO, a device, a link to one, or past the repodata
    cap, before py-rattler opens it (it would block forever, or read /dev/zero until killed), and one whose
    platform folder or index file is a link: the sandbox's rule holds for reads too (docs/hosting.md, the channel)."""
    for subdir in subdirs:
        refuse_link(folder, folder / subdir)
        for name in INDEX_FILES:
            path = folder / subdir / name
            if os.path.lexists(path):
                refuse_link(folder, path)
                hint = f"remove it and rebuild the index: `faforge index {folder}`"
                if (
                    name == "repodata.json"
                ):  # py-rattler parses it leniently (a 10^5-digit integer passes): strictly first
                    untrusted.load_json(path, "repodata", "channel index", hint=hint)
                else:
                    untrusted.check_file(path, "repodata", "channel index", hint=hint)


def query(channel: str | Path, names: list[str], platforms: list[str]) -> list:
    """Every RepoDataRecord of `names` in `channel` for `platforms` (plus noarch), fetched fresh."""
    from rattler import Channel, Gateway, SourceConfig, Subdir  # noqa: PLC0415 (py-rattler: slow to import)
    from rattler.networking import (  # noqa: PLC0415 (py-rattler: slow to import)
        AuthenticationMiddleware,
        Client,
        GCSMiddleware,
        OciMiddleware,
        S3Middleware,
    )

    url = channel_url(channel)
    if url.startswith("file://"):
        check_local_index(Path(url2pathname(urlparse(url).path)), [*platforms, "noarch"])
    bounds = httpclient.limits()
    started = time.monotonic()
    _probe(channel, url, platforms)
    left = bounds.deadline_s - (time.monotonic() - started)
    # py-rattler's default stack without its retries (their error names no URL). wait_for bounds the whole
    # query by what the probe left of the deadline; reqwest's timeout (whole seconds) is a backstop a second
    # later: at the same moment its bare "operation timed out", which names no limit, won the race.
    client = Client(
        [AuthenticationMiddleware(), OciMiddleware(), GCSMiddleware(), S3Middleware()],
        timeout=max(1, math.ceil(left)) + 1,
    )
    gateway = Gateway(default_config=SourceConfig(cache_action="no-cache"), client=client)
    error = None
    try:
        result = asyncio.run(
            asyncio.wait_for(
                gateway.query([Channel(url)], [Subdir(p) for p in (*platforms, "noarch")], names, recursive=False),
                max(left, 0.001),
            )
        )
        records = [record for records in result for record in records]
    except TimeoutError:
        error = f"no complete answer within {bounds.deadline_s:g} s ({httpclient.DEADLINE_ENV})"
    except Exception as exc:  # GatewayError and friends carry the HTTP/IO cause
        error = str(exc)
    finally:
        # py-rattler's runtime threads may still hold Python objects (the gateway, the exception);
        # if the interpreter exits before they are dropped it aborts in PyGILState_Release.
        # Dropping them here, outside the except block, makes exits clean.
        del gateway, client
        gc.collect()
    if error is not None:
        kind = ChannelNotFound if "could not find subdir" in error else RemoteError
        local = url.startswith("file://")
        # The first line of py-rattler's error says what failed; its cause chain (4-6 lines) is for --verbose.
        raise kind(
            f"cannot read repodata of {url} ({', '.join(platforms)}): {error.strip().splitlines()[0]}",
            hint="a local channel needs `faforge publish` (or `faforge index`) first"
            if local
            else httpclient.deadline_hint()
            if httpclient.DEADLINE_ENV in error
            else "check the channel URL and your network, then retry",
            detail=error,
            exit_code=EXIT_BAD_INPUT if local else None,
            input=str(channel),
        )
    return records


def _probe(channel: str | Path, url: str, platforms: list[str]) -> None:
    """Ask an http(s) channel for the start of its first platform's repodata.json through faforge's own
    client, which bounds the connect and each read, before py-rattler, which cannot: a server that says
    nothing, or drips slower than one read may wait, ends here, exit 4 naming the channel. Any HTTP
    status passes (a 404 is for py-rattler to explain), as does any other failure (py-rattler reports
    it, through its own TLS and proxies). Other schemes (file, s3, gs, oci) are not probed."""
    from rattler import Channel  # noqa: PLC0415 (py-rattler: slow to import)

    try:
        base_url = Channel(url).base_url  # a name through py-rattler's channel alias
    except Exception:  # an invalid channel: py-rattler's query says why
        return
    if not base_url.startswith(("http://", "https://")):
        return
    try:
        httpclient.probe(f"{base_url.rstrip('/')}/{platforms[0]}/repodata.json")
    except httpclient.Stalled as exc:
        raise RemoteError(
            f"cannot read repodata of {url} ({', '.join(platforms)}): {exc.message}", hint=exc.hint, input=str(channel)
        ) from None

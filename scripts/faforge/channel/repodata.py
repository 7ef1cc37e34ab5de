"""Read a channel's repodata with py-rattler: local folders, file:// and http(s):// channels, or names.

`faforge plan` asks what a channel already holds, `faforge page` lists it, and `faforge bump`
reads conda-forge's torch builds; all three go through this one network code path.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from faforge.errors import FaforgeError


class ChannelNotFound(FaforgeError):
    """The server answers but has no repodata there (HTTP 404): no such channel, or nothing published yet."""


def channel_url(channel: str | Path) -> str:
    """A URL py-rattler accepts: URLs and names pass through; a folder becomes file://."""
    text = str(channel)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    if path.exists() or text.startswith((".", "/", "~")) or "/" in text:
        if path.exists() and not path.is_dir():
            raise FaforgeError(f"channel folder {path} is a file, not a folder", hint="pass the channel's folder (the one holding linux-64/, noarch/) or its URL")
        if not path.is_dir():
            raise FaforgeError(f"channel folder {path} does not exist", hint="publish to it first (`faforge publish`), or pass the channel's URL")
        return path.resolve().as_uri()
    return text  # a channel name such as conda-forge, resolved by py-rattler's channel alias


def query(channel: str | Path, names: list[str], platforms: list[str]) -> list:
    """Every RepoDataRecord of `names` in `channel` for `platforms` (plus noarch), fetched fresh."""
    from rattler import Channel, Gateway, SourceConfig  # noqa: PLC0415

    url = channel_url(channel)
    gateway = Gateway(default_config=SourceConfig(cache_action="no-cache"))
    error = None
    try:
        result = asyncio.run(gateway.query([Channel(url)], [*platforms, "noarch"], names, recursive=False))
        records = [record for records in result for record in records]
    except Exception as exc:  # GatewayError and friends carry the HTTP/IO cause
        error = str(exc)
    finally:
        # py-rattler's runtime threads may still hold Python objects (the gateway, the exception);
        # if the interpreter exits before they are dropped it aborts in PyGILState_Release.
        # Dropping them here, outside the except block, makes exits clean.
        del gateway
        gc.collect()
    if error is not None:
        kind = ChannelNotFound if "could not find subdir" in error else FaforgeError
        raise kind(
            f"cannot read repodata of {url} ({', '.join(platforms)}): {error}",
            hint="a local channel needs `faforge publish` (or `faforge index`) first" if url.startswith("file://")
            else "check the channel URL and your network (the URL must serve <subdir>/repodata.json)",
            exit_code=1,
        )
    return records

"""The one HTTP client: every request gets a connect timeout, an overall deadline and a body cap.

A socket timeout bounds the connect and each single read (FAFORGE_HTTP_TIMEOUT), not the request: a
server that drips one byte a second never trips it. So each request has a watch (faforge.httpwatch) that shuts
its sockets down when the deadline passes, whatever the server is doing; redirects are followed at most
MAX_REDIRECTS times; a body (after gzip/deflate decoding, so a bomb stops at the cap) larger than its
kind's cap is refused. A body is whole or a failure: one that ends before its Content-Length, or a
compressed or chunked body cut off mid-stream, is refused for every caller (index pages, wheel ranges,
packages), never returned short. Every failure is a RemoteError (exit 4) naming the URL.
FAFORGE_HTTP_TIMEOUT and FAFORGE_HTTP_DEADLINE change the limits (docs/reference/caps.md); a
caller that makes many requests for one read (a whole wheel index) passes `until`, the deadline of the
whole read, which each request's own deadline never outlasts.

`probe` is for the clients that cannot honour a single-read timeout (py-rattler's has only a whole-request
one): it asks the server for a few bytes under these limits first, so a silent server fails in seconds.
"""

from __future__ import annotations

import http.client
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from email.message import Message

from faforge import untrusted
from faforge.errors import FaforgeError, RemoteError
from faforge.httpwatch import Watch, opener

TIMEOUT_ENV = "FAFORGE_HTTP_TIMEOUT"
DEADLINE_ENV = "FAFORGE_HTTP_DEADLINE"
DEFAULT_TIMEOUT_S = 30.0  # to connect, and for any single read
DEFAULT_DEADLINE_S = 600.0  # for the whole request: connect, redirects, headers and body
MAX_SECONDS = 24 * 3600.0
MIB = 1 << 20
PROBE_BYTES = 4096  # what probe() reads of a body: more than one read, so a drip slower than the read timeout fails it
# The most bytes a response body of each kind may have, after decoding.
BODY_CAPS = {
    "index page": untrusted.CAPS["index page"],  # a PEP 691 JSON or PEP 503 HTML page, the same cap as a local one's
    # One range of a remote wheel (a member's compressed bytes): the caller passes the length it asked for as
    # max_bytes, never more than a package's cap (torch 2.8's libtorch_cuda.so alone is 115 MB compressed).
    "wheel range": untrusted.CAPS["package"],
    "package": untrusted.CAPS["package"],
    "status": 1 * MIB,  # an upload server's answer to HEAD or PUT
}
USER_AGENT = "faforge"
SHORT_HINT = "retry; a transfer that stops short again is a fault of the server or the network"


class Stalled(RemoteError):
    """The server said nothing within the read timeout, or had not finished within the deadline."""


@dataclass(frozen=True)
class Limits:
    connect_s: float
    deadline_s: float


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise FaforgeError(
            f"{name}={raw[:40]!r}: not a number of seconds above 0 and at most {MAX_SECONDS:.0f}",
            input=name,
            hint=f"set it to e.g. {default:.0f}, or unset it",
        )
    return value


def limits() -> Limits:
    """The connect timeout and overall deadline, from the environment (validated) or the defaults."""
    return Limits(_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S), _seconds(DEADLINE_ENV, DEFAULT_DEADLINE_S))


def deadline_hint() -> str:
    return (
        f"the server is slow, stalled or unreachable: retry later, check the server, or raise {DEADLINE_ENV} (seconds)"
    )


def timeout_hint() -> str:
    return f"the server is stalled or unreachable: retry later, check the server, or raise {TIMEOUT_ENV} (seconds)"


@dataclass(frozen=True)
class Response:
    status: int
    headers: Message
    body: bytes


def until() -> float:
    """The monotonic time at which a read of many requests that starts now must be done (FAFORGE_HTTP_DEADLINE)."""
    return time.monotonic() + limits().deadline_s


def request(
    url: str,
    *,
    kind: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    max_bytes: int | None = None,
    first: int | None = None,
    until: float | None = None,
) -> Response:
    """One HTTP request within limits(): the status, headers and (capped, decoded, whole) body; HTTP errors
    (4xx/5xx) are urllib.error.HTTPError as urlopen raises them, everything else a RemoteError naming the URL.
    `max_bytes` narrows `kind`'s cap (a range request: the bytes asked for), never widens it. `first` reads
    only that many bytes of the body and stops there (a probe; more is no error). `until` (from until()) ends
    the request when the read it is part of runs out of time, whichever deadline comes first."""
    configured = bounds = limits()
    if until is not None:
        left = until - time.monotonic()
        if left <= 0:
            raise _late(url, configured, whole=True)
        bounds = Limits(min(bounds.connect_s, left), min(bounds.deadline_s, left))
    whole = bounds.deadline_s < configured.deadline_s
    if url.startswith(
        "file://"
    ):  # a local channel's file: read as any file faforge did not write (exit 4: the channel is the remote)
        path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        return Response(
            200,
            Message(),
            untrusted.read_bytes(
                path,
                kind if kind in untrusted.CAPS else "data",
                hint="re-index the channel, or name another",
                remote=True,
            ),
        )
    cap = min(BODY_CAPS[kind], max_bytes) if max_bytes is not None else BODY_CAPS[kind]
    watch = Watch(bounds.deadline_s)
    req = urllib.request.Request(url, data=data, method=method, headers={"User-Agent": USER_AGENT, **(headers or {})})
    started = time.monotonic()
    watch.timer.start()
    try:
        with opener(watch).open(req, timeout=min(bounds.connect_s, bounds.deadline_s)) as response:
            body = _read_capped(response, url, kind, cap, watch, first) if method != "HEAD" else b""
            return Response(response.status, response.headers, body)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response's socket; callers need only its status
        if watch.fired:
            raise _late(url, configured, whole=whole) from None
        raise
    except http.client.IncompleteRead as exc:
        if watch.fired:
            raise _late(url, configured, whole=whole) from None
        raise RemoteError(
            f"{url}: its body ended after {len(exc.partial):,} bytes, before its last chunk: the connection closed "
            "mid-body",
            input=url,
            hint=SHORT_HINT,
        ) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        if watch.fired or time.monotonic() - started >= bounds.deadline_s:
            raise _late(url, configured, whole=whole) from None
        reason = getattr(exc, "reason", None) or exc
        if isinstance(
            reason, TimeoutError
        ):  # the connect, or one read (the status line, a header, a piece of the body)
            raise Stalled(
                f"{url}: no answer within {bounds.connect_s:g} s ({TIMEOUT_ENV}, to connect and for each read)",
                input=url,
                hint=timeout_hint(),
            ) from None
        raise RemoteError(
            f"{url}: no usable answer: {reason or type(exc).__name__}",
            input=url,
            hint="check the URL and the network, or run where that server is reachable",
        ) from None
    finally:
        watch.timer.cancel()


def probe(url: str, *, method: str = "GET") -> None:
    """Stalled (a RemoteError naming the URL) when the server at `url` is silent: nothing within the read
    timeout to connect, for the status, or for any read of (GET) the first PROBE_BYTES of the body, asked
    for with a Range header; or not done within the deadline. For clients that bound a whole request only.
    Any HTTP status is an answer, and any other failure (refused, reset, TLS) is left to the real client,
    which may connect where urllib cannot (its own certificates and proxies) and says what it finds."""
    headers = {"Range": f"bytes=0-{PROBE_BYTES - 1}"} if method == "GET" else {}
    try:
        request(url, kind="status", method=method, headers=headers, first=PROBE_BYTES)
    except Stalled:
        raise
    except (urllib.error.HTTPError, RemoteError):
        pass


def _late(url: str, bounds: Limits, *, whole: bool = False) -> Stalled:
    """The deadline passed: this request's, or (`whole`) that of the read of many requests it is part of."""
    what = f"the {bounds.deadline_s:g} s of the whole read it is part of" if whole else f"{bounds.deadline_s:g} s"
    return Stalled(f"{url}: no complete answer within {what} ({DEADLINE_ENV})", input=url, hint=deadline_hint())


def _too_big(url: str, kind: str, cap: int, what: str) -> RemoteError:
    return RemoteError(
        f"{url}: {what}, more than the cap of {cap:,} bytes for a {kind}",
        input=url,
        hint="check that the URL names what faforge expects there (a wrong or hostile server?)",
    )


def _read_capped(
    response: http.client.HTTPResponse, url: str, kind: str, cap: int, watch: Watch, first: int | None = None
) -> bytes:
    """The body, at most `cap` bytes after decoding; refused early when Content-Length already says more.
    With `first`, only the first that many bytes (undecoded), and no more is read."""
    if first is not None:
        body = response.read(first)  # each recv under the socket timeout; the watch ends a drip
        if watch.fired:
            raise OSError("deadline")
        return body
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > cap and not response.headers.get("Content-Encoding"):
        raise _too_big(url, kind, cap, f"the server announces {int(length):,} bytes")
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
        raise RemoteError(
            f"{url}: answered in Content-Encoding {encoding[:40]!r}, which faforge does not decode",
            input=url,
            hint="faforge asks for no encoding; check the server",
        )
    decoder = None if encoding == "identity" else zlib.decompressobj(47 if "gzip" in encoding else zlib.MAX_WBITS)
    chunks, total = [], 0
    while True:
        raw = response.read(MIB)
        if not raw:
            break
        try:
            chunk = decoder.decompress(raw, cap + 1 - total) if decoder else raw
        except zlib.error as exc:
            raise RemoteError(
                f"{url}: its {encoding} body is corrupt ({exc})", input=url, hint="retry, or check the server"
            ) from None
        chunks.append(chunk)
        total += len(chunk)
        if total > cap or (decoder and decoder.unconsumed_tail):
            raise _too_big(url, kind, cap, "the body has more bytes" + (" once decompressed" if decoder else ""))
    if watch.fired:
        raise OSError("deadline")
    _check_whole(response, url, decoder)
    return b"".join(chunks)


def _check_whole(response: http.client.HTTPResponse, url: str, decoder: zlib._Decompress | None) -> None:
    """A RemoteError when the body stopped short: http.client returns what came before the connection closed
    when Content-Length promised more (its `length` is what is still missing), and a compressed stream
    that stops before its end has no end (a close-delimited body can only be judged so)."""
    missing = getattr(response, "length", None)
    if missing:
        length = response.headers.get("Content-Length", "?")
        raise RemoteError(
            f"{url}: its body ended {missing:,} bytes short of its Content-Length ({length}): the connection "
            "closed mid-body",
            input=url,
            hint=SHORT_HINT,
        )
    if decoder is not None and not decoder.eof:
        raise RemoteError(
            f"{url}: its body ended mid-stream (its compressed data stops before its end)", input=url, hint=SHORT_HINT
        )

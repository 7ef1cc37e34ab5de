"""The py-rattler-build upload call, run in a child process that `faforge publish` kills at its deadline.

py-rattler-build's upload functions hold the GIL while they wait on the network, so no thread, timer
or socket shutdown in the same process can stop one that a server never answers. The
parent (faforge.release.publish.targets.upload) waits for one line {"ready": true}, printed once rattler_build
is imported, and only then starts the deadline: a slow start on a busy machine is not a slow server.
It then sends the call as JSON on stdin, with the token in the environment variable rattler-build
reads for that kind, and reads one JSON line back: {"ok": true} or {"error": "..."}. The child prints
nothing else. "ok" is the server's 2xx status: rattler-build reads no body of an upload's answer.
"""

from __future__ import annotations

import json
import os
import sys

import rattler_build  # the slow part of a start, done before main() prints "ready"


def call(kind: str, url: str, channel: str, files: list[str], force: bool, token: str) -> None:
    """One upload of `files` to the server of `kind`, as py-rattler-build spells it."""
    if kind == "prefix":
        rattler_build.upload_package_to_prefix(files, url, channel, api_key=token, force=force)
    elif kind == "anaconda":
        owner, _, label = channel.partition("/")
        rattler_build.upload_package_to_anaconda(
            files, owner, channel=[label] if label else None, api_key=token, url=url, force=force
        )
    elif kind == "quetz":
        rattler_build.upload_package_to_quetz(files, url, channel, api_key=token)
    elif kind == "artifactory":
        rattler_build.upload_package_to_artifactory(files, url, f"{url}/{channel}", token=token)
    else:
        raise ValueError(f"no upload for target kind {kind!r}")


def main() -> int:
    print(json.dumps({"ready": True}), flush=True)
    spec = json.loads(sys.stdin.read())
    try:
        call(
            spec["kind"],
            spec["url"],
            spec["channel"],
            spec["files"],
            spec["force"],
            os.environ.get(spec["token_env"], ""),
        )
    except Exception as exc:  # py-rattler-build's UploadError/AuthError: the parent words and redacts it
        print(json.dumps({"error": str(exc)}), flush=True)
        return 0
    print(json.dumps({"ok": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

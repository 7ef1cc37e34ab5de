"""Run py-rattler's index_fs on one channel folder in this (child) process, then leave without
interpreter shutdown. Used only by faforge.channel.index, which checks what it wrote.

Why a child that ends in os._exit: py-rattler completes its futures through pyo3-async-runtimes,
whose tokio thread calls `loop.call_soon_threadsafe(...)`. That call releases the GIL while it
wakes the event loop, so `asyncio.run` can return and the interpreter start finalizing while the
tokio thread still has to retake the GIL and drop the bound method it called. It then dies in
`PyGILState_Release` (exit 134), in `method_dealloc` (exit 139) or with a Rust panic; a gdb
backtrace of the crashing thread shows `pyo3_async_runtimes::generic::set_result` ->
`call_soon_threadsafe` -> `method_dealloc`. The runtime is a process-wide static with no shutdown
hook (PyO3/pyo3-async-runtimes#40, open; the same race: meta-pytorch/monarch#750,
lancedb/lancedb#4175), so Python code cannot wait for it. A process that exits with os._exit never
finalizes, so the race cannot happen; the exit status is the index's own result.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path


def main(channel_dir: str) -> int:
    from rattler.index import index_fs  # noqa: PLC0415 (after SIGINT's default is back)

    try:
        asyncio.run(index_fs(Path(channel_dir), force=True))
    except Exception as exc:  # rattler's own error types; the parent reports the message
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group; the parent cleans up, this child just stops.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    status = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

"""Check a local channel folder against its repodata.json and re-index what differs.

Finds files present but not indexed, index entries without a file, and sha256 or size
mismatches, then rebuilds the index atomically (as `faforge publish` does after copying).
Files that cannot be indexed (corrupt, misnamed, in the wrong subdir) are named and left out:
exit 1; everything else is indexed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from faforge.channel.index import channel_errors, channel_lock, check_folder, heal
from faforge.channel.survey import BadFile
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError, why_not_a_folder


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("channel", type=Path, metavar="CHANNEL", help="a local channel folder (e.g. ./channel)")


def execute(args: argparse.Namespace) -> int:
    channel = args.channel
    if not channel.is_dir():
        check_folder(channel)
        raise FaforgeError(f"channel folder {channel} {why_not_a_folder(channel)}", hint="pass the folder `faforge publish --to` wrote")
    with channel_errors(channel), channel_lock(channel):
        found = heal(channel)
    drift = found.drift_words()
    print(f"{channel}: {len(found.indexable)} packages indexed; "
          + (f"re-indexed ({'; '.join(drift)})" if found.needs_index else "index was already right"))
    print_channel_problems(found.bad, channel)
    return EXIT_PROBLEMS if found.bad else EXIT_OK


def print_channel_problems(bad: list[BadFile], channel) -> None:
    """Each file left out of the index, by name, with the reason and what to do."""
    for b in bad:
        print(f"not indexed: {channel}/{b.path}: {b.reason}")
    if bad:
        print("  hint: remove or rebuild these files, then run `faforge index` again; everything else is indexed")

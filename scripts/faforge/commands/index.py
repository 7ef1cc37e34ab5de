"""Check a local channel folder against its repodata.json and re-index what differs.

Finds files present but not indexed, index entries without a file, and sha256 or size
mismatches, then rebuilds the index atomically (as `faforge publish` does after copying).
Files that cannot be indexed (corrupt, misnamed, in the wrong subdir) are named and left out:
exit 1; everything else is indexed.

With --pip the folder is a pip wheel index root (faforge publish --index): its pages are rewritten from
the wheels in its files/ where they differ, then each index is checked against our PEP 503/691 rules.
With --pip --check nothing is written: the root, one index folder of it, or an index URL
(BASE/torch2.11-cu130/, read through faforge's HTTP client) is read and checked.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from faforge import config
from faforge.channel.index import channel_errors, channel_lock, check_folder, heal
from faforge.channel.survey import BadFile
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError, why_not_a_folder
from faforge.pipindex.check import check_index, reindex
from faforge.pipindex.folder import BadFile as UnlistedFile

if TYPE_CHECKING:
    from faforge.release.publish.targets import Target


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "channel",
        metavar="CHANNEL",
        help="a local channel folder (e.g. ./channel); with --pip, a "
        f"wheel index folder (e.g. ./{config.DEFAULT_INDEX_DIR})",
    )
    parser.add_argument(
        "--pip",
        action="store_true",
        help="CHANNEL is a pip wheel index root: rewrite its pages from its wheels, then check them",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --pip: write nothing, only read and check CHANNEL (a root, one index folder, or an index URL)",
    )


def execute(args: argparse.Namespace) -> int:
    if args.pip:
        return execute_pip(args)
    if args.check:
        raise FaforgeError(
            "--check goes with --pip (a conda channel is checked and healed by `faforge index CHANNEL`)",
            input="--check",
            hint="add --pip for a wheel index, or leave --check out",
        )
    channel = Path(args.channel)
    if not channel.is_dir():
        check_folder(channel)
        raise FaforgeError(
            f"channel folder {channel} {why_not_a_folder(channel)}", hint="pass the folder `faforge publish --to` wrote"
        )
    with channel_errors(channel), channel_lock(channel):
        found = heal(channel)
    drift = found.drift_words()
    print(
        f"{channel}: {len(found.indexable)} packages indexed; "
        + (f"re-indexed ({'; '.join(drift)})" if found.needs_index else "index was already right")
    )
    print_channel_problems(found.bad, channel)
    return EXIT_PROBLEMS if found.bad else EXIT_OK


def print_channel_problems(bad: list[BadFile], channel: Path | Target) -> None:
    """Each file left out of the index, by name, with the reason and what to do."""
    for b in bad:
        print(f"not indexed: {channel}/{b.path}: {b.reason}")
    if bad:
        print("  hint: remove or rebuild these files, then run `faforge index` again; everything else is indexed")


def execute_pip(args: argparse.Namespace) -> int:
    where = args.channel
    report = check_index(where) if args.check else reindex(Path(where))
    for line in report.lines():
        print(line)
    print_index_problems(report.bad, where)
    for problem in report.problems:
        print(f"problem: {problem}")
    if report.problems:
        print(
            "  hint: rerun `faforge index --pip ROOT` on the root the "
            "pages came from; a problem that stays is a bug to report"
        )
    return EXIT_PROBLEMS if report.problems or report.bad else EXIT_OK


def print_index_problems(bad: list[UnlistedFile], root: str | Path) -> None:
    """Each file of a wheel index that no page lists, by name, with the reason and what to do."""
    for b in bad:
        print(f"not listed: {root}/{b.path}: {b.reason}")
    if bad:
        print("  hint: remove or rebuild these files, then run `faforge index --pip` again; everything else is listed")

"""Publish packages whose required gates all passed (per the verification manifest) to a channel.

Unverified or failed packages are refused with the reason. An existing file of the same name
is never replaced unless --force. The default target, ./channel, is a local channel folder
indexed with py-rattler; servers take KIND:URL (see --to) with a token from the environment.
A flash-attn whose kernel package (libflash-attn-kernels) is neither published with it nor in the
channel (the target folder, or --channel for a server) is refused.

Wheels (.whl files) go into a pip wheel index folder instead, --index (default ./wheels), under the
same gates (faforge.release.publish.wheels); conda packages and wheels are published in separate calls.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge import config, paths
from faforge.channel.repodata import channel_url
from faforge.channel.survey import BadFile
from faforge.commands.index import print_channel_problems, print_index_problems
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN
from faforge.pipindex.folder import BadFile as UnlistedFile
from faforge.pipindex.layout import FILES, WHEEL_SUFFIX, index_name
from faforge.release.manifest import Artifact, parse_gates, verify_hint
from faforge.release.publish.channel import Decision, publish_files
from faforge.release.publish.targets import TOKEN_ENV, parse_target
from faforge.release.publish.wheels import publish_wheel_files
from faforge.table import format_table

PUBLISH_VERSION = 1


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "packages",
        nargs="+",
        metavar="PACKAGE",
        help=f".conda files, or wheels (*{WHEEL_SUFFIX}, published into --index)",
    )
    servers = ", ".join(f"{kind}:https://HOST/CHANNEL (token in ${env})" for kind, env in TOKEN_ENV.items())
    parser.add_argument(
        "--to",
        metavar="TARGET",
        help=f"a channel folder or file:// URL (default: ./{config.DEFAULT_CHANNEL_DIR}), or {servers}",
    )
    parser.add_argument(
        "--index",
        metavar="DIR",
        type=Path,
        help=f"for wheels: the pip wheel index folder (default: ./{config.DEFAULT_INDEX_DIR}); each wheel goes "
        f"into {FILES}/ and is listed by the indexes its own data names, e.g. {index_name('2.11', '130')}/",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        default=config.DEFAULT_MANIFEST_DIR,
        help=f"verification manifest folder (default: ./{config.DEFAULT_MANIFEST_DIR})",
    )
    parser.add_argument(
        "--require",
        metavar="GATES",
        help="comma-separated gates that must have passed (default: "
        f"{','.join(config.DEFAULT_REQUIRED_GATES)}, or $FAFORGE_REQUIRE)",
    )
    parser.add_argument(
        "--channel",
        metavar="URL_OR_PATH",
        help="where users install from, read to find kernel packages published before (default: the target "
        f"folder; a server target has none, so its {FLASH_ATTN.package} "
        "packages need their kernel package in the same publish)",
    )
    parser.add_argument("--dry-run", action="store_true", help="decide and report, change nothing")
    parser.add_argument("--force", action="store_true", help="replace a different file of the same name in the target")
    parser.add_argument(
        "--json", action="store_true", help="print the versioned result (schema: tests/schemas/publish.json)"
    )


def execute(args: argparse.Namespace) -> int:
    if any(p.endswith(WHEEL_SUFFIX) for p in args.packages):
        return execute_wheels(args)
    if args.index is not None:
        raise FaforgeError(
            f"--index is the wheel index that wheels (*{WHEEL_SUFFIX}) are published into; these are conda packages",
            input="--index",
            hint="leave --index out (conda packages go --to a channel)",
        )
    text, source = config.required_gates_setting(args.require)
    required = parse_gates(text, source=source, purpose="any package could be published unverified")
    target = parse_target(args.to if args.to is not None else str(config.DEFAULT_CHANNEL_DIR))
    if target.kind == "folder" and not args.dry_run:  # checked, not created, before any package is judged
        paths.output_dir(Path(target.url), "--to", create=False)
    paths.nearest_folder(args.manifest, "--manifest")
    if args.channel is not None:  # read only when a package needs its kernel package, but a wrong one is wrong now
        channel_url(args.channel, "--channel", if_empty="name the channel users install from, or leave --channel out")
    decisions, result = publish_files(
        args.packages,
        target,
        manifest_dir=args.manifest,
        required=required,
        channel=args.channel,
        dry_run=args.dry_run,
        force=args.force,
    )
    rows = [Row(o.package, o.action, o.detail, o.package.cell_id) for o in result.outcomes]
    return report(
        args,
        rows,
        decisions,
        required,
        target=str(target),
        where=f"target: {target}",
        problems=result.channel_problems,
        problems_key="channel_problems",
        print_problems=lambda: print_channel_problems(result.channel_problems, target),
    )


@dataclass(frozen=True)
class Row:
    """One outcome, conda package or wheel, as the report prints it."""

    package: Artifact  # PackageFacts or WheelFacts
    action: str
    detail: str
    cell: str | None
    indexes: tuple[str, ...] | None = None  # wheels only


def report(
    args: argparse.Namespace,
    rows: list[Row],
    decisions: Sequence[Decision[Artifact]],
    required: tuple[str, ...],
    *,
    target: str,
    where: str,
    problems: Sequence[BadFile | UnlistedFile],
    problems_key: str,
    print_problems: Callable[[], None],
) -> int:
    """The one report of both branches: --json (tests/schemas/publish.json) or a table, then the exit status."""
    by_file = {d.package.path: d for d in decisions}
    wheels = any(r.indexes is not None for r in rows)
    if args.json:
        print(
            json.dumps(
                {
                    "version": PUBLISH_VERSION,
                    "target": target,
                    "required": list(required),
                    "dry_run": args.dry_run,
                    "packages": [
                        {
                            "package": r.package.filename,
                            "sha256": r.package.sha256,
                            "cell": r.cell,
                            "action": r.action,
                            "detail": r.detail,
                            "gates": {g: res.result for g, res in by_file[r.package.path].results.items()},
                            **({"indexes": list(r.indexes)} if r.indexes is not None else {}),
                        }
                        for r in rows
                    ],
                    problems_key: [{"file": b.path, "reason": b.reason} for b in problems],
                },
                indent=2,
            )
        )
    else:
        table = [
            [
                r.package.filename,
                r.package.sha256[:12],
                by_file[r.package.path].gate_words(),
                r.action,
                *([", ".join(r.indexes or ()) or "-"] if wheels else []),
                _short(r.detail),
            ]
            for r in rows
        ]
        print(
            format_table(
                [
                    "wheel" if wheels else "package",
                    "sha256",
                    "gates",
                    "action",
                    *(["indexes"] if wheels else []),
                    "detail",
                ],
                table,
            )
        )
        for r in rows:
            if r.action == "refused" and _short(r.detail) != r.detail:
                print(f"\nrefused {r.package.filename}: {r.detail}")
        for d in decisions:
            if d.unverified:
                print(f"  hint: {d.package.filename}: {verify_hint(d.package, args.manifest)}")
        print(f"\nrequired gates: {', '.join(required)}; {where}")
        print_problems()
    bad = [r for r in rows if r.action in ("refused", "exists")]
    return EXIT_PROBLEMS if bad or problems else EXIT_OK


def execute_wheels(args: argparse.Namespace) -> int:
    """Wheels into the pip wheel index folder (--index): the same gates, the same report."""
    others = [p for p in args.packages if not p.endswith(WHEEL_SUFFIX)]
    if others:
        raise FaforgeError(
            f"{others[0]}: wheels (*{WHEEL_SUFFIX}) and conda packages are published in separate calls",
            input=others[0],
            hint="publish the .conda files --to the channel and the wheels --index the wheel index",
        )
    for option, value in (("--to", args.to), ("--channel", args.channel)):
        if value is not None:
            raise FaforgeError(
                f"{option} names a conda channel; wheels are published into a wheel index folder",
                input=option,
                hint=f"pass --index DIR for wheels (default: ./{config.DEFAULT_INDEX_DIR})",
            )
    text, source = config.required_gates_setting(args.require)
    required = parse_gates(text, source=source, purpose="any wheel could be published unverified")
    root = args.index if args.index is not None else config.DEFAULT_INDEX_DIR
    if not args.dry_run:  # checked, not created, before any wheel is judged
        paths.output_dir(root, "--index", create=False)
    paths.nearest_folder(args.manifest, "--manifest")
    decisions, result = publish_wheel_files(
        args.packages, root, manifest_dir=args.manifest, required=required, dry_run=args.dry_run, force=args.force
    )
    rows = [Row(o.wheel, o.action, o.detail, None, o.indexes) for o in result.outcomes]
    return report(
        args,
        rows,
        decisions,
        required,
        target=str(root),
        where=f"wheel index: {root}",
        problems=result.problems,
        problems_key="index_problems",
        print_problems=lambda: print_index_problems(result.problems, root),
    )


def _short(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

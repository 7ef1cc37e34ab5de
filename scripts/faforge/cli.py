"""The `faforge` console script: dispatches to faforge.commands.<name>."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from typing import NoReturn

from faforge import __version__, config
from faforge.commands import COMMANDS
from faforge.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_REMOTE,
    EXIT_SKIPPED,
    FaforgeError,
    path_error,
)
from faforge.family import FLASH_ATTN
from faforge.interrupts import deliver_swallowed_interrupts
from faforge.streams import reader_left, reserve_standard_fds, settle_for_exit, tolerant_streams

# Import name -> pip requirement, for modules whose distribution is named otherwise.
_DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "elftools": "pyelftools",
    "rattler": "py-rattler",
    "rattler_build": "py-rattler-build",
}


def missing_module_error(exc: ModuleNotFoundError) -> FaforgeError:
    """A dependency that is not installed is the user's to fix (exit 2), with the command that fixes it."""
    top = (exc.name or "?").split(".")[0]
    return FaforgeError(
        f"the Python module {top!r} is not importable ({exc})",
        hint=f"{sys.executable} -m pip install {_DISTRIBUTIONS.get(top, top)}  "
        "(or reinstall faforge with its dependencies)",
    )


class UsageError(FaforgeError):
    """argparse rejected the command line; carries the usage of the (sub)parser that rejected it."""

    def __init__(self, message: str, parser: argparse.ArgumentParser):
        super().__init__(message, hint=f"see `{parser.prog} --help`")
        self.usage = parser.format_usage().strip()
        self.prog = parser.prog


class _Parser(argparse.ArgumentParser):
    # argparse exits 2 on usage errors; keep that, through the one error path
    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self)


def _options(argv: list[str]) -> list[str]:
    """The arguments before `--` (after it they belong to another program, e.g. pytest for test-gpu)."""
    return argv[: argv.index("--")] if "--" in argv else argv


def _chosen_command(argv: list[str]) -> str | None:
    """The subcommand named on the command line, if any, so only its module gets imported."""
    first = next((a for a in _options(argv) if not a.startswith("-")), None)
    return first if first in COMMANDS else None


# py-rattler and py-rattler-build run threads of their own (faforge.cli.console_main ends the process after them).
RATTLER_MODULES = frozenset({"rattler", "rattler_build"})
VERBOSE_HELP = "show the cause chain of errors (e.g. py-rattler's) and tracebacks of OS errors"

# The exit codes of faforge.errors in --help's words; the CLI reference page renders them as its table.
EXIT_STATUS = {
    EXIT_OK: "ok",
    EXIT_PROBLEMS: "problems found",
    EXIT_BAD_INPUT: "bad input",
    EXIT_SKIPPED: "nothing verified",
    EXIT_REMOTE: "network or remote service",
    EXIT_INTERRUPTED: "interrupted",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; only the chosen command's module is imported (rattler, torch, ... are slow)."""
    chosen = _chosen_command(sys.argv[1:] if argv is None else argv)
    parser = _Parser(
        prog="faforge",
        description=f"{FLASH_ATTN.package} builds that match your PyTorch",
        epilog=f"exit status: {', '.join(f'{code} {what}' for code, what in EXIT_STATUS.items())} "
        "(docs/reference/exit-codes.md)",
    )
    parser.add_argument("--version", action="version", version=f"faforge {__version__}")
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        if chosen is not None and name != chosen:
            sub.add_parser(name)
            continue
        module = importlib.import_module(f"faforge.commands.{name.replace('-', '_')}")
        doc = (module.__doc__ or "").strip().splitlines()
        command = sub.add_parser(name, help=doc[0] if doc else None, description=module.__doc__)
        module.configure_parser(command)
        # Also after the command name; SUPPRESS keeps `faforge --verbose CMD` from being reset by the subparser.
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        command.set_defaults(_execute=module.execute, _parser=command)
    return parser


def console_main() -> int:
    """The `faforge` console script. It owns its process, so it takes over the interrupt handling;
    main() does not, since tests and `faforge.bench.build_cost` call it inside their own processes."""
    deliver_swallowed_interrupts()
    reserve_standard_fds()
    try:
        code = main()
    finally:
        settle_for_exit()
    if RATTLER_MODULES & sys.modules.keys():
        # py-rattler's runtime threads can still hold Python objects (a finished index or solve) or still be in a
        # request a deadline abandoned; CPython's finalization under them aborts (PyGILState_Release: SIGABRT or
        # SIGSEGV, about 1 exit in 30 after a deadline), turning the command's exit status into a crash. The
        # streams are flushed and the command's folders cleaned up by now, so the process ends here, as it is.
        os._exit(code)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    name = _chosen_command(argv)
    with tolerant_streams() as stdout:
        try:
            code = _run(argv, name)
        except KeyboardInterrupt:
            # Also a Ctrl-C that lands after the command, in the clean-up below (seen in the fault-injection test).
            code = _fail(FaforgeError("interrupted", exit_code=EXIT_INTERRUPTED), name, argv)
        stdout.flush()
        if stdout.failure is None or reader_left(stdout.failure):
            return code
        # The result is lost (a full disk, a closed stdout): exit 2, unless the work found another failure.
        error = FaforgeError(
            f"could not write the result to stdout: {stdout.failure.strerror}",
            input="stdout",
            hint="free space on its device, or send stdout to a file or a program that reads it",
        )
        if code in (EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED):  # the other codes come with their error line already
            _fail(error, name, argv)
        return code or error.exit_code


def _run(argv: list[str], name: str | None) -> int:
    try:
        # Inside the try: Ctrl-C while the chosen command's module imports (rattler, torch) is still an interrupt.
        parser = build_parser(argv)
        args, extra = parser.parse_known_args(argv)
        if extra:  # rejected by the subcommand's parser, so the usage printed is the subcommand's
            getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
        return args._execute(args)
    except (FaforgeError, ModuleNotFoundError, OSError) as exc:
        # A missing module can surface while the chosen command's module imports, before `args` exists.
        return _fail(as_faforge_error(exc), name, argv)


def as_faforge_error(exc: FaforgeError | ModuleNotFoundError | OSError) -> FaforgeError:
    """The one place where errors become the contract: a missing module or an OSError on a path the user
    named is bad input (2), a network error is remote (4); a FaforgeError already says which."""
    if isinstance(exc, FaforgeError):
        return exc
    if isinstance(exc, ModuleNotFoundError):
        return missing_module_error(exc)
    setting = config.setting_of(getattr(exc, "filename", None))  # a path under $FAFORGE_CACHE_DIR, $FAFORGE_ROOT, ...
    error = path_error(exc, f"${setting}" if setting else None)
    error.detail = "".join(traceback.format_exception(exc)).rstrip()
    return error


def _fail(error: FaforgeError, name: str | None, argv: list[str]) -> int:
    """One line on stderr (the usage line first for usage errors); with --json also the error object on stdout."""
    options = _options(argv)
    prefix = error.prog if isinstance(error, UsageError) else f"faforge {name}" if name else "faforge"
    if isinstance(error, UsageError):
        print(error.usage, file=sys.stderr)
    if error.exit_code == EXIT_INTERRUPTED:
        print(f"{prefix}: interrupted", file=sys.stderr)
    else:
        verbose = "--verbose" in options
        more = " (--verbose shows the cause)" if error.detail and not verbose else ""
        print(f"{prefix}: error: {error.line()}{more}", file=sys.stderr)
        if verbose and error.detail:
            print(error.detail, file=sys.stderr)
    if "--json" in options:
        print(json.dumps(error.to_json()), flush=True)
    return error.exit_code

"""The `faforge` console script: dispatches to faforge.commands.<name>."""

from __future__ import annotations

import argparse
import gc
import importlib
import sys

from faforge import __version__
from faforge.commands import COMMANDS
from faforge.errors import EXIT_BAD_INPUT, FaforgeError

# Import name -> pip requirement, for modules whose distribution is named otherwise.
_DISTRIBUTIONS = {"yaml": "pyyaml", "elftools": "pyelftools", "rattler": "py-rattler", "rattler_build": "py-rattler-build"}


def missing_module_error(exc: ModuleNotFoundError) -> FaforgeError:
    """A dependency that is not installed is the user's to fix (exit 2), with the command that fixes it."""
    top = (exc.name or "?").split(".")[0]
    return FaforgeError(
        f"the Python module {top!r} is not importable ({exc})",
        hint=f"{sys.executable} -m pip install {_DISTRIBUTIONS.get(top, top)}  (or reinstall faforge with its dependencies)",
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 on usage errors; keep that, without a traceback
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _chosen_command(argv: list[str]) -> str | None:
    """The subcommand named on the command line, if any, so only its module gets imported."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; only the chosen command's module is imported (rattler, torch, ... are slow)."""
    chosen = _chosen_command(sys.argv[1:] if argv is None else argv)
    parser = _Parser(prog="faforge", description="flash-attn builds that match your PyTorch")
    parser.add_argument("--version", action="version", version=f"faforge {__version__}")
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
        command.set_defaults(_execute=module.execute)
    return parser


def main(argv: list[str] | None = None) -> int:
    name = _chosen_command(sys.argv[1:] if argv is None else argv)
    try:
        return _run(argv, name)
    except KeyboardInterrupt:
        # Also a Ctrl-C that lands after the command, in the clean-up below (seen in the fault-injection test).
        print(f"faforge {name}: interrupted" if name else "faforge: interrupted", file=sys.stderr)
        return 130


def _run(argv: list[str] | None, name: str | None) -> int:
    try:
        # Inside the try: Ctrl-C while the chosen command's module imports (rattler, torch) is still an interrupt.
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        return args._execute(args)
    except (FaforgeError, ModuleNotFoundError) as exc:
        # A missing module can surface while the chosen command's module imports, before `args` exists.
        error = missing_module_error(exc) if isinstance(exc, ModuleNotFoundError) else exc
        print(f"faforge {name}: error: {error}" if name else f"faforge: error: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:
        return 0
    finally:
        # py-rattler's runtime threads can still hold Python objects (a finished index or solve);
        # left to interpreter shutdown they abort it in PyGILState_Release, so collect them now.
        gc.collect()

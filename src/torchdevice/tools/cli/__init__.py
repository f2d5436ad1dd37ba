"""The ``torchdevice`` command and ``python -m torchdevice``.

::

    python -m torchdevice [OPTIONS] SCRIPT [ARGS...]   # run a script redirected
    python -m torchdevice [OPTIONS] -m MODULE [ARGS...]
    torchdevice run [OPTIONS] SCRIPT [ARGS...]          # the same
    torchdevice info                                    # host, policy table, versions
    torchdevice compare [--output DIR] [PYTEST ARGS...] # tests native vs redirected
    torchdevice port [-o PATCH] (--report REPORT.json... | SCRIPT [ARGS...])  # a patch
    torchdevice combine [-o OUT] REPORT.json...          # merge reports of separate runs
    torchdevice report [-f FORMAT] [-o OUT] REPORT.json... # text, markdown or html
    torchdevice --version

``run`` is the default: a first argument that is no subcommand is the script. Each
subcommand has its own ``--help``.

This module holds the dispatch by first word and the parser that documents the command as
a whole; each subcommand's parser and what it does with its arguments is a module of its
own (:mod:`~torchdevice.tools.cli.run`, :mod:`~torchdevice.tools.cli.info`,
:mod:`~torchdevice.tools.cli.port`, :mod:`~torchdevice.tools.cli.combine`,
:mod:`~torchdevice.tools.cli.formats` (``report``); ``compare`` is
:mod:`torchdevice.tools.compare`), and the work itself lives in the launcher, ``compare``,
``port`` and ``reporting``. The subcommands' modules import nothing heavy at the top, so
that ``torchdevice info`` stays light.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence

from torchdevice import __version__
from torchdevice.environment import activation_requested
from torchdevice.errors import SettingsError
from torchdevice.tools.cli import combine, formats, info, port, run
from torchdevice.tools.cli.summaries import COMMANDS

__all__ = ["main"]


def _top_parser(prog: str) -> argparse.ArgumentParser:
    """The parser that documents the command as a whole (dispatch is by first word)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run PyTorch code written for one accelerator on the one this host has.",
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        commands.add_parser(name, help=summary)
    return parser


def _version() -> str:
    return f"torchdevice {__version__} (Python {platform.python_version()})"


def main(argv: Sequence[str] | None = None, prog: str = "torchdevice") -> int:
    """Entry point of the ``torchdevice`` console script and ``python -m torchdevice``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"], ["--version"]) or not args:
        if not args:  # as argparse does for a missing required argument
            _top_parser(prog).print_usage(sys.stderr)
            print(f"{prog}: error: a SCRIPT, -m MODULE or subcommand is required", file=sys.stderr)
            return 2
        _top_parser(prog).parse_args(args)  # prints help or the version, and exits 0
    try:  # a bad ACTIVATE_TORCH_DEVICE is a usage error: one line, status 2
        activation_requested()
    except SettingsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    command, rest = (args[0], args[1:]) if args[0] in COMMANDS else ("run", args)
    if command == "info":
        return info.main(rest, f"{prog} info")
    if command == "port":
        return port.main(rest, f"{prog} port")
    if command == "combine":
        return combine.main(rest, f"{prog} combine")
    if command == "report":
        return formats.main(rest, f"{prog} report")
    if command == "compare":
        from torchdevice.tools import compare  # noqa: PLC0415 - only this subcommand needs it

        return compare.main(rest, f"{prog} compare")
    return run.main(rest, f"{prog} run" if args[0] == "run" else prog)

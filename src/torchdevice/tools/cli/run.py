"""``torchdevice run`` (and ``torchdevice SCRIPT``, ``python -m torchdevice SCRIPT``): run a
script or module redirected, then report.

Its options end at the script (or ``-m MODULE``): the rest belongs to the script. A bad
option, variable, report path or script is a one-line usage error (status 2) before the
script starts; the run itself is :mod:`torchdevice.tools.launcher`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchdevice.errors import SettingsError
from torchdevice.settings import Settings, choices, load_settings
from torchdevice.tools.options import split_leading
from torchdevice.tools.outputs import unwritable

__all__ = ["main", "parser"]

#: The settings ``torchdevice run`` has a flag for (declared with the setting).
_FLAGGED = tuple(f for f in dataclasses.fields(Settings) if f.metadata["flag"])
#: Those of them that take a value (the others are switches).
_VALUED_FLAGS = frozenset(f.metadata["flag"] for f in _FLAGGED if choices(f.name) is not None)


def parser(prog: str) -> argparse.ArgumentParser:
    """``torchdevice run``'s parser: the report options, then one flag per flagged setting."""
    result = argparse.ArgumentParser(
        prog=prog,
        description="Run a PyTorch script with every device request redirected to the device "
        "this host really has, then print the migration report.",
    )
    result.add_argument(
        "--report",
        type=Path,
        metavar="PATH",
        help="write the migration report to PATH (JSON if it ends in .json, Markdown if "
        ".md, an HTML page if .html, else text) instead of printing it to stderr",
    )
    result.add_argument("--no-report", action="store_true", help="print no report at exit")
    for field in _FLAGGED:  # the settings' own flags, from their declaration
        values = choices(field.name)
        kind: dict[str, Any] = (
            {"choices": values} if values is not None else {"action": "store_true"}
        )
        if values is not None and not isinstance(values, tuple):
            # Known at run time (the host choices): read when asked, not when added.
            kind["metavar"] = field.name.upper()
        result.add_argument(
            field.metadata["flag"], dest=field.name, help=field.metadata["flag_help"], **kind
        )
    result.add_argument(
        "-m",
        dest="module",
        metavar="MODULE",
        help="run a library module as a script, like python -m",
    )
    result.add_argument("script", nargs="?", help="the script to run")
    result.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return result


def main(argv: Sequence[str], prog: str) -> int:
    """Check everything that can be checked before the script starts, then run it."""
    from torchdevice.tools import launcher  # noqa: PLC0415 - keeps `torchdevice info` light

    ours = parser(prog)
    ns, rest = _split(ours, list(argv))
    options: dict[str, Any] = {f.name: getattr(ns, f.name) for f in _FLAGGED if getattr(ns, f.name)}
    try:  # a bad option or variable is a usage error: one line, status 2, no traceback
        loaded = load_settings(options)
    except SettingsError as exc:
        ours.exit(2, f"{prog}: error: {exc}\n")
    report_path = ns.report if ns.report is not None else loaded.report_path
    if report_path is not None and not ns.no_report:
        problem = unwritable(report_path)
        if problem:  # found now, not after a long run that then loses its report
            ours.exit(2, f"{prog}: error: cannot write the report to {report_path}: {problem}\n")
    if ns.module:
        try:
            launcher.run_module(
                ns.module, rest, options=options, report_path=report_path, quiet=ns.no_report
            )
        except launcher.LaunchError as exc:  # as `python -m nosuchmod`, but status 2
            ours.exit(2, f"{prog}: error: {exc}\n")
    elif ns.script:
        if not Path(ns.script).exists():  # as `python missing.py`: a message, status 2
            ours.exit(
                2,
                f"{prog}: can't open file {os.path.abspath(ns.script)!r}: "
                "[Errno 2] No such file or directory\n",
            )
        launcher.run_script(
            ns.script, rest, options=options, report_path=report_path, quiet=ns.no_report
        )
    else:
        ours.error("a SCRIPT or -m MODULE is required")
    return 0


def _split(ours: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parse our options up to the script (or ``-m MODULE``); the rest belongs to it."""
    leading, rest = split_leading(
        argv,
        takes_value={"--report", "-m", *_VALUED_FLAGS},
        is_flag=lambda arg: arg.startswith("-") and arg != "-",
        last={"-m"},
    )
    ns = ours.parse_args(leading)
    if ns.module is None:
        if not rest:
            ours.error("a SCRIPT or -m MODULE is required")
        ns.script, rest = rest[0], rest[1:]
    return ns, rest

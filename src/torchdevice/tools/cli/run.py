"""``torchdevice run`` (and ``torchdevice SCRIPT``, ``python -m torchdevice SCRIPT``): run a
script or module redirected, then report.

Its options end at the script (or ``-m MODULE``): the rest belongs to the script. A bad
option, variable, report path or script is a one-line usage error (status 2) before the
script starts, and before torch is imported (a usage error answers at once, not after
the seconds torch's import takes); the run itself is :mod:`torchdevice.tools.launcher`'s.

``--max-redirected-lines [N]`` is the CI gate (:mod:`torchdevice.tools.gate`): the run
ends with status 3 when the script redirected more than ``N`` of the user's lines.
``--native`` runs the script without torchdevice, as ``python SCRIPT`` would, beside the
accelerator ``--host`` names: ``--native`` with the simulated MPS host's choice answers
"will the ported code run on a Mac?" on Linux (docs/port.md).
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
from torchdevice.tools import gate
from torchdevice.tools.gate import FLAG as GATE_FLAG
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
    result.add_argument(
        GATE_FLAG,
        dest="max_lines",
        type=int,
        nargs="?",
        const=0,
        metavar="N",
        help="the CI gate: exit with status 3, listing them, when the run redirected more "
        "than N lines of your code (N is 0 when the option is given alone)",
    )
    result.add_argument(
        "--native",
        action="store_true",
        help="run the script natively, torchdevice off, as `python SCRIPT` would; with "
        "--host naming an extra backend (the simulated MPS device), beside it (will "
        "ported code run on a Mac?)",
    )
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
    """Check everything that can be checked before the script starts, then run it.

    The launcher (which imports torch) is imported only once the command line, the
    settings, the report path and the script have passed their checks.
    """
    ours = parser(prog)
    ns, rest = _split(ours, list(argv))
    options: dict[str, Any] = {f.name: getattr(ns, f.name) for f in _FLAGGED if getattr(ns, f.name)}
    if ns.max_lines is not None and ns.max_lines < 0:
        ours.error(f"argument {GATE_FLAG}: expected a number of lines, 0 or more")
    if ns.native:
        _check_native(ours, ns, options)
    if ns.script and not Path(ns.script).exists():  # as `python missing.py`: status 2
        ours.exit(
            2,
            f"{prog}: can't open file {os.path.abspath(ns.script)!r}: "
            "[Errno 2] No such file or directory\n",
        )
    try:  # a bad option or variable is a usage error: one line, status 2, no traceback
        loaded = load_settings(options)
    except SettingsError as exc:
        ours.exit(2, f"{prog}: error: {exc}\n")
    report_path = ns.report if ns.report is not None else loaded.report_path
    if report_path is not None and not ns.no_report and not ns.native:
        problem = unwritable(report_path)
        if problem:  # found now, not after a long run that then loses its report
            ours.exit(2, f"{prog}: error: cannot write the report to {report_path}: {problem}\n")
    if ns.max_lines is not None:  # registered before torch's import: it runs last at exit
        gate.fail_at_exit(ns.max_lines, _gate_report, _script_status)
    from torchdevice.tools import launcher  # noqa: PLC0415 - torch: only once the checks passed

    how: dict[str, Any] = {
        "options": options,
        "report_path": report_path,
        "quiet": ns.no_report,
        "native": ns.native,
        "beside": _beside(loaded.host) if ns.native else None,
    }
    if ns.module:
        try:
            launcher.run_module(ns.module, rest, **how)
        except launcher.LaunchError as exc:  # as `python -m nosuchmod`, but status 2
            ours.exit(2, f"{prog}: error: {exc}\n")
    else:
        launcher.run_script(ns.script, rest, **how)
    return 0


def _gate_report() -> Any:
    """The launcher's report for the gate (the launcher is imported by then)."""
    from torchdevice.tools import launcher  # noqa: PLC0415 - imported by main already

    return launcher.gate_report()


def _script_status() -> int | None:
    from torchdevice.tools import launcher  # noqa: PLC0415 - imported by main already

    return launcher.script_status()


def _beside(choice: object) -> str | None:
    """What a native run runs beside: the accelerator a forced host started (the
    simulated MPS device's device type and what it stands for), or nothing."""
    from torchdevice.host import forced_host  # noqa: PLC0415 - started already by the settings

    if not isinstance(choice, str) or choice in ("cpu", "cuda", "mps"):
        return None
    host = forced_host(choice)
    return f"{choice} (device type {host.device_type!r}, as torch.accelerator reports it)"


def _check_native(
    ours: argparse.ArgumentParser, ns: argparse.Namespace, options: dict[str, Any]
) -> None:
    """``--native`` runs without torchdevice: the options that shape a redirected run, or
    its report, are usage errors with it (``--host`` only chooses the device beside it)."""
    shaping = [f.metadata["flag"] for f in _FLAGGED if f.name in options and f.name != "host"]
    if ns.report is not None or ns.no_report or ns.max_lines is not None:
        shaping.append("--report" if ns.report is not None else "")
        shaping.append("--no-report" if ns.no_report else "")
        shaping.append(GATE_FLAG if ns.max_lines is not None else "")
    given = [flag for flag in shaping if flag]
    if given:
        ours.error(
            f"--native runs the script without torchdevice, so {', '.join(given)} cannot "
            "apply (a native run redirects nothing and has no migration report)"
        )


def _split(ours: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parse our options up to the script (or ``-m MODULE``); the rest belongs to it."""
    leading, rest = split_leading(
        argv,
        takes_value={"--report", "-m", *_VALUED_FLAGS},
        is_flag=lambda arg: arg.startswith("-") and arg != "-",
        last={"-m"},
        takes_number={GATE_FLAG},
    )
    ns = ours.parse_args(leading)
    if ns.module is None:
        if not rest:
            ours.error("a SCRIPT or -m MODULE is required")
        ns.script, rest = rest[0], rest[1:]
    return ns, rest

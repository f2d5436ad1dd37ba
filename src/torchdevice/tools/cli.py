"""The ``torchdevice`` command and ``python -m torchdevice``.

::

    python -m torchdevice [OPTIONS] SCRIPT [ARGS...]   # run a script redirected
    python -m torchdevice [OPTIONS] -m MODULE [ARGS...]
    torchdevice run [OPTIONS] SCRIPT [ARGS...]          # the same
    torchdevice info                                    # host, policy table, versions
    torchdevice compare [--output DIR] [PYTEST ARGS...] # tests native vs redirected
    torchdevice --version

``run`` is the default: a first argument that is no subcommand is the script. Each
subcommand has its own ``--help``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchdevice import __version__
from torchdevice.environment import activation_requested
from torchdevice.errors import SettingsError
from torchdevice.host import Host, probe_host
from torchdevice.policy import decide
from torchdevice.tools.options import split_leading

__all__ = ["main"]

_REQUESTS: tuple[object, ...] = (None, "cpu", "cpu:-1", "mps", "cuda", "cuda:1", 0)


def _run_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a PyTorch script with every device request redirected to the device "
        "this host really has, then print the migration report.",
    )
    parser.add_argument("--report", type=Path, metavar="PATH",
                        help="write the migration report to PATH (JSON if it ends in .json) "
                        "instead of printing it to stderr")  # fmt: skip
    parser.add_argument("--no-report", action="store_true", help="print no report at exit")
    parser.add_argument("--keep-cpu", action="store_true",
                        help="explicit 'cpu' requests stay on the CPU")  # fmt: skip
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="level of the 'torchdevice' logger (default: left to the "
                        "application's logging configuration)")  # fmt: skip
    parser.add_argument("--host", choices=["cpu", "mps", "cuda"],
                        help="force the host kind instead of probing: cpu, or a device "
                        "this machine has")  # fmt: skip
    parser.add_argument("-m", dest="module", metavar="MODULE",
                        help="run a library module as a script, like python -m")  # fmt: skip
    parser.add_argument("script", nargs="?", help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def _run(argv: Sequence[str], prog: str) -> int:
    from torchdevice.settings import load_settings  # noqa: PLC0415 - pydantic on demand
    from torchdevice.tools import launcher  # noqa: PLC0415 - keeps `torchdevice info` light

    parser = _run_parser(prog)
    ns, rest = _split(parser, list(argv))
    options: dict[str, Any] = {}
    if ns.keep_cpu:
        options["keep_cpu"] = True
    if ns.log_level:
        options["log_level"] = ns.log_level
    if ns.host:
        options["host"] = ns.host
    try:  # a bad option or variable is a usage error: one line, status 2, no traceback
        settings = load_settings(options)
    except SettingsError as exc:
        parser.exit(2, f"{prog}: error: {exc}\n")
    report_path = ns.report if ns.report is not None else settings.report_path
    if report_path is not None and not ns.no_report:
        problem = _unwritable(report_path)
        if problem:  # found now, not after a long run that then loses its report
            parser.exit(2, f"{prog}: error: cannot write the report to {report_path}: "
                        f"{problem}\n")  # fmt: skip
    if ns.module:
        launcher.run_module(ns.module, rest, options=options, report_path=report_path,
                            quiet=ns.no_report)  # fmt: skip
    elif ns.script:
        if not Path(ns.script).exists():  # as `python missing.py`: a message, status 2
            parser.exit(2, f"{prog}: can't open file {os.path.abspath(ns.script)!r}: "
                        "[Errno 2] No such file or directory\n")  # fmt: skip
        launcher.run_script(ns.script, rest, options=options, report_path=report_path,
                            quiet=ns.no_report)  # fmt: skip
    else:
        parser.error("a SCRIPT or -m MODULE is required")
    return 0


def _unwritable(path: Path) -> str | None:
    """Why the report cannot be written to ``path`` (``None``: it can), without writing."""
    if path.is_dir():
        return "it is a directory"
    if path.exists():
        return None if os.access(path, os.W_OK) else "permission denied"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"no directory {str(parent)!r}"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{str(parent)!r} is not writable"


def _split(
    parser: argparse.ArgumentParser, argv: list[str]
) -> tuple[argparse.Namespace, list[str]]:
    """Parse our options up to the script (or ``-m MODULE``); the rest belongs to it."""
    ours, rest = split_leading(
        argv,
        takes_value={"--report", "--log-level", "--host", "-m"},
        is_flag=lambda arg: arg.startswith("-") and arg != "-",
        last={"-m"},
    )
    ns = parser.parse_args(ours)
    if ns.module is None:
        if not rest:
            parser.error("a SCRIPT or -m MODULE is required")
        ns.script, rest = rest[0], rest[1:]
    return ns, rest


def info(host: Host | None = None) -> str:
    """The host, the policy as it applies here, and versions."""
    import torch  # noqa: PLC0415

    host = host or probe_host()
    lines = [
        f"torchdevice {__version__}  torch {torch.__version__}  "
        f"Python {platform.python_version()}  {platform.system()} {platform.machine()}",
        f"host: {host.kind} ({host.device_count} device(s): {', '.join(host.device_names)})",
        "",
        "policy on this host:",
        f"  {'request':<10} {'device':<8} {'action':<10} reason",
    ]
    for request in _REQUESTS:
        label = "none" if request is None else repr(request)
        try:
            decision = decide(request, host)
            lines.append(
                f"  {label:<10} {decision.device!s:<8} {decision.action:<10} {decision.reason}"
            )
        except (RuntimeError, TypeError) as exc:
            lines.append(f"  {label:<10} {'error':<8} {'':<10} {exc}")
    return "\n".join(lines)


#: The subcommands and their one-line help, for ``torchdevice --help``.
_COMMANDS = {
    "run": "run a script (or -m MODULE) redirected, then print the migration report "
    "(the default: `torchdevice SCRIPT` is `torchdevice run SCRIPT`)",
    "info": "show the host, the policy as it applies here, and versions",
    "compare": "run a test suite natively and redirected and report the difference",
}


def _top_parser(prog: str) -> argparse.ArgumentParser:
    """The parser that documents the command as a whole (dispatch is by first word)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run PyTorch code written for one accelerator on the one this host has.",
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    for name, summary in _COMMANDS.items():
        commands.add_parser(name, help=summary)
    return parser


def _version() -> str:
    return f"torchdevice {__version__} (Python {platform.python_version()})"


def _info(argv: Sequence[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=_COMMANDS["info"].capitalize() + ".")
    parser.parse_args(list(argv))
    print(info())
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "torchdevice") -> int:
    """Entry point of the ``torchdevice`` console script and ``python -m torchdevice``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"], ["--version"]) or not args:
        if not args:  # as argparse does for a missing required argument
            _top_parser(prog).print_usage(sys.stderr)
            print(f"{prog}: error: a SCRIPT, -m MODULE or subcommand is required",
                  file=sys.stderr)  # fmt: skip
            return 2
        _top_parser(prog).parse_args(args)  # prints help or the version, and exits 0
    try:  # a bad ACTIVATE_TORCH_DEVICE is a usage error: one line, status 2
        activation_requested()
    except SettingsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    command, rest = (args[0], args[1:]) if args[0] in _COMMANDS else ("run", args)
    if command == "info":
        return _info(rest, f"{prog} info")
    if command == "compare":
        from torchdevice.tools import compare  # noqa: PLC0415 - only this subcommand needs it

        return compare.main(rest, f"{prog} compare")
    return _run(rest, f"{prog} run" if args[0] == "run" else prog)

"""The ``torchdevice`` command and ``python -m torchdevice``.

::

    python -m torchdevice [OPTIONS] SCRIPT [ARGS...]   # run a script redirected
    python -m torchdevice [OPTIONS] -m MODULE [ARGS...]
    torchdevice run [OPTIONS] SCRIPT [ARGS...]          # the same
    torchdevice info                                    # host, policy table, versions
    torchdevice compare [--output DIR] [PYTEST ARGS...] # tests native vs redirected
    torchdevice port [-o PATCH] (--report REPORT.json... | SCRIPT [ARGS...])  # a patch
    torchdevice combine [-o OUT] REPORT.json...          # merge reports of separate runs
    torchdevice --version

``run`` is the default: a first argument that is no subcommand is the script. Each
subcommand has its own ``--help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchdevice import __version__
from torchdevice.environment import activation_requested
from torchdevice.errors import SettingsError
from torchdevice.host import Host, forced_host, probe_host
from torchdevice.policy import decide
from torchdevice.settings import ENV_VARS, FIELDS, Settings, choices, load_settings
from torchdevice.tools.options import split_leading
from torchdevice.tools.outputs import unwritable

__all__ = ["main"]

_REQUESTS: tuple[object, ...] = (None, "cpu", "cpu:-1", "mps", "cuda", "cuda:1", 0)
#: The settings ``torchdevice run`` has a flag for (declared with the setting).
_FLAGGED = tuple(f for f in dataclasses.fields(Settings) if f.metadata["flag"])
#: Those of them that take a value (the others are switches).
_VALUED_FLAGS = frozenset(f.metadata["flag"] for f in _FLAGGED if choices(f.name))


def _run_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a PyTorch script with every device request redirected to the device "
        "this host really has, then print the migration report.",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="PATH",
        help="write the migration report to PATH (JSON if it ends in .json) "
        "instead of printing it to stderr",
    )
    parser.add_argument("--no-report", action="store_true", help="print no report at exit")
    for field in _FLAGGED:  # the settings' own flags, from their declaration
        values = choices(field.name)
        kind: dict[str, Any] = {"choices": values} if values else {"action": "store_true"}
        parser.add_argument(
            field.metadata["flag"], dest=field.name, help=field.metadata["flag_help"], **kind
        )
    parser.add_argument(
        "-m",
        dest="module",
        metavar="MODULE",
        help="run a library module as a script, like python -m",
    )
    parser.add_argument("script", nargs="?", help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def _run(argv: Sequence[str], prog: str) -> int:
    from torchdevice.tools import launcher  # noqa: PLC0415 - keeps `torchdevice info` light

    parser = _run_parser(prog)
    ns, rest = _split(parser, list(argv))
    options: dict[str, Any] = {f.name: getattr(ns, f.name) for f in _FLAGGED if getattr(ns, f.name)}
    try:  # a bad option or variable is a usage error: one line, status 2, no traceback
        loaded = load_settings(options)
    except SettingsError as exc:
        parser.exit(2, f"{prog}: error: {exc}\n")
    report_path = ns.report if ns.report is not None else loaded.report_path
    if report_path is not None and not ns.no_report:
        problem = unwritable(report_path)
        if problem:  # found now, not after a long run that then loses its report
            parser.exit(2, f"{prog}: error: cannot write the report to {report_path}: {problem}\n")
    if ns.module:
        try:
            launcher.run_module(
                ns.module, rest, options=options, report_path=report_path, quiet=ns.no_report
            )
        except launcher.LaunchError as exc:  # as `python -m nosuchmod`, but status 2
            parser.exit(2, f"{prog}: error: {exc}\n")
    elif ns.script:
        if not Path(ns.script).exists():  # as `python missing.py`: a message, status 2
            parser.exit(
                2,
                f"{prog}: can't open file {os.path.abspath(ns.script)!r}: "
                "[Errno 2] No such file or directory\n",
            )
        launcher.run_script(
            ns.script, rest, options=options, report_path=report_path, quiet=ns.no_report
        )
    else:
        parser.error("a SCRIPT or -m MODULE is required")
    return 0


def _split(
    parser: argparse.ArgumentParser, argv: list[str]
) -> tuple[argparse.Namespace, list[str]]:
    """Parse our options up to the script (or ``-m MODULE``); the rest belongs to it."""
    ours, rest = split_leading(
        argv,
        takes_value={"--report", "-m", *_VALUED_FLAGS},
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
    "port": "write a patch that makes your files device-agnostic, from a migration report "
    "(or by running the script redirected)",
    "combine": "merge JSON migration reports made by separate runs into one",
}


def _port_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a unified diff (for `git apply`) of the edits that make your own "
        "files device-agnostic with torch.accelerator, torch.Event, torch.autocast(device.type) "
        "and one `device` per file. Library files are left alone (listed on stderr); what "
        "cannot be rewritten mechanically gets a `# torchdevice port:` comment saying why. "
        "See docs/port.md.",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="REPORT.json",
        action="append",
        help="port from this JSON report, not by running a script; repeat it "
        "to port from several reports merged",
    )
    parser.add_argument(
        "--paths",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="read the report's files below OLD from NEW instead (a report "
        "made in CI or another checkout); repeatable",
    )
    parser.add_argument(
        "--static",
        action="store_true",
        help="also port the lines of the reported files that did not run, "
        "found by reading them (marked unverified)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATCH",
        help="write the patch to PATCH (default: stdout)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="the directory the patch's paths are relative to, where you run "
        "`git apply` (default: the working directory); files outside it are "
        "skipped",
    )
    parser.add_argument("script", nargs="?", help="the script to run redirected for its report")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def _port(argv: Sequence[str], prog: str) -> int:
    import json  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from torchdevice.reporting import MigrationReport, relocate  # noqa: PLC0415
    from torchdevice.tools.port import port_report  # noqa: PLC0415 - only this subcommand

    parser = _port_parser(prog)
    ours, rest = split_leading(
        list(argv),
        takes_value={"--report", "-o", "--output", "--root", "--paths"},
        is_flag=lambda arg: arg.startswith("-") and arg != "-",
    )
    ns = parser.parse_args(ours)
    if (ns.report is None) == (not rest):
        parser.error("give either --report REPORT.json or a SCRIPT to run, not both")
    problem = None if ns.output is None else unwritable(ns.output)
    if problem:  # found now, not after the script ran
        parser.exit(2, f"{prog}: error: cannot write the patch to {ns.output}: {problem}\n")
    pairs = _path_mappings(ns.paths, parser)  # checked before the script runs
    if rest:  # the run's child would refuse a bad TORCHDEVICE_* value: say it here, once
        try:
            load_settings()
        except SettingsError as exc:
            parser.exit(2, f"{prog}: error: {exc}\n")
    if ns.report is not None:
        report = _read_reports(ns.report, parser, prog)
    else:
        if not Path(rest[0]).exists():
            parser.exit(
                2,
                f"{prog}: can't open file {os.path.abspath(rest[0])!r}: "
                "[Errno 2] No such file or directory\n",
            )
        with tempfile.TemporaryDirectory(prefix="torchdevice-port-") as tmp:
            path = Path(tmp) / "report.json"
            # A child runs it, through the launcher, as `torchdevice run` would: the script's
            # output goes to stderr so that stdout carries the patch alone.
            done = _run_for_report(path, rest)
            if not path.exists():
                parser.exit(
                    2,
                    f"{prog}: error: the script wrote no report (exit status {done.returncode})\n",
                )
            if done.returncode:
                print(
                    f"{prog}: the script exited with status {done.returncode}; porting the "
                    "calls it made before that",
                    file=sys.stderr,
                )
            report = MigrationReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
    report = relocate(report, pairs)
    if not report.entries:
        print(
            f"{prog}: the report has no entries: the run asked for no device, so there is "
            "nothing to port",
            file=sys.stderr,
        )
    result = port_report(report, ns.root, static=ns.static)
    for filename, why in result.skipped:
        print(f"{prog}: skipped {filename}: {why}", file=sys.stderr)
    for file in result.files:
        for note in file.notes:
            print(f"{prog}: {file.path}: left a comment: {note}", file=sys.stderr)
    if ns.output is not None:
        ns.output.parent.mkdir(parents=True, exist_ok=True)  # the tools' one rule (outputs)
        ns.output.write_text(result.patch, encoding="utf-8")
    else:
        sys.stdout.write(result.patch)
    older = _older_torch(result.needs[0])
    if older:  # the patch's first line says what it needs; say it where it is not there
        print(
            f"{prog}: the patched code needs torch {result.needs[0][0]}.{result.needs[0][1]} "
            f"or later (for {', '.join(result.needs[1])}); this environment has torch {older}",
            file=sys.stderr,
        )
    changed = sum(file.changed for file in result.files)
    print(f"{prog}: {changed} file(s) changed, {len(result.skipped)} skipped", file=sys.stderr)
    return 0


def _older_torch(needed: tuple[int, int]) -> str | None:
    """The installed torch's version when it is older than ``needed`` (``None``: it is
    not, or cannot be read), without importing torch."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        installed = version("torch")
    except PackageNotFoundError:
        return None
    parts = installed.split("+")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None
    return installed if (major, minor) < needed else None


def _path_mappings(given: Sequence[str], parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """``--paths OLD=NEW`` options as pairs; a usage error for one that is not."""
    from torchdevice.reporting import path_mapping  # noqa: PLC0415

    try:
        return [path_mapping(pair) for pair in given]
    except ValueError as exc:
        parser.error(str(exc))


def _read_reports(paths: Sequence[Path], parser: argparse.ArgumentParser, prog: str) -> Any:
    """The JSON reports at ``paths``, merged; a one-line usage error for one it cannot read."""
    import json  # noqa: PLC0415

    from torchdevice.reporting import merge  # noqa: PLC0415

    reports = []
    for path in paths:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            parser.exit(2, f"{prog}: error: cannot read the report {str(path)!r}: {exc}\n")
        reports.append(_read_report(raw, path, parser, prog))
    return reports[0] if len(reports) == 1 else merge(reports)


def _combine(argv: Sequence[str], prog: str) -> int:
    from torchdevice.reporting import relocate  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog=prog,
        description=_COMMANDS["combine"].capitalize()
        + ": counts add up per call site, as `coverage combine` "
        "does. See docs/report.md.",
    )
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="write it to PATH (JSON if it ends in .json, text otherwise; default: JSON on stdout)",
    )
    parser.add_argument(
        "--paths",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="name the files below OLD from NEW instead; repeatable",
    )
    parser.add_argument(
        "--relative-to",
        type=Path,
        metavar="DIR",
        help="name the files below DIR relative to it: a report that "
        "`torchdevice port --root` reads in another checkout",
    )
    ns = parser.parse_args(list(argv))
    problem = None if ns.output is None else unwritable(ns.output)
    if problem:
        parser.exit(2, f"{prog}: error: cannot write {str(ns.output)!r}: {problem}\n")
    pairs = _path_mappings(ns.paths, parser)
    report = relocate(_read_reports(ns.reports, parser, prog), pairs, ns.relative_to)
    if ns.output is None:
        sys.stdout.write(report.to_json() + "\n")
        return 0
    try:
        report.write(ns.output)
    except OSError as exc:
        parser.exit(2, f"{prog}: error: cannot write {str(ns.output)!r}: {exc.strerror}\n")
    print(
        f"{prog}: {len(ns.reports)} report(s), {report.total} call(s) at "
        f"{len(report.entries)} call site(s) -> {ns.output}",
        file=sys.stderr,
    )
    return 0


def _read_report(raw: Any, path: Path, parser: argparse.ArgumentParser, prog: str) -> Any:
    """The report in ``raw``, or a one-line usage error naming ``path`` and what is wrong."""
    from torchdevice.reporting import MigrationReport  # noqa: PLC0415

    try:
        if not isinstance(raw, dict):
            raise ValueError("it is not a JSON object")
        return MigrationReport.from_dict(raw)
    except (ValueError, KeyError, TypeError) as exc:
        why = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        parser.exit(2, f"{prog}: error: cannot read the report {str(path)!r}: {why}\n")


def _run_for_report(path: Path, rest: Sequence[str]) -> Any:
    """Run ``rest`` redirected in a child that writes its JSON report to ``path``.

    The script's output goes to stderr, so that stdout carries the patch alone; the
    child's line naming ``path`` (a temporary file, deleted once read) is left out.
    """
    import subprocess  # noqa: PLC0415

    command = [sys.executable, "-m", "torchdevice", "run", "--report", str(path), *rest]
    written = f"torchdevice: migration report written to {path}".encode()
    with subprocess.Popen(command, stdout=2, stderr=subprocess.PIPE) as child:
        assert child.stderr is not None
        for line in child.stderr:
            if line.rstrip(b"\r\n") != written:
                sys.stderr.write(line.decode(errors="replace"))
                sys.stderr.flush()
    return child


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


def effective_settings(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each setting as an activation here would use it: name, value, and where it came from.

    The environment variables are validated as ``enable()`` validates them (raises
    :class:`~torchdevice.errors.SettingsError` naming the bad one).
    """
    environ = os.environ if environ is None else environ
    loaded = load_settings({}, environ)
    variables = {field: variable for variable, field in ENV_VARS.items()}
    rows = []
    for name in FIELDS:
        variable = variables.get(name)
        raw = environ.get(variable, "") if variable else ""
        value = getattr(loaded, name)
        rows.append(
            {
                "name": name,
                "value": str(value) if isinstance(value, (Path, Host)) else value,
                "variable": variable,
                "source": f"{variable} from the environment" if raw else "default",
            }
        )
    return rows


def _info(argv: Sequence[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=_COMMANDS["info"].capitalize() + ".")
    parser.add_argument("--json", action="store_true", help="print it as one JSON object")
    ns = parser.parse_args(list(argv))
    try:  # what an activation here would refuse, refused here too: one line, status 2
        rows = effective_settings()
    except SettingsError as exc:
        parser.exit(2, f"{prog}: error: {exc}\n")
    forced = next(row["value"] for row in rows if row["name"] == "host")
    host = forced_host(forced) if forced else probe_host()
    if ns.json:
        print(json.dumps(info_dict(host, rows), indent=2))
        return 0
    print(info(host))
    print("")
    print("settings (argument > environment > default; see docs/getting-started.md):")
    for row in rows:
        value = "unset" if row["value"] is None else row["value"]
        print(f"  {row['name']:<15} {value!s:<8} {row['source']}")
    print(
        f"  enabled at import: {'yes' if activation_requested() else 'no'} "
        "(ACTIVATE_TORCH_DEVICE, TORCH_ALLOW_REDIRECTS)"
    )
    intercept = next(row["value"] for row in rows if row["name"] == "intercept")
    print(f"  tier: {intercept}: {TIERS[intercept]} (docs/tiers.md)")
    return 0


#: What each tier (the ``intercept`` setting) sees, for ``torchdevice info``.
TIERS = {
    "mode": "a function mode sees every torch call, on every covered thread",
    "entry-points": "wrappers on the functions that take a device; every other op runs "
    "native, with no function mode",
}


def info_dict(host: Host, settings: list[dict[str, Any]]) -> dict[str, Any]:
    """``torchdevice info --json``: what :func:`info` shows, and the settings."""
    import torch  # noqa: PLC0415

    policy = []
    for request in _REQUESTS:
        try:
            decision = decide(request, host)
        except (RuntimeError, TypeError) as exc:
            policy.append({"request": request, "error": str(exc)})
        else:
            policy.append(
                {
                    "request": request,
                    "device": str(decision.device),
                    "action": decision.action,
                    "reason": decision.reason,
                }
            )
    return {
        "torchdevice": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "host": {
            "kind": host.kind,
            "device_count": host.device_count,
            "device_names": list(host.device_names),
        },
        "policy": policy,
        "settings": settings,
        "enabled_at_import": activation_requested(),
    }


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
    command, rest = (args[0], args[1:]) if args[0] in _COMMANDS else ("run", args)
    if command == "info":
        return _info(rest, f"{prog} info")
    if command == "port":
        return _port(rest, f"{prog} port")
    if command == "combine":
        return _combine(rest, f"{prog} combine")
    if command == "compare":
        from torchdevice.tools import compare  # noqa: PLC0415 - only this subcommand needs it

        return compare.main(rest, f"{prog} compare")
    return _run(rest, f"{prog} run" if args[0] == "run" else prog)

"""Running pytest twice in child processes, reading their results, and the command line."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

import psutil

from torchdevice.errors import SettingsError
from torchdevice.host import HOST_CHOICES
from torchdevice.tools import gate
from torchdevice.tools.compare.model import Comparison, RunResult, TestResult, compare_runs
from torchdevice.tools.compare.progress import Progress
from torchdevice.tools.compare.render import rate, write
from torchdevice.tools.compare_plugin import CHECK_VAR, ENV_VAR
from torchdevice.tools.options import split_leading
from torchdevice.tools.outputs import unwritable

__all__ = ["Interrupted", "check_arguments", "main", "read_results", "run_pytest"]

#: Variables that would switch torchdevice on in the native run.
_ACTIVATION_VARS = ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
#: The host the redirected run is forced to (``--host``, else this variable of our own).
_HOST_VAR = "TORCHDEVICE_HOST"


# -- running pytest --------------------------------------------------------------------
def read_results(lines: Iterable[str], run: RunResult) -> None:
    """Fold the compare plugin's JSON lines into ``run``."""
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        event = record.get("event")
        if event == "collected":
            run.collected = int(record["count"])
        elif event == "test":
            run.tests[str(record["nodeid"])] = TestResult(
                outcome=record["outcome"],
                message=str(record.get("message", "")),
                duration=round(float(record.get("duration", 0.0)), 3),
                redirects=record.get("redirects"),
                fallbacks=record.get("fallbacks"),
            )


def _child_env(log: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ACTIVATION_VARS}
    env.pop(_HOST_VAR, None)  # the redirected run names its host on the command line
    if log is None:
        env[CHECK_VAR] = "1"
    else:
        env[ENV_VAR] = str(log)
    return env


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: ``run`` holds what that run finished before it was stopped."""

    def __init__(self, run: RunResult) -> None:
        super().__init__(run.label)
        self.run = run


def _stop(child: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """End ``child`` and everything it started, gently first.

    A Ctrl-C at a terminal reaches the child too, which then ends by itself; when only
    this process was signalled, the child gets the ``SIGINT`` pytest handles (it prints
    its summary and ends its xdist workers). Whatever is still running after
    ``grace_s``, or at a second Ctrl-C, is killed, the child's own children included.
    """
    try:
        try:
            child.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)
        child.wait(timeout=grace_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _kill(child)


def _kill(child: subprocess.Popen[bytes]) -> None:
    """Kill ``child`` and everything it started, and reap it.

    ``SIGKILL`` cannot be ignored, so the wait is short; and the child is reaped, so no
    "subprocess is still running" warning follows at exit (``python -X dev``).
    """
    try:
        family = psutil.Process(child.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for process in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    child.kill()
    child.wait()


def _plugin_autoloads() -> bool:
    """Whether pytest will load torchdevice's plugin by itself: through the ``pytest11`` entry
    point of an installed torchdevice, unless autoloading is off. Run from a source tree on
    ``PYTHONPATH`` there is no entry point, and ``--torchdevice`` would be an unknown option.
    """
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(
        point.value == "torchdevice.tools.pytest_plugin"
        for point in importlib.metadata.entry_points(group="pytest11")
    )


def run_pytest(
    label: str,
    pytest_args: Sequence[str],
    output: Path,
    *,
    redirected: bool,
    host: str | None = None,
    progress: TextIO | None = sys.stderr,
    poll_s: float = 0.2,
    expected_s: float | None = None,
) -> RunResult:
    """Run pytest in a child process, showing progress; its results as a :class:`RunResult`.

    ``host`` (``--host``) goes to the redirected run only, as ``--torchdevice-host``: in
    the arguments both runs share it would redirect the native run too. ``expected_s``
    (the other run's duration) gives the progress line an ETA before a test has finished.
    """
    log = output / f"{label}.jsonl"
    log.write_text("", encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "torchdevice.tools.compare_plugin",
        "--continue-on-collection-errors",
    ]
    if not _plugin_autoloads():
        command += ["-p", "torchdevice.tools.pytest_plugin"]
    if redirected:
        command += ["--torchdevice", f"--torchdevice-report={output / 'migration-report.json'}"]
        if host is not None:
            command.append(f"--torchdevice-host={host}")
    else:  # a project whose configuration sets the `torchdevice` ini key runs natively too
        command += ["-o", "torchdevice=false"]
    command += list(pytest_args)
    run = RunResult(label, command)
    display = Progress(progress, label, expected_s)
    started = time.monotonic()
    interrupted = False
    with (
        (output / f"{label}.log").open("w", encoding="utf-8") as out,
        log.open(encoding="utf-8") as feed,
    ):
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_child_env(log))
        buffered = ""
        try:
            while True:
                done = child.poll() is not None
                buffered += feed.read()
                *complete, buffered = buffered.split("\n")
                read_results(complete, run)
                display.update(run)
                if done:
                    break
                time.sleep(poll_s)
        except KeyboardInterrupt:
            _stop(child)
            interrupted = True
            buffered += feed.read()  # what the child wrote while it was being stopped
        read_results(buffered.split("\n"), run)
    run.exit_code = child.returncode
    run.duration_s = time.monotonic() - started
    display.finish(run)
    if interrupted:
        raise Interrupted(run)
    return run


def check_arguments(pytest_args: Sequence[str]) -> tuple[int, str]:
    """Let pytest parse ``pytest_args`` without collecting; its status and output.

    Status 4 is a usage error (an unknown option, a bad value): compare stops before
    running anything. It runs as the native run will, with the initial ``conftest.py``
    files that may add options, and imports no test module.

    Ctrl-C here kills the check (and anything it started) and reaps it before the
    ``KeyboardInterrupt`` goes on: :func:`subprocess.run` would wait a quarter of a
    second, kill it and return without reaping it, so on a loaded machine compare's
    one line was followed by a ``ResourceWarning`` under ``python -X dev``. Its output
    goes to files, not pipes, so a child that is still writing never blocks.
    """
    command = [sys.executable, "-m", "pytest", "-p", "torchdevice.tools.compare_plugin"]
    if not _plugin_autoloads():
        command += ["-p", "torchdevice.tools.pytest_plugin"]
    command += ["--collect-only", "-q", "-p", "no:cacheprovider", *pytest_args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, env=_child_env(None))
        try:
            status = child.wait()
        except KeyboardInterrupt:
            _kill(child)
            raise
        out.seek(0)
        err.seek(0)
        return status, (out.read() + err.read()).decode(errors="replace")


def _usage_line(output: str) -> str:
    """pytest's own error line (``ERROR: ...`` or argparse's ``...: error: ...``)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:  # argparse's line comes after pytest's "ERROR: usage: ..."
        if ": error: " in line:
            return line.split(": error: ", 1)[1]
    for line in lines:
        if line.startswith("ERROR: "):
            return line.removeprefix("ERROR: ")
    return lines[-1] if lines else "pytest rejected its arguments"


def _host(output: Path) -> str:
    """The host as the redirected run's migration report names it."""
    try:
        data = json.loads((output / "migration-report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(data.get("host", "")) if isinstance(data, Mapping) else ""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the same pytest selection natively and with --torchdevice, and "
        "report per test what differs (compare.json, compare.md).",
        epilog="Everything after the options (or after --) goes to pytest unchanged.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("torchdevice-compare"),
        metavar="DIR",
        help="where the reports go (default: %(default)s)",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get(_HOST_VAR) or None,
        choices=HOST_CHOICES,
        metavar="HOST",  # the choices are read when asked (HostChoices), not now
        help="run the redirected run as on this host (--torchdevice-host): one of "
        "%(choices)s; default: $TORCHDEVICE_HOST, else the host this machine is",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument(
        gate.FLAG,
        dest="max_lines",
        type=int,
        nargs="?",
        const=0,
        metavar="N",
        help="the CI gate: exit with status 3, listing them, when the redirected run "
        "redirected more than N lines of your code (N is 0 when the option is given alone)",
    )
    return parser


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our options come first; the first other argument (or ``--``) starts pytest's."""
    return split_leading(
        argv,
        takes_value={"--output", "--host"},
        is_flag=lambda arg: (
            arg.startswith(("--output=", "--host=", f"{gate.FLAG}="))
            or arg in ("--quiet", "-h", "--help", gate.FLAG)
        ),
        takes_number={gate.FLAG},
    )


def main(argv: Sequence[str], prog: str = "torchdevice compare") -> int:
    """``torchdevice compare``: both runs, the reports, a summary; the exit status above.

    Usage errors (ours, a bad ``TORCHDEVICE_*`` value, or pytest's own about its
    arguments) are one line and status 2 before either run starts. Ctrl-C stops the
    running child (and its children), writes ``compare.md``/``compare.json`` with what
    finished, and ends with status 130.
    """
    from torchdevice.settings import load_settings  # noqa: PLC0415 - pydantic on demand

    ours, pytest_args = _split(list(argv))
    parser = _parser(prog)
    ns = parser.parse_args(ours)
    if ns.max_lines is not None and ns.max_lines < 0:
        parser.error(f"argument {gate.FLAG}: expected a number of lines, 0 or more")
    output: Path = ns.output
    try:  # the redirected run would stop on it, after the native one ran in full
        load_settings({"host": ns.host} if ns.host else None)
    except SettingsError as exc:
        parser.exit(2, f"{prog}: error: {exc}\n")
    problem = unwritable(output, directory=True)
    if problem:
        parser.exit(2, f"{prog}: error: cannot write the reports to {str(output)!r}: {problem}\n")
    try:
        status, text = check_arguments(pytest_args)
    except KeyboardInterrupt:  # pytest's own pre-check stopped with it: nothing ran yet
        print(
            f"{prog}: interrupted before either run started; nothing was written", file=sys.stderr
        )
        return 130
    if status == 4:
        parser.exit(2, f"{prog}: error: pytest: {_usage_line(text)}\n")
    output.mkdir(parents=True, exist_ok=True)
    progress = None if ns.quiet else sys.stderr
    native = RunResult("native", [])
    redirected = RunResult("redirected", [])
    try:
        native = run_pytest("native", pytest_args, output, redirected=False, progress=progress)
        if native.exit_code == 4:  # a usage error pytest found after parsing (a missing path)
            log = (output / "native.log").read_text(encoding="utf-8", errors="replace")
            parser.exit(2, f"{prog}: error: pytest: {_usage_line(log)}\n")
        redirected = run_pytest(
            "redirected",
            pytest_args,
            output,
            redirected=True,
            host=ns.host,
            progress=progress,
            expected_s=native.duration_s,
        )
    except Interrupted as stop:
        if stop.run.label == "native":
            native = stop.run
        else:
            redirected = stop.run
        comparison = compare_runs(native, redirected, pytest_args, _host(output))
        comparison.interrupted = stop.run.label
        _, md_path = write(comparison, output)
        print(
            f"{prog}: interrupted during the {stop.run.label} run; what finished is in {md_path}",
            file=sys.stderr,
        )
        return 130
    comparison = compare_runs(native, redirected, pytest_args, _host(output))
    regressions = _summarize(comparison, output)
    if any(run.exit_code in (2, 3, 4) for run in (native, redirected)):
        print(
            f"a pytest run ended abnormally: see {output}/native.log and {output}/redirected.log",
            file=sys.stderr,
        )
        return 2
    status = 1 if regressions else 0
    if ns.max_lines is not None and _gate_fails(output, ns.max_lines, prog):
        status = status or gate.STATUS
    return status


def _summarize(comparison: Comparison, output: Path) -> list[str]:
    """Write the reports and print the summary; the regressions."""
    json_path, md_path = write(comparison, output)
    n, r = comparison.native.totals(), comparison.redirected.totals()
    print(
        f"native:     {n['passed']} passed, {n['failed']} failed, {n['error']} errors, "
        f"{n['skipped']} skipped; pass rate {rate(n['pass_rate'])}"
    )
    print(
        f"redirected: {r['passed']} passed, {r['failed']} failed, {r['error']} errors, "
        f"{r['skipped']} skipped; pass rate {rate(r['pass_rate'])}"
    )
    regressions = comparison.of("regression")
    print(
        f"{len(regressions)} pass natively but fail redirected; "
        f"{len(comparison.of('redirected_only'))} run only redirected"
    )
    print(f"wrote {json_path} and {md_path}")
    return regressions


def _gate_fails(output: Path, limit: int, prog: str) -> bool:
    """Whether the redirected run's migration report holds more than ``limit`` of the
    user's lines (they are listed on stderr); a report that is missing fails too."""
    from torchdevice.reporting import MigrationReport  # noqa: PLC0415

    path = output / "migration-report.json"
    try:
        report = MigrationReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{prog}: the gate cannot read {path} ({exc}): failing", file=sys.stderr)
        return True
    lines = gate.verdict(report, limit)
    for line in lines:
        print(line, file=sys.stderr)
    return bool(lines)

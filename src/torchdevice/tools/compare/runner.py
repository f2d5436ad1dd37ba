"""Running pytest twice in child processes, reading their results, and the command line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from torchdevice.tools.compare.model import RunResult, TestResult, compare_runs
from torchdevice.tools.compare.render import rate, write
from torchdevice.tools.compare_plugin import ENV_VAR
from torchdevice.tools.options import split_leading

__all__ = ["main", "read_results", "run_pytest"]

#: Variables that would switch torchdevice on in the native run.
_ACTIVATION_VARS = ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")


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


class _Progress:
    """One status line per run: on a terminal rewritten in place, else every few seconds."""

    def __init__(self, stream: TextIO | None, label: str) -> None:
        self.stream = stream
        self.label = label
        self.tty = stream is not None and stream.isatty()
        self.last_print = time.monotonic()
        self.start = time.monotonic()
        self.shown = ""
        self.printed = ""

    def line(self, run: RunResult) -> str:
        counts = Counter(result.outcome for result in run.tests.values())
        total = "?" if run.collected is None else str(run.collected)
        return (
            f"{self.label}: {len(run.tests)}/{total} tests done ({counts['passed']} passed, "
            f"{counts['failed']} failed, {counts['error']} errors, {counts['skipped']} skipped)"
        )

    def update(self, run: RunResult) -> None:
        if self.stream is None:
            return
        text = self.line(run)
        now = time.monotonic()
        if self.tty and text != self.shown:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
        elif not self.tty and text != self.printed and now - self.last_print >= 10:
            self.stream.write(text + "\n")  # a log file: a line every 10 s at most
            self.stream.flush()
            self.last_print, self.printed = now, text
        self.shown = text

    def finish(self, run: RunResult) -> None:
        if self.stream is None:
            return
        prefix = "\r\x1b[K" if self.tty else ""
        elapsed = time.monotonic() - self.start
        self.stream.write(
            f"{prefix}{self.line(run)} in {elapsed:.1f} s, exit status {run.exit_code}\n"
        )
        self.stream.flush()


def _child_env(log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ACTIVATION_VARS}
    env[ENV_VAR] = str(log)
    return env


def run_pytest(
    label: str,
    pytest_args: Sequence[str],
    output: Path,
    *,
    redirected: bool,
    progress: TextIO | None = sys.stderr,
    poll_s: float = 0.2,
) -> RunResult:
    """Run pytest in a child process, showing progress; its results as a :class:`RunResult`."""
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
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        command += ["-p", "torchdevice.tools.pytest_plugin"]  # otherwise the entry point loads it
    if redirected:
        command += ["--torchdevice", f"--torchdevice-report={output / 'migration-report.json'}"]
    command += list(pytest_args)
    run = RunResult(label, command)
    display = _Progress(progress, label)
    started = time.monotonic()
    with (
        (output / f"{label}.log").open("w", encoding="utf-8") as out,
        log.open(encoding="utf-8") as feed,
    ):
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_child_env(log))
        buffered = ""
        while True:
            done = child.poll() is not None
            buffered += feed.read()
            *complete, buffered = buffered.split("\n")
            read_results(complete, run)
            display.update(run)
            if done:
                break
            time.sleep(poll_s)
        read_results([buffered], run)
    run.exit_code = child.returncode
    run.duration_s = time.monotonic() - started
    display.finish(run)
    return run


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
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    return parser


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our options come first; the first other argument (or ``--``) starts pytest's."""
    return split_leading(
        argv,
        takes_value={"--output"},
        is_flag=lambda arg: arg.startswith("--output=") or arg in ("--quiet", "-h", "--help"),
    )


def main(argv: Sequence[str], prog: str = "torchdevice compare") -> int:
    """``torchdevice compare``: both runs, the reports, a summary; the exit status above."""
    ours, pytest_args = _split(list(argv))
    ns = _parser(prog).parse_args(ours)
    output: Path = ns.output
    output.mkdir(parents=True, exist_ok=True)
    progress = None if ns.quiet else sys.stderr
    native = run_pytest("native", pytest_args, output, redirected=False, progress=progress)
    redirected = run_pytest("redirected", pytest_args, output, redirected=True, progress=progress)
    comparison = compare_runs(native, redirected, pytest_args, _host(output))
    json_path, md_path = write(comparison, output)
    n, r = native.totals(), redirected.totals()
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
    if any(run.exit_code in (2, 3, 4) for run in (native, redirected)):
        print(
            f"a pytest run ended abnormally: see {output}/native.log and {output}/redirected.log",
            file=sys.stderr,
        )
        return 2
    return 1 if regressions else 0

"""``torchdevice compare``: run a project's tests natively and redirected, report the difference.

::

    torchdevice compare [--output DIR] [--quiet] [--] [PYTEST ARGS...]

Runs ``python -m pytest PYTEST ARGS`` twice, one after the other, in child processes: once
natively (``ACTIVATE_TORCH_DEVICE``/``TORCH_ALLOW_REDIRECTS`` removed from the environment),
once with ``--torchdevice``. Both load :mod:`torchdevice.tools.compare_plugin`, which writes one
JSON line per finished test; the parent reads those lines while the child runs (the
progress display) and afterwards (the results). ``--continue-on-collection-errors`` is
added so that a module failing to import in one run does not stop that run.

``DIR`` (default ``torchdevice-compare``) receives:

``compare.json``
    ``format`` (``"torchdevice-compare/1"``), ``pytest_args``, ``host``, ``runs`` (per run:
    ``command``, ``exit_code``, ``duration_s``, ``collected``, ``totals``), ``tests`` (per
    node id: ``category`` and the ``native`` and ``redirected`` results: ``outcome``,
    ``message``, ``duration``, ``redirects``, ``fallbacks``), and the node-id lists
    ``regressions``, ``redirected_only``, ``native_only``, ``fixed``.
``compare.md``
    the same for a person: totals and pass rates, then each list as a table.
``native.log``, ``redirected.log``, ``native.jsonl``, ``redirected.jsonl``
    the children's terminal output and raw results; ``migration-report.json``: the
    redirected run's migration report (merged over xdist workers).

Categories: ``regression`` passes natively (passed/xfailed) and fails redirected
(failed/error/xpassed); ``redirected_only`` is skipped or absent natively and runs
redirected (GPU-only tests on a host without one); ``native_only`` the reverse; ``fixed``
fails natively and passes redirected; ``same`` otherwise. The pass rate of a run is
passed / (passed + failed + error): the tests that ran to a verdict.

Exit status: 0, or 1 when there is a regression, or 2 when a run ended abnormally (pytest
exit status 2-4: interrupted, internal error, usage error; see its ``.log``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

from torchdevice.tools.compare_plugin import ENV_VAR
from torchdevice.tools.options import split_leading

__all__ = [
    "Comparison",
    "RunResult",
    "TestResult",
    "categorize",
    "compare_runs",
    "main",
    "read_results",
    "render_markdown",
    "run_pytest",
]

Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "absent"]
Category = Literal["regression", "redirected_only", "native_only", "fixed", "same"]

_OK = frozenset({"passed", "xfailed"})
_BAD = frozenset({"failed", "error", "xpassed"})
_NOT_RUN = frozenset({"skipped", "absent"})
OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
#: Variables that would switch torchdevice on in the native run.
_ACTIVATION_VARS = ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
_FORMAT = "torchdevice-compare/1"
#: compare.json's node-id lists and the category each holds.
_LISTS: Mapping[str, Category] = {
    "regressions": "regression",
    "redirected_only": "redirected_only",
    "native_only": "native_only",
    "fixed": "fixed",
}


@dataclasses.dataclass(frozen=True)
class TestResult:
    """One test in one run."""

    __test__ = False  # not a pytest test class, whatever its name says

    outcome: Outcome
    message: str = ""
    duration: float = 0.0
    redirects: int | None = None
    fallbacks: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


_ABSENT = TestResult("absent")


@dataclasses.dataclass
class RunResult:
    """One pytest run: how it ended and each test's result."""

    label: str
    command: list[str]
    exit_code: int | None = None
    duration_s: float = 0.0
    collected: int | None = None
    tests: dict[str, TestResult] = dataclasses.field(default_factory=dict)

    def totals(self) -> dict[str, Any]:
        """Counts per outcome, the total, and the pass rates."""
        counts: Counter[str] = Counter(result.outcome for result in self.tests.values())
        totals: dict[str, Any] = {"tests": len(self.tests)}
        totals.update({outcome: counts.get(outcome, 0) for outcome in OUTCOMES})
        verdicts = counts["passed"] + counts["failed"] + counts["error"]
        totals["pass_rate"] = round(counts["passed"] / verdicts, 4) if verdicts else None
        return totals

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the tests themselves go in the comparison's table)."""
        return {
            "command": self.command,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 2),
            "collected": self.collected,
            "totals": self.totals(),
        }


def categorize(native: TestResult, redirected: TestResult) -> Category:
    """Where a test falls when its two results are put side by side."""
    if native.outcome in _OK and redirected.outcome in _BAD:
        return "regression"
    if native.outcome in _NOT_RUN and redirected.outcome not in _NOT_RUN:
        return "redirected_only"
    if redirected.outcome in _NOT_RUN and native.outcome not in _NOT_RUN:
        return "native_only"
    if native.outcome in _BAD and redirected.outcome in _OK:
        return "fixed"
    return "same"


@dataclasses.dataclass
class Comparison:
    """Both runs and every test's pair of results."""

    native: RunResult
    redirected: RunResult
    pytest_args: list[str]
    host: str = ""

    def rows(self) -> list[tuple[str, TestResult, TestResult, Category]]:
        """Every node id seen in either run, sorted, with both results and the category."""
        ids = sorted(set(self.native.tests) | set(self.redirected.tests))
        rows = []
        for nodeid in ids:
            native = self.native.tests.get(nodeid, _ABSENT)
            redirected = self.redirected.tests.get(nodeid, _ABSENT)
            rows.append((nodeid, native, redirected, categorize(native, redirected)))
        return rows

    def of(self, category: Category) -> list[str]:
        """The node ids in ``category``."""
        return [nodeid for nodeid, _, _, cat in self.rows() if cat == category]

    def to_dict(self) -> dict[str, Any]:
        """What ``compare.json`` holds."""
        rows = self.rows()
        return {
            "format": _FORMAT,
            "pytest_args": self.pytest_args,
            "host": self.host,
            "runs": {"native": self.native.as_dict(), "redirected": self.redirected.as_dict()},
            "tests": [
                {
                    "nodeid": nodeid,
                    "category": cat,
                    "native": native.as_dict(),
                    "redirected": redirected.as_dict(),
                }
                for nodeid, native, redirected, cat in rows
            ],
            **{
                key: [nodeid for nodeid, _, _, cat in rows if cat == category]
                for key, category in _LISTS.items()
            },
        }


def compare_runs(
    native: RunResult, redirected: RunResult, pytest_args: Sequence[str], host: str = ""
) -> Comparison:
    """Put two runs side by side."""
    return Comparison(native, redirected, list(pytest_args), host)


# -- Markdown --------------------------------------------------------------------------
def _cell(text: object) -> str:
    """Text that cannot break a Markdown table row."""
    return str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def render_markdown(comparison: Comparison) -> str:
    """``compare.md``: totals and pass rates, then the tests that differ."""
    native, redirected = comparison.native.totals(), comparison.redirected.totals()
    rows = comparison.rows()
    lines = [
        "# torchdevice compare: native vs redirected",
        "",
        f"- pytest arguments: `{' '.join(comparison.pytest_args) or '(none)'}`",
        f"- host: {comparison.host or 'unknown'}",
        f"- exit status: native {comparison.native.exit_code}, "
        f"redirected {comparison.redirected.exit_code}",
        "",
        "## Totals",
        "",
        "| | native | redirected |",
        "| --- | ---: | ---: |",
        f"| tests | {native['tests']} | {redirected['tests']} |",
    ]
    lines += [f"| {outcome} | {native[outcome]} | {redirected[outcome]} |" for outcome in OUTCOMES]
    lines.append(
        f"| pass rate (passed / passed+failed+error) | {_rate(native['pass_rate'])} "
        f"| {_rate(redirected['pass_rate'])} |"
    )
    lines.append(
        f"| duration | {comparison.native.duration_s:.1f} s "
        f"| {comparison.redirected.duration_s:.1f} s |"
    )
    regressions = [row for row in rows if row[3] == "regression"]
    lines += ["", f"## Pass natively, fail redirected ({len(regressions)})", ""]
    if regressions:
        lines += [
            "| test | redirected | first error line | redirects | fallbacks |",
            "| --- | --- | --- | ---: | ---: |",
        ]
        lines += [
            f"| `{_cell(nodeid)}` | {red.outcome} | {_cell(red.message)} "
            f"| {_count(red.redirects)} | {_count(red.fallbacks)} |"
            for nodeid, _, red, _ in regressions
        ]
    else:
        lines.append("None.")
    only = [row for row in rows if row[3] == "redirected_only"]
    lines += [
        "",
        f"## Run only redirected ({len(only)})",
        "",
        "Skipped (or absent) natively, run redirected: e.g. GPU-only tests on a host without one.",
        "",
    ]
    if only:
        lines += [
            "| test | redirected | first error line | native skip reason |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| `{_cell(nodeid)}` | {red.outcome} | {_cell(red.message)} | {_cell(nat.message)} |"
            for nodeid, nat, red, _ in only
        ]
    else:
        lines.append("None.")
    for category, title in (
        ("native_only", "Run only natively"),
        ("fixed", "Fail natively, pass redirected"),
    ):
        chosen = [row for row in rows if row[3] == category]
        lines += ["", f"## {title} ({len(chosen)})", ""]
        if chosen:
            lines += [
                "| test | native | redirected | redirected message |",
                "| --- | --- | --- | --- |",
            ]
            lines += [
                f"| `{_cell(nodeid)}` | {nat.outcome} | {red.outcome} | {_cell(red.message)} |"
                for nodeid, nat, red, _ in chosen
            ]
        else:
            lines.append("None.")
    return "\n".join(lines) + "\n"


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


def write(comparison: Comparison, output: Path) -> tuple[Path, Path]:
    """Write ``compare.json`` and ``compare.md`` into ``output``."""
    json_path, md_path = output / "compare.json", output / "compare.md"
    json_path.write_text(json.dumps(comparison.to_dict(), indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(comparison), encoding="utf-8")
    return json_path, md_path


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
        f"{n['skipped']} skipped; pass rate {_rate(n['pass_rate'])}"
    )
    print(
        f"redirected: {r['passed']} passed, {r['failed']} failed, {r['error']} errors, "
        f"{r['skipped']} skipped; pass rate {_rate(r['pass_rate'])}"
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

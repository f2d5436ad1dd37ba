"""What ``torchdevice compare`` compares: test results, runs, and their categories.

Pure data: no pytest, no I/O; the runner fills it and the renderer reads it.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "OUTCOMES",
    "Category",
    "Comparison",
    "Outcome",
    "RunResult",
    "TestResult",
    "categorize",
    "compare_runs",
]

Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "absent"]
Category = Literal["regression", "redirected_only", "native_only", "fixed", "same"]

_OK = frozenset({"passed", "xfailed"})
_BAD = frozenset({"failed", "error", "xpassed"})
_NOT_RUN = frozenset({"skipped", "absent"})
OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
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
    #: The run that Ctrl-C stopped (``"native"`` or ``"redirected"``): the results are partial.
    interrupted: str | None = None

    def rows(self) -> list[tuple[str, TestResult, TestResult, Category]]:
        """Every node id seen in either run, sorted (numbers as numbers: ``test[2]`` before
        ``test[10]``, as pytest lists them), with both results and the category."""
        ids = sorted(set(self.native.tests) | set(self.redirected.tests), key=_natural)
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
            "interrupted": self.interrupted,
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


def _natural(nodeid: str) -> tuple[tuple[int, int | str], ...]:
    """``nodeid``'s sort key: its runs of digits as numbers, the rest as text."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part)
        for part in re.split(r"(\d+)", nodeid)
        if part
    )


def compare_runs(
    native: RunResult, redirected: RunResult, pytest_args: Sequence[str], host: str = ""
) -> Comparison:
    """Put two runs side by side."""
    return Comparison(native, redirected, list(pytest_args), host)

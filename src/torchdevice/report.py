"""The migration report.

Every redirect is recorded against the user's call site. A call site is logged once (at
INFO on the ``torchdevice`` logger, as a record made at that line: :mod:`torchdevice.logs`)
and counted every time; :func:`Recorder.report` turns
the counts into the migration report: the lines a user would change to port by hand.
Reports of several processes combine with :func:`merge` (the pytest plugin's xdist
workers, and the parts :mod:`torchdevice.report_parts` collects from a run's children).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from torchdevice import guide
from torchdevice.callsite import CallSite, Position, position_of, site_of
from torchdevice.logs import at_site, fallback_logger, redirects_logger

if TYPE_CHECKING:
    from types import FrameType

    from torchdevice.policy import Decision

__all__ = [
    "SCHEMA_VERSION",
    "Entry",
    "EventKind",
    "MigrationReport",
    "Recorder",
    "api_name",
    "merge",
    "path_mapping",
    "relocate",
]

#: The version of the JSON report's schema (:mod:`torchdevice.report_schema`).
SCHEMA_VERSION = 1

#: ``device-api``: a call of a device's own module (``torch.cuda.synchronize()``...) that
#: the facade answered; the others are decisions and rules (docs/report.md).
EventKind = Literal["redirect", "fallback", "override", "dtype", "device-api"]
_KINDS: frozenset[str] = frozenset(get_args(EventKind))


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of the report: a call site, what it asked for, what it got, how often."""

    site: CallSite
    kind: EventKind
    api: str
    requested: str
    decided: str
    reason: str
    count: int
    #: The exact spans of the calls made at this site (3.11+), for ``torchdevice port``.
    positions: tuple[Position, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "file": self.site.filename,
            "line": self.site.lineno,
            "function": self.site.function,
            "kind": self.kind,
            "api": self.api,
            "requested": self.requested,
            "decided": self.decided,
            "reason": self.reason,
            "count": self.count,
            "positions": [list(position) for position in self.positions],
            "library": guide.origin(self.site.filename),
            "to_change": guide.to_change(self),
            "advice": guide.advice(self),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Entry:
        """The entry :meth:`as_dict` wrote (read back from another process's report)."""
        kind = str(raw["kind"])
        if kind not in _KINDS:
            raise ValueError(f"unknown event kind {kind!r} in a migration report entry")
        return cls(
            CallSite(str(raw["file"]), int(raw["line"]), str(raw["function"])),
            cast(EventKind, kind),  # checked against _KINDS above
            str(raw["api"]),
            str(raw["requested"]),
            str(raw["decided"]),
            str(raw["reason"]),
            int(raw["count"]),
            _positions(raw.get("positions", ())),
        )


def _positions(raw: Iterable[Iterable[int]]) -> tuple[Position, ...]:
    """Positions read back from JSON, sorted, each a 4-tuple of ints."""
    spans = set()
    for span in raw:
        line, end_line, column, end_column = (int(value) for value in span)
        spans.add((line, end_line, column, end_column))
    return tuple(sorted(spans))


@dataclass(frozen=True)
class MigrationReport:
    """Every call site that was redirected or fell back, with counts.

    ``processes`` is how many processes' records it holds (1 for one process's own report,
    more once :func:`merge` combined several); ``ranks`` the distinct ranks among them
    that were known (``RANK`` or ``LOCAL_RANK`` in their environment).
    """

    host: str
    entries: tuple[Entry, ...]
    processes: int = 1
    ranks: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        """Number of redirected calls, all sites together."""
        return sum(entry.count for entry in self.entries)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (what :meth:`to_json` writes)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "host": self.host,
            "total_calls": self.total,
            "call_sites": len(self.entries),
            "processes": self.processes,
            "ranks": list(self.ranks),
            "entries": [entry.as_dict() for entry in self.entries],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> MigrationReport:
        """The report :meth:`to_dict` wrote; fields a writer left out take their defaults.

        A report of a newer schema than this torchdevice reads is refused, naming both.
        """
        version = int(raw.get("schema_version", SCHEMA_VERSION))
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"migration report schema version {version} is newer than this torchdevice "
                f"reads ({SCHEMA_VERSION}): upgrade torchdevice"
            )
        return cls(
            str(raw.get("host", "")),
            tuple(Entry.from_dict(entry) for entry in raw.get("entries", ())),
            int(raw.get("processes", 1)),
            tuple(sorted({int(rank) for rank in raw.get("ranks", ())})),
        )

    def to_json(self) -> str:
        """The report as indented JSON, checked against its schema
        (:mod:`torchdevice.report_schema`) first."""
        from torchdevice.report_schema import Report  # noqa: PLC0415 - pydantic on demand

        data = self.to_dict()
        Report.model_validate(data)
        return json.dumps(data, indent=2)

    def _processes_text(self) -> str:
        """`` in 3 processes (ranks 0, 1)`` for a merged report; nothing for one process."""
        if self.processes == 1 and not self.ranks:
            return ""
        text = f" in {self.processes} process{'es' if self.processes != 1 else ''}"
        if self.ranks:
            text += f" (rank{'s' if len(self.ranks) != 1 else ''} "
            text += ", ".join(str(rank) for rank in self.ranks) + ")"
        return text

    def to_text(self) -> str:
        """The report as a porting guide a person reads at the end of a run: the user's
        lines to change, grouped by file and line with their source and replacement, then
        the libraries' call sites apart (:func:`torchdevice.guide.render_text`)."""
        if not self.entries:
            return (
                f"torchdevice migration report ({self.host}): no call was redirected"
                f"{self._processes_text()}."
            )
        header = (
            f"torchdevice migration report ({self.host}): "
            f"{self.total} call(s) redirected at {len(self.entries)} call site(s)"
            f"{self._processes_text()}"
        )
        return guide.render_text(self, header)

    def __str__(self) -> str:
        return self.to_text()

    def write(self, path: Path) -> None:
        """Write JSON if ``path`` ends in ``.json``, text otherwise."""
        text = self.to_json() if path.suffix == ".json" else self.to_text()
        path.write_text(text + "\n", encoding="utf-8")


#: What the report counts per row: call site, kind, api, requested, decided.
_Key = tuple[CallSite, EventKind, str, str, str]


def _by_count(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    """Most frequent call sites first, then by file and line (the report's order)."""
    return tuple(sorted(entries, key=lambda e: (-e.count, e.site.filename, e.site.lineno)))


def merge(reports: Iterable[MigrationReport], host: str | None = None) -> MigrationReport:
    """One report from several processes' reports, as ``coverage combine`` does.

    Counts add up per (call site, kind, api, requested, decided); the first reason seen
    for a row is kept. ``processes`` add up and ``ranks`` are united. ``host`` defaults to
    the first report's: the process that merges is the one that started the run.
    """
    totals: dict[_Key, int] = {}
    reasons: dict[_Key, str] = {}
    spans: dict[_Key, set[Position]] = {}
    processes = 0
    ranks: set[int] = set()
    first_host: str | None = None
    for report in reports:
        first_host = report.host if first_host is None else first_host
        processes += report.processes
        ranks.update(report.ranks)
        for entry in report.entries:
            key = (entry.site, entry.kind, entry.api, entry.requested, entry.decided)
            totals[key] = totals.get(key, 0) + entry.count
            reasons.setdefault(key, entry.reason)
            spans.setdefault(key, set()).update(entry.positions)
    entries = (
        Entry(*key, reasons[key], count, tuple(sorted(spans[key]))) for key, count in totals.items()
    )
    label = host if host is not None else first_host or ""
    return MigrationReport(label, _by_count(entries), max(processes, 1), tuple(sorted(ranks)))


def path_mapping(pair: str) -> tuple[str, str]:
    """``"OLD=NEW"`` (a command line's path mapping) as a pair; a ``ValueError`` naming it
    otherwise."""
    old, sep, new = pair.partition("=")
    if not sep or not old:
        raise ValueError(f"a path mapping is OLD=NEW, not {pair!r}")
    return old, new


def relocate(
    report: MigrationReport,
    mapping: Iterable[str | tuple[str, str]] = (),
    relative_to: str | os.PathLike[str] | None = None,
) -> MigrationReport:
    """``report`` with its file names moved, so a report made elsewhere (CI, another
    checkout) names the files here, as coverage.py's ``[paths]`` does.

    ``mapping`` is ``(OLD, NEW)`` pairs or ``"OLD=NEW"`` strings: a file name that starts
    with the directory ``OLD`` (``\\`` and ``/`` alike) starts with ``NEW`` instead; the
    first pair that matches wins. Then, with ``relative_to``, a file below that directory
    is named relative to it: a portable report, which ``torchdevice port --root`` resolves
    against the checkout it is given. Counts, spans and everything else are unchanged.
    """
    pairs = [path_mapping(pair) if isinstance(pair, str) else pair for pair in mapping]
    root = None if relative_to is None else os.path.abspath(relative_to)

    def moved(filename: str) -> str:
        name = filename.replace("\\", "/")
        for old, new in pairs:
            prefix = old.replace("\\", "/").rstrip("/")
            if name == prefix or name.startswith(prefix + "/"):
                filename = new.rstrip("/\\") + name[len(prefix) :]
                break
        if root is not None and os.path.isabs(filename):
            relative = os.path.relpath(filename, root)
            if not relative.startswith(os.pardir):
                return Path(relative).as_posix()
        return filename

    entries = [
        Entry(CallSite(moved(e.site.filename), e.site.lineno, e.site.function), e.kind, e.api,
              e.requested, e.decided, e.reason, e.count, e.positions)
        for e in report.entries
    ]  # fmt: skip
    return merge([dataclasses.replace(report, entries=tuple(entries))])


_API_NAMES = {"_parse_to": "Module.to", "device": "torch.device"}


def api_name(func: Callable[..., Any]) -> str:
    """How the report names ``func``: ``torch.zeros``, ``Tensor.to``, ``Module.to``."""
    name = getattr(func, "__name__", None) or repr(func)
    if name in _API_NAMES:
        return _API_NAMES[name]
    qualname = getattr(func, "__qualname__", name)
    if qualname.startswith(("TensorBase.", "Tensor.")):
        return "Tensor." + name
    return f"torch.{name}"


class Recorder:
    """Counts events per call site and logs each site once.

    Shared by every thread and every activation of the process. Two ways in:

    * :meth:`hit`, the redirect hot path: the key is the frame's code and instruction
      (no line number is computed) with the api and the decision, and a repeat is one
      dict lookup and one list update; the site, names and log line are built the first
      time only. Under free-running threads a bump can race and undercount by one; every
      call site is still reported and logged.
    * :meth:`record`, for events off the hot path (fallbacks, the dtype rule).
    """

    def __init__(self) -> None:
        self._counts: dict[_Key, int] = {}
        self._reasons: dict[_Key, str] = {}
        self._positions: dict[_Key, set[Position]] = {}
        # (code id, instruction offset, api id, decision id) -> [later hits, report key,
        # code, api, decision]: holding the objects keeps their ids from being reused.
        self._hits: dict[tuple[int, int, int, int], list[Any]] = {}
        self._lock = threading.Lock()

    def hit(
        self,
        frame: FrameType | None,
        api: str | Callable[..., Any],
        decision: Decision,
        kind: EventKind,
    ) -> None:
        """Count ``decision`` (a redirect or an override) made at ``frame``'s call."""
        if frame is None:  # torch was called from C: no user line
            self._record_decision(None, api, decision, kind)
            return
        key = (id(frame.f_code), frame.f_lasti, id(api), id(decision))
        entry = self._hits.get(key)
        if entry is not None:
            entry[0] += 1
            return
        report_key = self._record_decision(frame, api, decision, kind)
        with self._lock:
            self._hits.setdefault(key, [0, report_key, frame.f_code, api, decision])

    def _record_decision(
        self,
        frame: FrameType | None,
        api: str | Callable[..., Any],
        decision: Decision,
        kind: EventKind,
    ) -> _Key:
        requested = "none" if decision.requested is None else str(decision.requested)
        name = api if isinstance(api, str) else api_name(api)
        return self.record(
            site_of(frame), kind, name, requested, str(decision.device), decision.reason,
            None if frame is None else position_of(frame),
        )  # fmt: skip

    def record(
        self,
        site: CallSite,
        kind: EventKind,
        api: str,
        requested: str,
        decided: str,
        reason: str,
        position: Position | None = None,
    ) -> _Key:
        """Count one event at ``site`` (at ``position`` in its line, when known); log it
        the first time this key is seen."""
        key = (site, kind, api, requested, decided)
        with self._lock:
            count = self._counts.get(key)
            self._counts[key] = 1 if count is None else count + 1
            if count is None:
                self._reasons[key] = reason
            if position is not None:
                self._positions.setdefault(key, set()).add(position)
        if count is None:
            message = "%s: %s(%s) -> %s (%s)"
            to = fallback_logger if kind == "fallback" else redirects_logger
            at_site(logging.INFO, site, message, site, api, requested, decided, reason, to=to)
        return key

    def clear(self) -> None:
        """Forget every count (a new report starts)."""
        with self._lock:
            self._counts.clear()
            self._reasons.clear()
            self._positions.clear()
            self._hits.clear()

    def report(self, host: str) -> MigrationReport:
        """The migration report so far, most frequent call sites first."""
        with self._lock:
            counts = dict(self._counts)
            reasons = dict(self._reasons)
            spans = {key: tuple(sorted(found)) for key, found in self._positions.items()}
            for later, key, *_ in list(self._hits.values()):
                if later:
                    counts[key] = counts.get(key, 0) + later
        entries = (
            Entry(key[0], key[1], key[2], key[3], key[4], reasons[key], count, spans.get(key, ()))
            for key, count in counts.items()
        )
        return MigrationReport(host, _by_count(entries))

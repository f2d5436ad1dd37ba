"""A row of the migration report (:class:`Entry`), the kinds of event, and the version
of the JSON schema rows are written in.

The bottom of :mod:`torchdevice.reporting`: a row reads its own advice from
:mod:`~torchdevice.reporting.guide`; everything else in the package builds on rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from torchdevice import port
from torchdevice.sites import CallSite, Position, origin

__all__ = ["SCHEMA_VERSION", "Entry", "EventKind", "Key", "by_count"]

#: The version of the JSON report's schema (:mod:`torchdevice.reporting.schema`).
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
            "library": origin(self.site.filename),
            "to_change": port.to_change(self),
            "advice": port.advice_for(self),
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


#: What the report counts per row: call site, kind, api, requested, decided.
Key = tuple[CallSite, EventKind, str, str, str]


def by_count(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    """Most frequent call sites first, then by file and line (the report's order)."""
    return tuple(sorted(entries, key=lambda e: (-e.count, e.site.filename, e.site.lineno)))

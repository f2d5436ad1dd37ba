"""The migration report.

Every redirect is recorded against the user's call site. A call site is logged once (at
INFO on the ``torchdevice`` logger, as a record made at that line: :mod:`torchdevice.logs`)
and counted every time; :func:`Recorder.report` turns
the counts into the migration report: the lines a user would change to port by hand.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torchdevice.callsite import CallSite, site_of
from torchdevice.logs import at_site

if TYPE_CHECKING:
    from types import FrameType

    from torchdevice.policy import Decision

__all__ = [
    "Entry",
    "EventKind",
    "MigrationReport",
    "Recorder",
    "api_name",
]

EventKind = Literal["redirect", "fallback", "override", "dtype"]


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
        }


def _display_path(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it (text only)."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith(os.pardir) else relative


@dataclass(frozen=True)
class MigrationReport:
    """Every call site that was redirected or fell back, with counts."""

    host: str
    entries: tuple[Entry, ...]

    @property
    def total(self) -> int:
        """Number of redirected calls, all sites together."""
        return sum(entry.count for entry in self.entries)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (what :meth:`to_json` writes)."""
        return {
            "host": self.host,
            "total_calls": self.total,
            "call_sites": len(self.entries),
            "entries": [entry.as_dict() for entry in self.entries],
        }

    def to_json(self) -> str:
        """The report as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        """The report as a table a person reads at the end of a run."""
        if not self.entries:
            return f"torchdevice migration report ({self.host}): no call was redirected."
        lines = [
            f"torchdevice migration report ({self.host}): "
            f"{self.total} call(s) redirected at {len(self.entries)} call site(s)",
        ]
        for entry in self.entries:
            site = entry.site
            lines.append(
                f"  {_display_path(site.filename)}:{site.lineno} in {site.function}(): "
                f"{entry.api}({entry.requested}) -> {entry.decided} "
                f"x{entry.count} [{entry.kind}: {entry.reason}]"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def write(self, path: Path) -> None:
        """Write JSON if ``path`` ends in ``.json``, text otherwise."""
        text = self.to_json() if path.suffix == ".json" else self.to_text()
        path.write_text(text + "\n", encoding="utf-8")


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


_Key = tuple[CallSite, EventKind, str, str, str]


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
            site_of(frame), kind, name, requested, str(decision.device), decision.reason
        )

    def record(
        self,
        site: CallSite,
        kind: EventKind,
        api: str,
        requested: str,
        decided: str,
        reason: str,
    ) -> _Key:
        """Count one event at ``site``; log it the first time this key is seen."""
        key = (site, kind, api, requested, decided)
        with self._lock:
            count = self._counts.get(key)
            self._counts[key] = 1 if count is None else count + 1
            if count is None:
                self._reasons[key] = reason
        if count is None:
            message = "%s: %s(%s) -> %s (%s)"
            at_site(logging.INFO, site, message, site, api, requested, decided, reason)
        return key

    def clear(self) -> None:
        """Forget every count (a new report starts)."""
        with self._lock:
            self._counts.clear()
            self._reasons.clear()
            self._hits.clear()

    def report(self, host: str) -> MigrationReport:
        """The migration report so far, most frequent call sites first."""
        with self._lock:
            counts = dict(self._counts)
            reasons = dict(self._reasons)
            for later, key, *_ in list(self._hits.values()):
                if later:
                    counts[key] = counts.get(key, 0) + later
        entries = [
            Entry(key[0], key[1], key[2], key[3], key[4], reasons[key], count)
            for key, count in counts.items()
        ]
        entries.sort(key=lambda e: (-e.count, e.site.filename, e.site.lineno))
        return MigrationReport(host, tuple(entries))

"""Logging and the migration report.

Every redirect is recorded against the user's call site. A call site is logged once (at
INFO on the ``torchdevice`` logger) and counted every time; :func:`Recorder.report` turns
the counts into the migration report: the lines a user would change to port by hand.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from torchdevice.callsite import CallSite

__all__ = [
    "Entry",
    "EventKind",
    "MigrationReport",
    "Recorder",
    "api_name",
    "configure_logging",
    "logger",
]

logger = logging.getLogger("torchdevice")

EventKind = Literal["redirect", "fallback", "override", "dtype"]


def configure_logging(level: str, explicit: bool) -> None:
    """Set the ``torchdevice`` logger's level.

    When the level was asked for explicitly (argument or ``TORCHDEVICE_LOG_LEVEL``) and
    nothing is configured to show our records, attach a stderr handler: without it,
    Python's last-resort handler would drop every record below WARNING.
    """
    logger.setLevel(level)
    if explicit and not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)


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
    """Counts redirects per call site and logs each site once.

    Shared by every thread: new keys are added under a lock, counts are bumped under it
    too (a redirect is already the slow path, the lock costs ~0.1 µs).
    """

    def __init__(self) -> None:
        self._counts: dict[_Key, int] = {}
        self._reasons: dict[_Key, str] = {}
        self._lock = threading.Lock()

    def record(
        self,
        site: CallSite,
        kind: EventKind,
        api: str,
        requested: str,
        decided: str,
        reason: str,
    ) -> _Key:
        """Count one event at ``site``; log it the first time this key is seen.

        Returns the key, for :meth:`add` to bump later without rebuilding it.
        """
        key = (site, kind, api, requested, decided)
        with self._lock:
            count = self._counts.get(key)
            self._counts[key] = 1 if count is None else count + 1
            if count is None:
                self._reasons[key] = reason
        if count is None:
            logger.info("%s: %s(%s) -> %s (%s)", site, api, requested, decided, reason)
        return key

    def add(self, key: _Key, count: int, reason: str) -> None:
        """Add ``count`` more events to a key :meth:`record` returned (even after clear)."""
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + count
            self._reasons.setdefault(key, reason)

    def clear(self) -> None:
        """Forget every count (a new report starts)."""
        with self._lock:
            self._counts.clear()
            self._reasons.clear()

    def report(self, host: str) -> MigrationReport:
        """The migration report so far, most frequent call sites first."""
        with self._lock:
            items = list(self._counts.items())
            reasons = dict(self._reasons)
        entries = [
            Entry(key[0], key[1], key[2], key[3], key[4], reasons[key], count)
            for key, count in items
        ]
        entries.sort(key=lambda e: (-e.count, e.site.filename, e.site.lineno))
        return MigrationReport(host, tuple(entries))

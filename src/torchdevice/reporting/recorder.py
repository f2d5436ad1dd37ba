"""Recording events as they happen: :class:`Recorder` counts them per call site and logs
each site once (at INFO on the ``torchdevice`` logger, as a record made at that line:
:mod:`torchdevice.logs`); :func:`api_name` is how the report names a torch function.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from torchdevice.logs import at_site, fallback_logger, redirects_logger
from torchdevice.reporting.entries import Entry, EventKind, Key, by_count
from torchdevice.reporting.report import MigrationReport
from torchdevice.sites import CallSite, Position, position_of, site_of

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["Decided", "Recorder", "api_name"]


class Decided(Protocol):
    """What the recorder reads of a decision (the redirect's
    :class:`~torchdevice.redirecting.policy.Decision` is one): the report sits below the
    redirect, so it names the fields it reads instead of importing the type."""

    @property
    def device(self) -> object: ...

    @property
    def requested(self) -> object | None: ...

    @property
    def reason(self) -> str: ...


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
        self._counts: dict[Key, int] = {}
        self._reasons: dict[Key, str] = {}
        self._positions: dict[Key, set[Position]] = {}
        # (code id, instruction offset, api id, decision id) -> [later hits, report key,
        # code, api, decision]: holding the objects keeps their ids from being reused.
        self._hits: dict[tuple[int, int, int, int], list[Any]] = {}
        self._lock = threading.Lock()

    def hit(
        self,
        frame: FrameType | None,
        api: str | Callable[..., Any],
        decision: Decided,
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
        decision: Decided,
        kind: EventKind,
    ) -> Key:
        requested = "none" if decision.requested is None else str(decision.requested)
        name = api if isinstance(api, str) else api_name(api)
        return self.record(
            site_of(frame),
            kind,
            name,
            requested,
            str(decision.device),
            decision.reason,
            None if frame is None else position_of(frame),
        )

    def record(
        self,
        site: CallSite,
        kind: EventKind,
        api: str,
        requested: str,
        decided: str,
        reason: str,
        position: Position | None = None,
    ) -> Key:
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
        return MigrationReport(host, by_count(entries))

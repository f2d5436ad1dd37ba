"""The migration report of one or many processes: :class:`MigrationReport`, :func:`merge`
(as ``coverage combine`` does) and :func:`relocate` (file names made elsewhere, named here).

Every redirect is recorded against the user's call site
(:mod:`~torchdevice.reporting.recorder`); a report is those rows
(:mod:`~torchdevice.reporting.entries`), written as text (the porting guide,
:mod:`~torchdevice.reporting.guide`) or as JSON checked against its schema
(:mod:`~torchdevice.reporting.schema`, imported on demand: it imports pydantic).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from torchdevice.reporting import guide, html_page, markdown
from torchdevice.reporting.entries import SCHEMA_VERSION, Entry, Key, by_count
from torchdevice.sites import CallSite, Position

__all__ = ["FORMATS_BY_SUFFIX", "MigrationReport", "merge", "path_mapping", "relocate"]


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
        (:mod:`torchdevice.reporting.schema`) first."""
        from torchdevice.reporting.schema import ReportSchema  # noqa: PLC0415 - pydantic on demand

        data = self.to_dict()
        ReportSchema.model_validate(data)
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

    def _counted(self) -> str:
        """``5 call(s) redirected at 3 call site(s)`` (and the processes)."""
        if not self.entries:
            return f"no call was redirected{self._processes_text()}."
        return (
            f"{self.total} call(s) redirected at {len(self.entries)} call site(s)"
            f"{self._processes_text()}"
        )

    def summary(self) -> str:
        """``cpu host, ...: 5 call(s) redirected at 3 call site(s)``: the line the
        Markdown, HTML and notebook forms open with."""
        return f"{self.host}: {self._counted()}"

    def to_text(self) -> str:
        """The report as a porting guide a person reads at the end of a run: the user's
        lines to change, grouped by file and line with their source and replacement, then
        the libraries' call sites apart (:func:`torchdevice.reporting.guide.render_text`)."""
        header = f"torchdevice migration report ({self.host}): {self._counted()}"
        return guide.render_text(self.entries, header)

    def to_markdown(self) -> str:
        """The report as a Markdown table for a pull request comment
        (:mod:`torchdevice.reporting.markdown`)."""
        return markdown.render_markdown(self.entries, self.summary())

    def to_html(self) -> str:
        """The report as one HTML page, the user's source with the redirected lines marked
        (:mod:`torchdevice.reporting.html_page`)."""
        return html_page.render_html(self.entries, self.summary())

    def _repr_html_(self) -> str:
        """A notebook shows a report as a table (IPython's rich display protocol)."""
        return html_page.render_table(self.entries, self.summary())

    def _repr_markdown_(self) -> str:
        """Front ends that render Markdown but not HTML show the Markdown table."""
        return self.to_markdown()

    def __str__(self) -> str:
        return self.to_text()

    def render(self, form: str) -> str:
        """The report in ``form``: ``json``, ``text``, ``markdown`` or ``html``."""
        renderers = {
            "json": self.to_json,
            "text": self.to_text,
            "markdown": self.to_markdown,
            "html": self.to_html,
        }
        if form not in renderers:
            raise ValueError(f"no report format {form!r}: one of {', '.join(renderers)}")
        return renderers[form]()

    def write(self, path: Path) -> None:
        """Write the format ``path``'s suffix names (:data:`FORMATS_BY_SUFFIX`: ``.json``,
        ``.md``, ``.html``; text otherwise), making the missing parent folders (the tools'
        one rule: :mod:`torchdevice.tools.outputs`)."""
        text = self.render(FORMATS_BY_SUFFIX.get(path.suffix, "text"))  # as file._prepare reads it
        if not path.parent.exists():  # (a file there: writing says "Not a directory")
            path.parent.mkdir(parents=True)
        path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


#: The format a report file is written in, by its suffix (text for any other).
FORMATS_BY_SUFFIX: Final[dict[str, str]] = {
    ".json": "json",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
}


def merge(reports: Iterable[MigrationReport], host: str | None = None) -> MigrationReport:
    """One report from several processes' reports, as ``coverage combine`` does.

    Counts add up per (call site, kind, api, requested, decided); the first reason seen
    for a row is kept. ``processes`` add up and ``ranks`` are united. ``host`` defaults to
    the first report's: the process that merges is the one that started the run.
    """
    totals: dict[Key, int] = {}
    reasons: dict[Key, str] = {}
    spans: dict[Key, set[Position]] = {}
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
    return MigrationReport(label, by_count(entries), max(processes, 1), tuple(sorted(ranks)))


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
        Entry(
            CallSite(moved(e.site.filename), e.site.lineno, e.site.function),
            e.kind,
            e.api,
            e.requested,
            e.decided,
            e.reason,
            e.count,
            e.positions,
        )
        for e in report.entries
    ]
    return merge([dataclasses.replace(report, entries=tuple(entries))])

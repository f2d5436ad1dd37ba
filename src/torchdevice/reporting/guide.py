"""The migration report as a porting guide: each line to change, and what to change it to.

A row of the report is a call the code made for one device. :func:`render_text` is the
report as a person reads it at the end of a run: the user's own files first, grouped by
file and line, each with the line's source text and what to change it to (the port's
advice, :func:`torchdevice.port.advice_for`, which is the patch's rewrite of that call),
then the libraries' call sites apart (a library that hard-codes ``"cuda"`` is worth
knowing, but it is not a line the user wrote), and on a big run only the most frequent
lines, the rest being in the JSON report.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from torchdevice.port import CHOOSE_DEVICE, PortEntry, advice_for, to_change
from torchdevice.sites import origin

__all__ = [
    "GuideEntry",
    "display_path",
    "render_text",
    "source_line",
]


class GuideEntry(PortEntry, Protocol):
    """What the guide reads of a report row (:class:`torchdevice.reporting.entries.Entry`):
    what the port reads, and what was decided, how often. A protocol, so that the rows
    sit above the guide and the package's imports run one way."""

    @property
    def decided(self) -> str: ...
    @property
    def count(self) -> int: ...


#: Lines of the user's code shown in the text report; the JSON has every row.
TEXT_LIMIT: Final = 25


def _row(entry: GuideEntry) -> str:
    site = entry.site
    return (
        f"  {display_path(site.filename)}:{site.lineno} in {site.function}(): "
        f"{entry.api}({entry.requested}) -> {entry.decided} "
        f"x{entry.count} [{entry.kind}: {entry.reason}]"
    )


def display_path(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it (the name a
    person reads in every format of the report)."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith(os.pardir) else relative


def source_line(entry: GuideEntry) -> str:
    """The text of ``entry``'s line, stripped (empty where the file cannot be read)."""
    return linecache.getline(entry.site.filename, entry.site.lineno).strip()


def render_text(entries: Sequence[GuideEntry], header: str, limit: int = TEXT_LIMIT) -> str:
    """A report's ``entries`` as a porting guide under ``header`` (see the module
    docstring)."""
    if not entries:
        return header
    own = [e for e in entries if origin(e.site.filename) is None]
    libraries: dict[str, list[GuideEntry]] = {}
    for entry in entries:
        package = origin(entry.site.filename)
        if package is not None:
            libraries.setdefault(package, []).append(entry)
    lines = [header]
    shown = sorted(own, key=lambda e: -e.count)[:limit]
    lines.extend(
        _own_section(shown, len({(e.site.filename, e.site.lineno) for e in own if to_change(e)}))
    )
    if libraries:
        lines.append(
            "Library call sites (not your lines; listed so you know where a "
            "library hard-codes a device):"
        )
        for package, found in sorted(libraries.items()):
            calls = sum(e.count for e in found)
            lines.append(f"  {package}: {len(found)} call site(s), {calls} call(s)")
            lines.extend("  " + _row(e) for e in sorted(found, key=lambda e: -e.count)[:3])
    hidden = len(own) - len(shown) + sum(max(len(v) - 3, 0) for v in libraries.values())
    if hidden:
        lines.append(
            f"... and {hidden} more call site(s): the JSON report lists every one "
            "(--report PATH.json)."
        )
    return "\n".join(lines)


def _own_section(entries: Iterable[GuideEntry], changes: int) -> list[str]:
    """Two lines per row: where and what happened; then the line's source with what to
    change it to beside it, as a comment (``change:`` alone where the source cannot be
    read or a second row shares the line)."""
    rows = sorted(entries, key=lambda e: (e.site.filename, e.site.lineno, -e.count))
    if not rows:
        return []
    lines = [
        f"Your code: {changes} line(s) to change (`torchdevice port` writes the patch). "
        "Choose the device once,",
        f"    {CHOOSE_DEVICE}",
        "  and pass it:",
    ]
    previous: tuple[str, int] | None = None
    for entry in rows:
        lines.append(_row(entry))
        here = (entry.site.filename, entry.site.lineno)
        source = source_line(entry) if here != previous else ""
        previous = here
        if source:
            lines.append(f"      {source}  # change: {advice_for(entry)}")
        else:
            lines.append(f"      change: {advice_for(entry)}")
    return lines

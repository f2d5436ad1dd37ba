"""The migration report as one HTML page: the user's source with each redirected line
marked and what to change beside it, as coverage.py's HTML report marks lines.

A table says what happened; a page of the source says where it sits in the code, which is
what a person porting a file reads it for. The page is one file with its style inline (no
script, nothing fetched), so it opens from CI artifacts or a mail as it is:

- a summary (host, calls, call sites) and the one line that chooses the device;
- an index of the user's files, each with its lines to change, linking to the file;
- per file, every line of its source, numbered; a line with rows is marked (class
  ``hit``, ``change`` when it is a line to change), with an anchor ``f<i>-L<line>``, and
  its rows beside it: what the call asked for, what it got, how often, and the change
  (the text report's advice, :mod:`~torchdevice.reporting.guide`);
- a file that cannot be read here (a report made elsewhere) as a table of its rows;
- the libraries' call sites in a table at the end: not the user's lines.

:func:`render_table` is the short form: the rows as one HTML table, which a notebook shows
for a report (``MigrationReport._repr_html_``).
"""

from __future__ import annotations

import linecache
from collections.abc import Sequence
from html import escape
from typing import Final

from torchdevice import port
from torchdevice.reporting import guide
from torchdevice.reporting.guide import GuideEntry
from torchdevice.sites import origin

__all__ = ["render_html", "render_table"]

_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
code, pre, td.src { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px; }
table { border-collapse: collapse; }
table.rows td, table.rows th, table.index td, table.index th {
  border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
table.source { width: 100%; }
table.source td { padding: 0 8px; vertical-align: top; }
td.n { color: #999; text-align: right; user-select: none; width: 3em; }
td.n a { color: inherit; text-decoration: none; }
td.src { white-space: pre; }
tr.hit td.src { background: #fff3c4; }
tr.change td.src { background: #ffd7d5; }
td.note { font-size: 13px; background: #f6f8fa; }
tr.hit td.note { border-left: 3px solid #d4a72c; }
tr.change td.note { border-left: 3px solid #cf222e; }
p.did { margin: 0; color: #555; }
p.fix { margin: 0; }
"""


def _code(text: str) -> str:
    """Advice text, whose `backticked` parts are code, as HTML."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: all of it as text
        return escape(text)
    return "".join(
        f"<code>{escape(part)}</code>" if i % 2 else escape(part) for i, part in enumerate(parts)
    )


def _did(entry: GuideEntry) -> str:
    return escape(
        f"{entry.api}({entry.requested}) → {entry.decided} x{entry.count} "
        f"[{entry.kind}: {entry.reason}]"
    )


def _note(rows: Sequence[GuideEntry]) -> str:
    return "".join(
        f'<p class="did">{_did(e)}</p><p class="fix">change: {_code(port.advice_for(e))}</p>'
        for e in rows
    )


def _rows_table(entries: Sequence[GuideEntry]) -> str:
    """Rows as a table: where, the call, what it did, the change."""
    head = "<tr><th>file:line</th><th>call</th><th>what it did</th><th>change</th></tr>"
    body = "".join(
        "<tr>"
        f"<td><code>{escape(guide.display_path(e.site.filename))}:{e.site.lineno}</code></td>"
        f"<td><code>{escape(guide.source_line(e) or e.api + '(...)')}</code></td>"
        f"<td>{_did(e)}</td><td>{_code(port.advice_for(e))}</td>"
        "</tr>"
        for e in entries
    )
    return f'<table class="rows">{head}{body}</table>'


def render_table(entries: Sequence[GuideEntry], summary: str) -> str:
    """``entries`` as one HTML table under ``summary`` (a notebook's view of a report)."""
    rows = sorted(entries, key=lambda e: (e.site.filename, e.site.lineno, -e.count))
    if not rows:
        return f"<p>{escape(summary)}</p>"
    return f"<p><strong>{escape(summary)}</strong></p>{_rows_table(rows)}"


def _file_section(number: int, filename: str, rows: Sequence[GuideEntry]) -> str:
    """One user file: its source with the marked lines, or its rows where it is unreadable."""
    name = escape(guide.display_path(filename))
    heading = f'<h2 id="f{number}">{name}</h2>'
    lines = linecache.getlines(filename)  # IPython cells too: IPython keeps them there
    by_line: dict[int, list[GuideEntry]] = {}
    for entry in rows:
        by_line.setdefault(entry.site.lineno, []).append(entry)
    if not lines or max(by_line) > len(lines):
        return (
            f"{heading}<p>The file cannot be read here (a report made elsewhere?): its "
            f"rows.</p>{_rows_table(rows)}"
        )
    body = []
    for lineno, text in enumerate(lines, start=1):
        found = by_line.get(lineno, [])
        anchor = f"f{number}-L{lineno}"
        classes = ""
        if found:
            classes = "hit change" if any(port.to_change(e) for e in found) else "hit"
        attributes = f' id="{anchor}"' + (f' class="{classes}"' if classes else "")
        source = escape(text.rstrip("\r\n"))
        body.append(
            f'<tr{attributes}><td class="n"><a href="#{anchor}">{lineno}</a></td>'
            f'<td class="src">{source}</td><td class="note">{_note(found)}</td></tr>'
        )
    return f'{heading}<table class="source">{"".join(body)}</table>'


def render_html(entries: Sequence[GuideEntry], summary: str) -> str:
    """``entries`` as the page described in the module docstring, under ``summary``."""
    own: dict[str, list[GuideEntry]] = {}
    libraries: list[GuideEntry] = []
    for entry in entries:
        if origin(entry.site.filename) is None:
            own.setdefault(entry.site.filename, []).append(entry)
        else:
            libraries.append(entry)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>torchdevice migration report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>torchdevice migration report</h1>",
        f'<p class="summary">{escape(summary)}</p>',
    ]
    if own:
        parts.append(
            "<p>Device-agnostic code chooses the device once, "
            f"<code>{escape(port.CHOOSE_DEVICE)}</code>, and passes it; "
            "<code>torchdevice port</code> writes the patch.</p>"
        )
        index = []
        files = sorted(own)
        for number, filename in enumerate(files, start=1):
            rows = own[filename]
            changes = len({e.site.lineno for e in rows if port.to_change(e)})
            index.append(
                f'<tr><td><a href="#f{number}">{escape(guide.display_path(filename))}</a></td>'
                f"<td>{changes}</td><td>{sum(e.count for e in rows)}</td></tr>"
            )
        parts.append(
            '<table class="index"><tr><th>your file</th><th>lines to change</th>'
            f"<th>calls</th></tr>{''.join(index)}</table>"
        )
        parts.extend(
            _file_section(number, filename, own[filename])
            for number, filename in enumerate(files, start=1)
        )
    if libraries:
        rows = sorted(libraries, key=lambda e: (e.site.filename, e.site.lineno))
        parts.append(
            '<h2 id="libraries">Library call sites</h2><p>Not your lines: where a library '
            f"hard-codes a device.</p>{_rows_table(rows)}"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"

"""The migration report as Markdown: one table a pull request comment can hold.

A person reviewing a port reads four things per line of their code: where it is
(``file:line``), the call as written, what torchdevice did with it, and what to write
instead. That is the table; the one line that chooses the device goes above it, and the
libraries' call sites, which are not the reader's lines, fold away below it (GitHub renders
``<details>``). The rows are the text report's (:mod:`~torchdevice.reporting.guide`):
the same advice, the same order, the same split between the user's files and libraries.

Cells are escaped for GitHub-flavoured Markdown: a ``|`` is ``\\|`` (also inside code
spans, where GFM removes the backslash), a code span is fenced with more backticks than
it holds, and a newline never ends up in a cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from torchdevice import port
from torchdevice.reporting import guide
from torchdevice.reporting.guide import GuideEntry
from torchdevice.sites import origin

__all__ = ["MARKDOWN_LIMIT", "code", "render_markdown"]

#: Rows of the user's code in one table; GitHub refuses a comment over 65,536 characters.
MARKDOWN_LIMIT: Final = 200


def _one_line(text: str) -> str:
    """``text`` with its line breaks as spaces (a table row is one line)."""
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


def _cell(text: str) -> str:
    """``text`` safe inside a table cell."""
    return _one_line(text).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as one inline code span, fenced so that backticks inside it stay text."""
    text = _one_line(text)
    run = longest = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _what_it_did(entry: GuideEntry) -> str:
    did = f"{code(f'{entry.api}({entry.requested})')} → {code(entry.decided)} x{entry.count}"
    return f"{did} ({entry.kind})" if entry.kind != "redirect" else did


def _row(entry: GuideEntry) -> str:
    where = f"{guide.display_path(entry.site.filename)}:{entry.site.lineno}"
    source = guide.source_line(entry)
    call = code(source) if source else code(f"{entry.api}(...)")
    cells = (code(where), call, _what_it_did(entry), port.advice_for(entry))
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


_HEAD: Final = "| file:line | call | what it did | change |\n| --- | --- | --- | --- |"


def render_markdown(entries: Sequence[GuideEntry], summary: str) -> str:
    """``entries`` (the report's rows, most frequent first) as Markdown under ``summary``
    (the report's one-line header: host, calls, call sites)."""
    lines = [f"### torchdevice migration report\n\n{summary}"]
    own = [e for e in entries if origin(e.site.filename) is None]
    libraries = [e for e in entries if origin(e.site.filename) is not None]
    if own:
        changes = len({(e.site.filename, e.site.lineno) for e in own if port.to_change(e)})
        lines.append(
            f"**Your code: {changes} line(s) to change.** Device-agnostic code chooses the "
            f"device once, {code(port.CHOOSE_DEVICE)}, and passes it; "
            "`torchdevice port` writes the patch."
        )
        shown = sorted(own, key=lambda e: (e.site.filename, e.site.lineno, -e.count))
        lines.append("\n".join([_HEAD, *(_row(e) for e in shown[:MARKDOWN_LIMIT])]))
        if len(shown) > MARKDOWN_LIMIT:
            lines.append(
                f"... and {len(shown) - MARKDOWN_LIMIT} more call site(s) in the JSON report."
            )
    if libraries:
        packages = sorted({origin(e.site.filename) or "" for e in libraries})
        rows = sorted(libraries, key=lambda e: (e.site.filename, e.site.lineno))
        table = "\n".join([_HEAD, *(_row(e) for e in rows[:MARKDOWN_LIMIT])])
        lines.append(
            f"<details><summary>Library call sites ({len(libraries)}, in "
            f"{', '.join(packages)}): not your lines; where a library hard-codes a "
            f"device</summary>\n\n{table}\n\n</details>"
        )
    return "\n\n".join(lines)

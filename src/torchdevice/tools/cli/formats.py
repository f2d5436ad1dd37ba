"""``torchdevice report [--format FORMAT] [-o OUT] REPORT.json...``: a JSON migration
report (or several, merged) in the form a person reads: the text guide, a Markdown table
for a pull request comment, or one HTML page of the source with the redirected lines
marked (docs/report.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from torchdevice.tools.cli.reports import merged_reports
from torchdevice.tools.cli.summaries import COMMANDS

__all__ = ["FORMATS", "main"]

#: The forms ``--format`` takes (``json`` too: what ``combine`` prints, relocated).
FORMATS = ("text", "markdown", "html", "json")


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=COMMANDS["report"][0].upper()
        + COMMANDS["report"][1:]
        + ". The source lines come from the files the report names, read here (--paths "
        "maps the names of a report made elsewhere). See docs/report.md.",
    )
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    parser.add_argument(
        "-f",
        "--format",
        choices=FORMATS,
        help="text, markdown (a table for a PR comment), html (one page: your source "
        "with the redirected lines marked) or json; default: the one the --output "
        "suffix names (.md, .html, .json), else text",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="write it to PATH (default: stdout)",
    )
    parser.add_argument(
        "--paths",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="name the files below OLD from NEW instead; repeatable",
    )
    return parser


def main(argv: Sequence[str], prog: str) -> int:
    """Read, merge and relocate the reports; print or write them in the format asked for."""
    from torchdevice.reporting.report import FORMATS_BY_SUFFIX  # noqa: PLC0415

    parser = _parser(prog)
    ns = parser.parse_args(list(argv))
    report = merged_reports(ns, parser, prog)
    form = ns.format
    if form is None:
        suffix = "" if ns.output is None else ns.output.suffix
        form = FORMATS_BY_SUFFIX.get(suffix, "text")
    text = report.render(form).rstrip("\n") + "\n"
    if ns.output is None:
        sys.stdout.write(text)
        return 0
    try:
        if not ns.output.parent.exists():
            ns.output.parent.mkdir(parents=True)
        ns.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        parser.exit(2, f"{prog}: error: cannot write {str(ns.output)!r}: {exc.strerror}\n")
    print(
        f"{prog}: {form} report of {len(report.entries)} call site(s) -> {ns.output}",
        file=sys.stderr,
    )
    return 0

"""``torchdevice combine [-o OUT] REPORT.json...``: merge JSON migration reports made by
separate runs into one (:func:`torchdevice.reporting.merge`; docs/report.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from torchdevice.tools.cli.reports import merged_reports
from torchdevice.tools.cli.summaries import COMMANDS

__all__ = ["main"]


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=COMMANDS["combine"].capitalize()
        + ": counts add up per call site, as `coverage combine` "
        "does. See docs/report.md.",
    )
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="write it to PATH (JSON if it ends in .json, Markdown if .md, HTML if .html, "
        "text otherwise; default: JSON on stdout)",
    )
    parser.add_argument(
        "--paths",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="name the files below OLD from NEW instead; repeatable",
    )
    parser.add_argument(
        "--relative-to",
        type=Path,
        metavar="DIR",
        help="name the files below DIR relative to it: a report that "
        "`torchdevice port --root` reads in another checkout",
    )
    return parser


def main(argv: Sequence[str], prog: str) -> int:
    """Read, merge and relocate the reports; write the result (or print it as JSON)."""

    parser = _parser(prog)
    ns = parser.parse_args(list(argv))
    report = merged_reports(ns, parser, prog, ns.relative_to)
    if ns.output is None:
        sys.stdout.write(report.to_json() + "\n")
        return 0
    try:
        report.write(ns.output)
    except OSError as exc:
        parser.exit(2, f"{prog}: error: cannot write {str(ns.output)!r}: {exc.strerror}\n")
    print(
        f"{prog}: {len(ns.reports)} report(s), {report.total} call(s) at "
        f"{len(report.entries)} call site(s) -> {ns.output}",
        file=sys.stderr,
    )
    return 0

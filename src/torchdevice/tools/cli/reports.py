"""Reading the JSON reports ``port --report`` and ``combine`` are given: each problem a
one-line usage error (status 2) naming the file, before any work starts."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["path_mappings", "read_reports"]


def path_mappings(given: Sequence[str], parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """``--paths OLD=NEW`` options as pairs; a usage error for one that is not."""
    from torchdevice.reporting import path_mapping  # noqa: PLC0415

    try:
        return [path_mapping(pair) for pair in given]
    except ValueError as exc:
        parser.error(str(exc))


def read_reports(paths: Sequence[Path], parser: argparse.ArgumentParser, prog: str) -> Any:
    """The JSON reports at ``paths``, merged; a one-line usage error for one it cannot read."""
    from torchdevice.reporting import merge  # noqa: PLC0415

    reports = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            parser.exit(2, f"{prog}: error: cannot read the report {str(path)!r}: {exc}\n")
        try:
            raw = json.loads(text)
        except ValueError as exc:
            why = _not_json(text, exc)
            parser.exit(2, f"{prog}: error: cannot read the report {str(path)!r}: {why}\n")
        reports.append(_read_report(raw, path, parser, prog))
    return reports[0] if len(reports) == 1 else merge(reports)


def _not_json(text: str, error: ValueError) -> str:
    """Why a report that is not JSON cannot be read: the text report, most often."""
    if text.lstrip().startswith(("{", "[")):
        return f"it is not valid JSON ({error})"
    if text.startswith("torchdevice migration report"):
        why = "it is the text report, which is for people"
    else:
        why = "it is not JSON"
    return (
        f"{why}; the tools read the JSON report, which `torchdevice run --report "
        "report.json SCRIPT` writes (a path ending in .json)"
    )


def _read_report(raw: Any, path: Path, parser: argparse.ArgumentParser, prog: str) -> Any:
    """The report in ``raw``, or a one-line usage error naming ``path`` and what is wrong."""
    from torchdevice.reporting import MigrationReport  # noqa: PLC0415

    try:
        if not isinstance(raw, dict):
            raise ValueError("it is not a JSON object")
        return MigrationReport.from_dict(raw)
    except (ValueError, KeyError, TypeError) as exc:
        why = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        parser.exit(2, f"{prog}: error: cannot read the report {str(path)!r}: {why}\n")


def merged_reports(
    ns: argparse.Namespace,
    parser: argparse.ArgumentParser,
    prog: str,
    relative_to: Path | None = None,
) -> Any:
    """The reports ``ns.reports`` names, merged and relocated (``ns.paths``,
    ``relative_to``), once ``ns.output`` is known to be writable: what ``combine`` and
    ``report`` both start from. A path that cannot be written is a usage error (status 2)
    before any report is read."""
    from torchdevice.reporting import relocate  # noqa: PLC0415
    from torchdevice.tools.outputs import unwritable  # noqa: PLC0415

    problem = None if ns.output is None else unwritable(ns.output)
    if problem:
        parser.exit(2, f"{prog}: error: cannot write {str(ns.output)!r}: {problem}\n")
    pairs = path_mappings(ns.paths, parser)
    return relocate(read_reports(ns.reports, parser, prog), pairs, relative_to)

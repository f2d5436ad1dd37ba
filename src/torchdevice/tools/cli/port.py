"""``torchdevice port [-o PATCH] (--report REPORT.json... | SCRIPT [ARGS...])``: the
migration report as a patch.

Its arguments, the report it ports (read, or made by running the script redirected in a
child) and what it says on stderr; the porting itself is :func:`torchdevice.port.patch_for`
(docs/port.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchdevice.errors import SettingsError
from torchdevice.settings import load_settings
from torchdevice.tools.cli.reports import path_mappings, read_reports
from torchdevice.tools.options import split_leading
from torchdevice.tools.outputs import unwritable

__all__ = ["main"]


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a unified diff (for `git apply`) of the edits that make your own "
        "files device-agnostic with torch.accelerator, torch.Event, torch.autocast(device.type) "
        "and one `device` per file. Library files are left alone (listed on stderr); what "
        "cannot be rewritten mechanically gets a `# torchdevice port:` comment saying why. "
        "See docs/port.md.",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="REPORT.json",
        action="append",
        help="port from this JSON report, not by running a script; repeat it "
        "to port from several reports merged",
    )
    parser.add_argument(
        "--paths",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="read the report's files below OLD from NEW instead (a report "
        "made in CI or another checkout); repeatable",
    )
    parser.add_argument(
        "--static",
        action="store_true",
        help="also port the lines of the reported files that did not run, "
        "found by reading them (marked unverified)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATCH",
        help="write the patch to PATCH (default: stdout)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="the directory the patch's paths are relative to, where you run "
        "`git apply` (default: the working directory); files outside it are "
        "skipped",
    )
    parser.add_argument("script", nargs="?", help="the script to run redirected for its report")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def main(argv: Sequence[str], prog: str) -> int:
    """Check the arguments, get the report (read, or made by running the script), write
    the patch and say what it did on stderr."""

    from torchdevice.port import patch_for  # noqa: PLC0415 - only this subcommand
    from torchdevice.port.patch import older_torch  # noqa: PLC0415
    from torchdevice.reporting import MigrationReport, relocate  # noqa: PLC0415

    parser = _parser(prog)
    ours, rest = split_leading(
        list(argv),
        takes_value={"--report", "-o", "--output", "--root", "--paths"},
        is_flag=lambda arg: arg.startswith("-") and arg != "-",
    )
    ns = parser.parse_args(ours)
    if ns.report is not None and rest:
        parser.error("give either --report REPORT.json or a SCRIPT to run, not both")
    if ns.report is None and not rest:
        parser.error("give --report REPORT.json (a JSON migration report) or a SCRIPT to run")
    problem = None if ns.output is None else unwritable(ns.output)
    if problem:  # found now, not after the script ran
        parser.exit(2, f"{prog}: error: cannot write the patch to {ns.output}: {problem}\n")
    pairs = path_mappings(ns.paths, parser)  # checked before the script runs
    if rest:  # the run's child would refuse a bad TORCHDEVICE_* value: say it here, once
        try:
            load_settings()
        except SettingsError as exc:
            parser.exit(2, f"{prog}: error: {exc}\n")
    if ns.report is not None:
        report = read_reports(ns.report, parser, prog)
    else:
        if not Path(rest[0]).exists():
            parser.exit(
                2,
                f"{prog}: can't open file {os.path.abspath(rest[0])!r}: "
                "[Errno 2] No such file or directory\n",
            )
        with tempfile.TemporaryDirectory(prefix="torchdevice-port-") as tmp:
            path = Path(tmp) / "report.json"
            # A child runs it, through the launcher, as `torchdevice run` would: the script's
            # output goes to stderr so that stdout carries the patch alone.
            done = _run_for_report(path, rest)
            if not path.exists():
                parser.exit(
                    2,
                    f"{prog}: error: the script wrote no report (exit status {done.returncode})\n",
                )
            if done.returncode:
                print(
                    f"{prog}: the script exited with status {done.returncode}; porting the "
                    "calls it made before that",
                    file=sys.stderr,
                )
            report = MigrationReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
    report = relocate(report, pairs)
    if not report.entries:
        print(
            f"{prog}: the report has no entries: the run asked for no device, so there is "
            "nothing to port",
            file=sys.stderr,
        )
    result = patch_for(report.entries, ns.root, static=ns.static)
    for filename, why in result.skipped:
        print(f"{prog}: skipped {filename}: {why}", file=sys.stderr)
    for file in result.files:
        for note in file.notes:
            print(f"{prog}: {file.path}: left a comment: {note}", file=sys.stderr)
    if ns.output is not None:
        ns.output.parent.mkdir(parents=True, exist_ok=True)  # the tools' one rule (outputs)
        ns.output.write_text(result.patch, encoding="utf-8")
    else:
        sys.stdout.write(result.patch)
    older = older_torch(result.needs[0])
    if older:  # the patch's first line says what it needs; say it where it is not there
        print(
            f"{prog}: the patched code needs torch {result.needs[0][0]}.{result.needs[0][1]} "
            f"or later (for {', '.join(result.needs[1])}); this environment has torch {older}",
            file=sys.stderr,
        )
    changed = sum(file.changed for file in result.files)
    print(f"{prog}: {changed} file(s) changed, {len(result.skipped)} skipped", file=sys.stderr)
    return 0


def _run_for_report(path: Path, rest: Sequence[str]) -> Any:
    """Run ``rest`` redirected in a child that writes its JSON report to ``path``.

    The script's output goes to stderr, so that stdout carries the patch alone; the
    child's line naming ``path`` (a temporary file, deleted once read) is left out.
    """
    command = [sys.executable, "-m", "torchdevice", "run", "--report", str(path), *rest]
    written = f"torchdevice: migration report written to {path}".encode()
    with subprocess.Popen(command, stdout=2, stderr=subprocess.PIPE) as child:
        assert child.stderr is not None
        for line in child.stderr:
            if line.rstrip(b"\r\n") != written:
                sys.stderr.write(line.decode(errors="replace"))
                sys.stderr.flush()
    return child

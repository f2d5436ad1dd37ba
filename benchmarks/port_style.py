"""How the code ``torchdevice port`` writes reads to a style checker: PEP 8 line lengths and
what ``ruff format`` would change, counted on the ported examples.

Usage::

    python benchmarks/port_style.py [--work DIR] [--json PATH] [--check]

Each script of examples/ and tests/port_scripts/ that the port tests port
(tests/test_port_examples.py, with the same short arguments) runs redirected once for its
migration report (kept in ``--work``, so a second run only ports); the port of that report
(:func:`torchdevice.port.patch_for`, what ``torchdevice port`` writes) is compared with
the original:

* ``ruff check --select E,W --line-length 99`` on the original and on the ported file: the
  count by rule the port added (E501: a line over 99 characters);
* the lines the port wrote (those of the ported file the original lacks): how many, how
  many are over 99 characters, and the longest;
* ``ruff format --diff`` on each: the lines of its diff (the port's share is the
  difference, since the examples are not all formatted to begin with).

Needs ``ruff`` (the project's dev extra). The target: the port adds no E501 and no E/W
finding of any other rule (``--check`` exits 1 otherwise).
"""

from __future__ import annotations

import argparse
import collections
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LINE_LENGTH = 99

#: The scripts and the short arguments the port tests give them.
SCRIPTS: dict[str, tuple[str, ...]] = {
    "examples/basic_tensors.py": (),
    "examples/device_info.py": (),
    "examples/events_streams_memory.py": ("--steps", "10"),
    "examples/hf_generate.py": (),
    "examples/matrix_multiplication.py": ("--size", "64"),
    "examples/mps_first.py": (),
    "examples/neural_network.py": ("--epochs", "2"),
    "examples/train_cuda.py": ("--epochs", "4", "--min-accuracy", "0.0"),
    **{f"tests/port_scripts/{p.name}": () for p in (ROOT / "tests/port_scripts").glob("*.py")},
}


def _report(work: Path, name: str, arguments: tuple[str, ...]) -> Path | None:
    """The migration report of ``name``'s redirected run in ``work`` (made once)."""
    script = work / "repo" / Path(name).name
    report = work / "reports" / f"{script.stem}.json"
    if report.exists():
        return report
    report.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / name, script)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torchdevice", "run", "--report", str(report)]
    subprocess.run(
        [*command, str(script), *arguments],
        cwd=script.parent,
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    return report if report.exists() else None


def _ruff(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *arguments, "--no-cache", "--isolated"],
        capture_output=True,
        text=True,
        check=False,
    )


def _findings(path: Path) -> collections.Counter[str]:
    done = _ruff(
        "check",
        "--select",
        "E,W",
        "--line-length",
        str(LINE_LENGTH),
        "--output-format",
        "json",
        str(path),
    )
    return collections.Counter(item["code"] for item in json.loads(done.stdout or "[]"))


def _format_diff_lines(path: Path) -> int:
    done = _ruff("format", "--diff", "--line-length", str(LINE_LENGTH), str(path))
    return sum(
        1
        for line in done.stdout.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def measure(work: Path) -> dict[str, Any]:
    """The counts for every script (see the module docstring)."""
    from torchdevice.port import patch_for  # noqa: PLC0415 - after the runs' reports
    from torchdevice.reporting import MigrationReport  # noqa: PLC0415

    (work / "repo").mkdir(parents=True, exist_ok=True)
    rows: dict[str, Any] = {}
    added: collections.Counter[str] = collections.Counter()
    for name, arguments in sorted(SCRIPTS.items()):
        report = _report(work, name, arguments)
        if report is None:
            print(f"{name}: no report (the run failed); skipped", file=sys.stderr)
            continue
        raw = json.loads(report.read_text(encoding="utf-8"))
        result = patch_for(MigrationReport.from_dict(raw).entries, work / "repo")
        mine = [f for f in result.files if f.path == Path(name).name]
        if not mine or not mine[0].changed:
            continue
        file = mine[0]
        before, after = work / "before" / file.path, work / "after" / file.path
        for path, text in ((before, file.old), (after, file.new)):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        new = _findings(after) - _findings(before)
        added += new
        old_lines = set(file.old.splitlines())
        written = [
            line[2:]
            for line in difflib.ndiff(file.old.splitlines(), file.new.splitlines())
            if line.startswith("+ ") and line[2:] not in old_lines
        ]
        rows[name] = {
            "added_findings": dict(new),
            "lines_written": len(written),
            "written_over_99": sum(len(line) > LINE_LENGTH for line in written),
            "longest_written": max((len(line) for line in written), default=0),
            "format_diff_before": _format_diff_lines(before),
            "format_diff_after": _format_diff_lines(after),
        }
    return {"scripts": rows, "added_findings": dict(added)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="keep the runs' reports here (reused)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results here")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target fails")
    ns = parser.parse_args()
    if shutil.which("ruff") is None and _ruff("--version").returncode:
        parser.exit(2, "port_style.py: needs ruff (pip install ruff)\n")
    with tempfile.TemporaryDirectory(prefix="port-style-") as tmp:
        results = measure(ns.work.resolve() if ns.work else Path(tmp))
    print(
        "| script | findings added | lines written | over 99 | longest "
        "| format diff before | after |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    totals = collections.Counter[str]()
    for name, row in results["scripts"].items():
        found = ", ".join(f"{k} {v}" for k, v in sorted(row["added_findings"].items())) or "-"
        print(
            f"| {name} | {found} | {row['lines_written']} | {row['written_over_99']} "
            f"| {row['longest_written']} | {row['format_diff_before']} "
            f"| {row['format_diff_after']} |"
        )
        for key in ("lines_written", "written_over_99", "format_diff_before", "format_diff_after"):
            totals[key] += row[key]
    longest = max((row["longest_written"] for row in results["scripts"].values()), default=0)
    found = ", ".join(f"{k} {v}" for k, v in sorted(results["added_findings"].items())) or "-"
    print(
        f"| all | {found} | {totals['lines_written']} | {totals['written_over_99']} "
        f"| {longest} | {totals['format_diff_before']} | {totals['format_diff_after']} |"
    )
    passed = not results["added_findings"]
    print(f"{'PASS' if passed else 'FAIL'}: the port adds no E/W finding (line length 99)")
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 1 if ns.check and not passed else 0


if __name__ == "__main__":
    sys.exit(main())

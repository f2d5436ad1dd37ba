"""The readable forms of the migration report: ``torchdevice report --format markdown``
(a table for a pull request comment) and ``--format html`` (the source with the redirected
lines marked), read back by parsing them, and the text report's layout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from html.parser import HTMLParser
from pathlib import Path

import pytest

from childenv import clean_env
from torchdevice.reporting import Entry, MigrationReport
from torchdevice.reporting.markdown import code
from torchdevice.sites import CallSite
from torchdevice.tools import cli

#: A script whose lines hold what Markdown and HTML must escape (``|``, ``<``, ``&``).
SCRIPT = """\
import torch
a = torch.ones(2, device="cuda")  # a <b> & c | d
for _ in range(3):
    b = a.cpu().cuda()
torch.cuda.synchronize()
print(float((a + b).sum()))
"""
HOST_DECIDES = {"cpu": "cpu:0", "simulated-mps": "mps:0"}


def _run_script(tmp_path: Path, host: str) -> Path:
    """Run SCRIPT redirected on ``host`` in a child; the JSON report it wrote."""
    (tmp_path / "rep.py").write_text(SCRIPT, encoding="utf-8")
    report = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "torchdevice", "--host", host, "--report", str(report), "rep.py"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4.0"  # as natively: ones + ones
    return report


def _torchdevice(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdevice", *args],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- Markdown --------------------------------------------------------------------------
def _cells(row: str) -> list[str]:
    """A GFM table row's cells, unescaped (``\\|`` is ``|``)."""
    inner = row.strip().removeprefix("|").removesuffix("|")
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", inner)]


def _unspan(text: str) -> str:
    """The text of one inline code span."""
    match = re.fullmatch(r"(`+) ?(.*?) ?\1", text)
    assert match, text
    return match.group(2)


def _tables(markdown: str) -> list[list[list[str]]]:
    """Every table of ``markdown`` as rows of cells (header first, separator dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in markdown.splitlines():
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            if not re.fullmatch(r"\|( --- \|)+", line):
                current.append(_cells(line))
        else:
            current = None
    return tables


@pytest.mark.slow
@pytest.mark.parametrize("host", ["cpu", "simulated-mps"])
def test_markdown_is_a_table_of_the_runs_lines(tmp_path, host):
    report = _run_script(tmp_path, host)
    data = json.loads(report.read_text())
    done = _torchdevice(tmp_path, "report", "--format", "markdown", str(report))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("### torchdevice migration report\n")
    assert f"{data['total_calls']} call(s) redirected at {data['call_sites']} call site(s)" in text
    (table,) = _tables(text)
    assert table[0] == ["file:line", "call", "what it did", "change"]
    lines = SCRIPT.splitlines()
    # The JSON report is the reference: one table row per entry, by line.
    expected = sorted(data["entries"], key=lambda row: (row["line"], -row["count"]))
    assert {r["line"] for r in expected} == {2, 4, 5}  # the script's three device lines
    assert [_unspan(cells[0]) for cells in table[1:]] == [f"rep.py:{r['line']}" for r in expected]
    # The call as written, escaped and read back whole (the `|` of line 2's comment too).
    assert [_unspan(cells[1]) for cells in table[1:]] == [
        lines[r["line"] - 1].strip() for r in expected
    ]
    assert [cells[2] for cells in table[1:]] == [
        f"`{r['api']}({r['requested']})` → `{r['decided']}` x{r['count']}"
        + ("" if r["kind"] == "redirect" else f" ({r['kind']})")
        for r in expected
    ]
    assert table[1][2] == f"`torch.ones(cuda)` → `{HOST_DECIDES[host]}` x1"
    # The change is the report's own advice, which is the port of the call.
    assert [cells[3] for cells in table[1:]] == [r["advice"] for r in expected]
    assert table[1][3] == "`torch.ones(2, device=device)`"


def test_markdown_escapes_cells_and_folds_libraries_away(tmp_path):
    script = tmp_path / "t.py"
    script.write_text('import torch\nx = torch.ones(2, device="cuda") if a|b else "``"\n')
    library = os.path.join(sysconfig.get_paths()["purelib"], "lib", "m.py")
    report = MigrationReport(
        "h",
        (
            Entry(CallSite(str(script), 2, "f"), "redirect", "torch.ones", "cuda", "cpu:0", "r", 2),
            Entry(CallSite(library, 9, "g"), "redirect", "Module.to", "cuda", "cpu:0", "r", 4),
        ),
    )
    text = report.to_markdown()
    own, libraries = _tables(text)
    assert _unspan(own[1][1]) == 'x = torch.ones(2, device="cuda") if a|b else "``"'
    assert "<details><summary>Library call sites (1, in lib)" in text
    assert _unspan(libraries[1][0]).endswith("m.py:9")
    assert text.index("<details>") > text.index(own[1][1].replace("|", "\\|"))


@pytest.mark.parametrize(
    ("text", "span"), [("a", "`a`"), ("a`b", "``a`b``"), ("`a", "`` `a ``"), ("a\nb", "`a b`")]
)
def test_code_spans_hold_their_backticks(text, span):
    assert code(text) == span


# -- HTML ------------------------------------------------------------------------------
class _Page(HTMLParser):
    """The source tables of the page: per row its id, classes and cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, object]] = []
        self.headings: list[str] = []
        self._cell: str | None = None
        self._in_source = False
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "table":
            self._in_source = attributes.get("class") == "source"
        elif tag == "tr" and self._in_source:
            classes = (attributes.get("class") or "").split()
            self.rows.append({"id": attributes.get("id"), "classes": classes, "cells": {}})
        elif tag == "td" and self._in_source:
            self._cell = attributes.get("class") or ""
            self.rows[-1]["cells"][self._cell] = ""  # type: ignore[index]
        elif tag == "p" and self._cell == "note":
            self.rows[-1]["cells"]["note"] += "\n"  # type: ignore[index]
        elif tag == "h2":
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        elif tag == "table":
            self._in_source = False
        elif tag == "h2" and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self.rows[-1]["cells"][self._cell] += data  # type: ignore[index]
        if self._heading is not None:
            self._heading.append(data)


@pytest.mark.slow
@pytest.mark.parametrize("host", ["cpu", "simulated-mps"])
def test_html_is_the_source_with_the_redirected_lines_marked(tmp_path, host):
    report = _run_script(tmp_path, host)
    rows = json.loads(report.read_text())["entries"]
    page_path = tmp_path / "out" / "report.html"
    done = _torchdevice(tmp_path, "report", str(report), "-o", str(page_path))  # by suffix
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"python -m torchdevice report: html report of {len(rows)} call site(s) -> {page_path}"
    )
    page = _Page()
    page.feed(page_path.read_text(encoding="utf-8"))
    assert page.headings == ["rep.py"]
    # Every line of the file, in order, its text read back exactly (escaping undone).
    assert [row["cells"]["src"] for row in page.rows] == SCRIPT.splitlines()  # type: ignore[index]
    assert [row["id"] for row in page.rows] == [f"f1-L{n}" for n in range(1, 7)]
    marked = {int(str(row["id"]).rsplit("L", 1)[1]): row for row in page.rows if row["classes"]}
    assert {n: row["classes"] for n, row in marked.items()} == {
        2: ["hit", "change"],
        4: ["hit", "change"],
        5: ["hit", "change"],
    }
    for lineno, marked_row in marked.items():  # beside each line: its rows, in order
        note = marked_row["cells"]["note"].strip().split("\n")  # type: ignore[index]
        here = sorted((r for r in rows if r["line"] == lineno), key=lambda r: -r["count"])
        assert note == [
            text
            for r in here
            for text in (
                f"{r['api']}({r['requested']}) → {r['decided']} x{r['count']} "
                f"[{r['kind']}: {r['reason']}]",
                "change: " + r["advice"].replace("`", ""),
            )
        ]
    unmarked = [row for row in page.rows if not row["classes"]]
    assert all(row["cells"]["note"] == "" for row in unmarked)  # type: ignore[index]


def test_html_of_a_file_that_is_not_here_lists_its_rows():
    entry = Entry(
        CallSite("/ci/gone.py", 3, "f"), "redirect", "torch.ones", "cuda", "cpu:0", "r", 1
    )
    page = MigrationReport("h", (entry,)).to_html()
    assert "cannot be read here" in page
    assert "<code>/ci/gone.py:3</code>" in page
    assert "<code>torch.ones(2, device=device)</code>" not in page  # no source: general advice
    assert "pass <code>device</code>" in page


def test_a_notebook_shows_a_report_as_a_table(tmp_path):
    script = tmp_path / "t.py"
    script.write_text('import torch\nx = torch.ones(2, device="cuda")\n')
    entry = Entry(CallSite(str(script), 2, "f"), "redirect", "torch.ones", "cuda", "cpu:0", "r", 2)
    report = MigrationReport("cpu host, test", (entry,))
    table = report._repr_html_()
    assert table.startswith("<p><strong>cpu host, test: 2 call(s) redirected at 1 call site(s)")
    assert "<td><code>x = torch.ones(2, device=&quot;cuda&quot;)</code></td>" in table
    assert report._repr_markdown_() == report.to_markdown()
    assert MigrationReport("h", ())._repr_html_() == "<p>h: no call was redirected.</p>"


# -- files and the command line ---------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "opens"),
    [
        ("r.json", '{\n  "schema_version"'),
        ("r.md", "### torchdevice migration report"),
        ("r.html", "<!DOCTYPE html>"),
        ("r.txt", "torchdevice migration report (h)"),
    ],
)
def test_write_picks_the_format_from_the_suffix(tmp_path, name, opens):
    entry = Entry(CallSite("/x.py", 1, "f"), "redirect", "torch.ones", "cuda", "cpu:0", "r", 1)
    MigrationReport("h", (entry,)).write(tmp_path / name)
    assert (tmp_path / name).read_text(encoding="utf-8").startswith(opens)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report"], "the following arguments are required: REPORT.json"),
        (["report", "--format", "pdf", "{good}"], "argument -f/--format: invalid choice: 'pdf'"),
        (["report", "{missing}"], "cannot read the report '{missing}': [Errno 2]"),
    ],
)
def test_report_usage_errors_are_one_line(tmp_path, capsys, argv, message):
    good = tmp_path / "good.json"
    good.write_text(MigrationReport("h", ()).to_json())
    paths = {"good": str(good), "missing": str(tmp_path / "missing.json")}
    with pytest.raises(SystemExit) as stop:
        cli.main([arg.format(**paths) for arg in argv])
    assert stop.value.code == 2
    assert message.format(**paths) in capsys.readouterr().err


def test_report_prints_text_by_default(tmp_path, capsys):
    good = tmp_path / "good.json"
    entry = Entry(CallSite("/x.py", 1, "f"), "redirect", "torch.ones", "cuda", "cpu:0", "r", 3)
    good.write_text(MigrationReport("h", (entry,)).to_json())
    assert cli.main(["report", str(good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torchdevice migration report (h): 3 call(s) redirected at 1 call site")


@pytest.mark.slow
def test_a_run_writes_the_format_its_report_path_names(tmp_path):
    (tmp_path / "rep.py").write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "torchdevice", "--report", "out/r.md", "rep.py"],
        cwd=tmp_path,
        env=clean_env(TORCHDEVICE_REPORT="ignored.json"),  # the option wins
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "r.md").read_text(encoding="utf-8")
    (table,) = _tables(text)
    assert [_unspan(cells[0]) for cells in table[1:]] == ["rep.py:2", "rep.py:4", "rep.py:5"]
    assert not (tmp_path / "ignored.json").exists()


def test_the_change_of_a_parenthesized_receiver_keeps_its_parenthesis(tmp_path):
    """``(x * 2).cuda()`` (the example notebook's cell) is ported to ``(x * 2).to(device)``:
    the receiver's node ends before the parenthesis, so the rename is of ``cuda`` alone."""
    import ast

    from torchdevice.port import calls as port_rules

    text = "import torch\nx = torch.ones(3)\ny = (x * 2).cuda()\nw = x . cuda()\n"
    script = tmp_path / "t.py"
    script.write_text(text)
    rows = (
        Entry(
            CallSite(str(script), 3, "f"),
            "redirect",
            "Tensor.cuda",
            "cuda",
            "cpu:0",
            "r",
            1,
            ((3, 3, 4, 18),),
        ),
        Entry(
            CallSite(str(script), 4, "f"),
            "redirect",
            "Tensor.cuda",
            "cuda",
            "cpu:0",
            "r",
            1,
            ((4, 4, 4, 14),),
        ),
    )
    ported, _ = port_rules.port_source(text, rows)
    ast.parse(ported)
    assert "y = (x * 2).to(device)\n" in ported
    assert "w = x . to(device)\n" in ported
    assert MigrationReport("h", rows[:1]).to_markdown().endswith("| `(x * 2).to(device)` |")

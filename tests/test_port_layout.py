"""The port's long lines, broken at their brackets as ``ruff format`` breaks them.

A guarded rewrite is 80 characters on its own, so ported lines went past PEP 8's 99 (up to
195 characters on the examples; ``python benchmarks/port_style.py`` measures it). Each form
below is the one ``ruff format --line-length 99`` writes for that line; where ruff is
installed, it is asked too.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from torchdevice.port.calls import port_source
from torchdevice.port.layout import WIDTH, fit, fit_changed
from torchdevice.port.table import DEVICE_EXPRESSION
from torchdevice.sites import CallSite

GUARDED = "torch.accelerator.memory_allocated() if torch.accelerator.is_available() else 0"


@pytest.mark.parametrize(
    ("line", "lines"),
    [
        (  # the last bracket pair opened, its contents on one line where they fit
            "dist.init_process_group(torch.distributed.get_default_backend_for_device(device), "
            'init_method=f"file://{tmp}/pg")',
            [
                "dist.init_process_group(",
                "    torch.distributed.get_default_backend_for_device(device), "
                'init_method=f"file://{tmp}/pg"',
                ")",
            ],
        ),
        (  # an assignment of a tuple: its own parentheses, one item a line
            "images, labels = batch.to(device, non_blocking=True), "
            "target.to(device, non_blocking=True, memory_format=fmt)",
            [
                "images, labels = (",
                "    batch.to(device, non_blocking=True),",
                "    target.to(device, non_blocking=True, memory_format=fmt),",
                ")",
            ],
        ),
        (  # a conditional value: in parentheses, split before `if` and `else` if need be
            "free, total = torch.accelerator.get_memory_info() "
            "if torch.accelerator.is_available() else (0, 0, 0)",
            [
                "free, total = (",
                "    torch.accelerator.get_memory_info() if torch.accelerator.is_available() "
                "else (0, 0, 0)",
                ")",
            ],
        ),
        (  # a trailing call stays closed: the pair before it opens
            "batch = (inputs[start : start + size].pin_memory() if "
            "torch.accelerator.is_available() else inputs[start : start + size]).to(device)",
            [
                "batch = (",
                "    inputs[start : start + size].pin_memory()",
                "    if torch.accelerator.is_available()",
                "    else inputs[start : start + size]",
                ").to(device)",
            ],
        ),
        (  # an argument still too long splits at its comparison, the operator first
            f'check(({GUARDED}) >= ({GUARDED}), "reserved >= allocated")',
            [
                "check(",
                f"    ({GUARDED})",
                f"    >= ({GUARDED}),",
                '    "reserved >= allocated",',
                ")",
            ],
        ),
    ],
)
def test_a_long_line_breaks_as_ruff_format_breaks_it(line: str, lines: list[str]) -> None:
    assert len(line) > WIDTH
    assert fit(line, "") == lines
    assert ast.dump(ast.parse(line)) == ast.dump(ast.parse("\n".join(lines)))


@pytest.mark.parametrize(
    "line",
    [
        f'print(f"memory allocated on the GPU: {{({GUARDED})}} bytes, that is all there is")',
        f"values = [({GUARDED}) + x + y + z + w + v for x, y, z, w, v in zip(a, b, c, d, e, f)]",
        f"result = sorted(items, key=lambda item, extra=0: ({GUARDED}) + item * extra - 12345)",
    ],
)
def test_what_cannot_be_broken_safely_stays_whole(line: str) -> None:
    """A long f-string has no bracket to break at; a comprehension's ``for`` and a lambda's
    parameters are not split."""
    assert len(line) > WIDTH
    assert fit(line, "") == [line]


def test_only_the_lines_the_port_made_too_long_are_broken() -> None:
    """The user's own long line, a line in a multi-line string and a line continued by a
    backslash stay as they are; the tree is the same."""
    own = "x = " + " + ".join(f"value_number_{i}" for i in range(9)) + "\n"
    old = own + 'doc = """\n' + "y " * 60 + '\n"""\nz = 1 + \\\n    2\n'
    made = f"used = ({GUARDED}), ({GUARDED})\n"
    new = old + made
    out = fit_changed(old, new)
    assert out.startswith(old)
    assert out[len(old) :] == f"used = (\n    ({GUARDED}),\n    ({GUARDED}),\n)\n"
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(new))


class _Row:
    """A report row for :func:`port_source`: the ``nth`` call of ``source`` whose text is
    ``call``, by its span."""

    def __init__(self, source: str, api: str, call: str, nth: int = 0, kind: str = "") -> None:
        found = sorted(
            (node.lineno, node.col_offset, node)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and ast.get_source_segment(source, node) == call
        )
        node = found[nth][2]
        self.site = CallSite("t.py", node.lineno, "f")
        self.kind = kind or ("device-api" if api.startswith("torch.cuda.") else "redirect")
        self.api, self.requested, self.reason = api, "cuda", "test"
        end = (node.end_lineno or 0, node.end_col_offset or 0)
        self.positions = ((node.lineno, end[0], node.col_offset, end[1]),)


#: CUDA-first lines whose ports are past 99 characters, from the examples.
LONG = textwrap.dedent("""\
    import torch
    import torch.distributed as dist


    def check(ok, what):
        print(ok, what)


    def report(losses, tmp):
        dist.init_process_group("nccl", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
        reserved, peak = torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved()
        check(torch.cuda.memory_reserved() >= torch.cuda.memory_allocated(), "reserved")
        free, total = torch.cuda.mem_get_info()
        polled = [torch.cuda.memory_allocated()]
        return reserved, peak, free, total, polled
    """)


def _ported() -> str:
    init = 'dist.init_process_group("nccl", init_method=f"file://{tmp}/pg", rank=0, world_size=1)'
    rows = [
        _Row(LONG, "torch.distributed.init_process_group", init),
        _Row(LONG, "torch.cuda.memory_reserved", "torch.cuda.memory_reserved()", 0),
        _Row(LONG, "torch.cuda.memory_reserved", "torch.cuda.memory_reserved()", 1),
        _Row(LONG, "torch.cuda.max_memory_reserved", "torch.cuda.max_memory_reserved()"),
        _Row(LONG, "torch.cuda.memory_allocated", "torch.cuda.memory_allocated()", 0),
        _Row(LONG, "torch.cuda.memory_allocated", "torch.cuda.memory_allocated()", 1),
        _Row(LONG, "torch.cuda.mem_get_info", "torch.cuda.mem_get_info()"),
    ]
    new, _ = port_source(LONG, rows)
    return new


def test_the_ported_lines_are_within_99_characters_and_mean_the_same() -> None:
    new = _ported()
    whole, _ = port_source(LONG, [], layout=False)
    assert whole == LONG
    assert max(len(line) for line in new.splitlines()) <= WIDTH, new
    assert "torch.distributed.get_default_backend_for_device(device)" in new
    assert "reserved, peak = (\n" in new  # a tuple value: one item a line


def test_ruff_finds_no_style_problem_the_port_added(tmp_path: Path) -> None:
    """``ruff check --select E,W --line-length 99``: nothing on the ported lines that the
    original did not have (skipped where ruff is not installed)."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    counts = []
    for name, text in (("before.py", LONG), ("after.py", _ported())):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        command = [ruff, "check", "--isolated", "--no-cache", "--select", "E,W"]
        done = subprocess.run(
            [*command, "--line-length", str(WIDTH), "--output-format", "json", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        counts.append(sorted(item["code"] for item in json.loads(done.stdout or "[]")))
    assert counts[1] == counts[0], counts


def test_a_choice_in_parentheses_of_its_own_leaves_none_behind() -> None:
    """``chained = (\\n    "cuda" if ... else "cpu"\\n)`` ported: ``chained = device``, not
    the device in parentheses over three lines (which ruff format would fold back)."""
    source = 'import torch\nchained = (\n    "cuda" if torch.cuda.is_available() else "cpu"\n)\n'
    row = _Row(source, "torch.cuda.is_available", "torch.cuda.is_available()", kind="device-api")
    new, _ = port_source(source, [row])
    assert new.splitlines()[1:] == [f"chained = {DEVICE_EXPRESSION}"]

"""The core of a file's port: its text, tree and byte offsets, the edits made to it and
how they merge, and the questions every rule asks of a node.

The report gives each call's exact span (``co_positions`` of the call instruction, 3.11+);
the whole file is parsed once with :mod:`ast`, and a report position is matched to the
:class:`ast.Call` node with exactly that span (``ast`` columns are UTF-8 byte offsets, as
``co_positions``' are). Edits are made to the smallest node that has to change (a device
argument, the ``.cuda`` attribute, a function name), never by a regex over the file; an
edit inside a larger edit (a ``torch.device("cuda")`` passed as an argument that is
replaced as a whole) is dropped when they merge (:func:`merge`), so edits never overlap.
Pure functions over a string: no torch, no process state.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from torchdevice.port.layout import WIDTH
from torchdevice.sites import CallSite, Position

__all__ = [
    "COMMENT_WIDTH",
    "CONTINUED",
    "MARK",
    "STATIC_REASON",
    "Edit",
    "PortEntry",
    "Source",
    "accelerator_literal",
    "apply",
    "asks_available",
    "comment_lines",
    "dotted",
    "is_check",
    "is_cpu",
    "is_device_literal",
    "keyword_of",
    "merge",
    "says",
    "single_target",
    "unwrapped",
]

#: Prefix of every comment the port writes.
MARK = "# torchdevice port:"

#: The reason of a row that ``port --static`` found by reading the file, not in a run.
STATIC_REASON = "not run: found by reading the file (port --static)"
#: The comment above a call ``port --static`` found.
UNVERIFIED = "unverified: this line did not run in the reported run(s); check it by hand"

#: A device a string literal names that the port replaces by the device variable.
_DEVICE_LITERAL = re.compile(r"(cuda|mps|xpu)(:\d+)?")

#: Calls that ask whether an accelerator is there: the tests of a device choice and of a
#: guard. ``is_built`` asks about the build; PyTorch's own MPS check nests it in the guard.
_AVAILABLE = frozenset(
    {
        "torch.cuda.is_available",
        "torch.mps.is_available",
        "torch.backends.mps.is_available",
        "torch.xpu.is_available",
        "torch.accelerator.is_available",
    }
)
_BUILT = frozenset({"torch.backends.mps.is_built", "torch.backends.cuda.is_built"})


class PortEntry(Protocol):
    """What the port reads of a report row (:class:`torchdevice.reporting.Entry`)."""

    @property
    def site(self) -> CallSite: ...
    @property
    def kind(self) -> str: ...
    @property
    def api(self) -> str: ...
    @property
    def requested(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def positions(self) -> tuple[Position, ...]: ...


#: The widest line a comment of the port's takes, indentation included: PEP 8's 99, the
#: width of the code it writes (:data:`.layout.WIDTH`).
COMMENT_WIDTH = WIDTH
#: How a comment's continuation lines start, after the indentation.
CONTINUED = "#   "


def comment_lines(indent: str, text: str, width: int = COMMENT_WIDTH) -> str:
    """``text`` as ``# torchdevice port:`` comment lines at ``indent``, each at most
    ``width`` characters where its words allow (a long code span stays whole), the ones
    after the first starting with :data:`CONTINUED`; ends with a newline."""
    return (
        textwrap.fill(
            text,
            width=width,
            initial_indent=f"{indent}{MARK} ",
            subsequent_indent=f"{indent}{CONTINUED}",
            break_long_words=False,
            break_on_hyphens=False,
        )
        + "\n"
    )


def unwrapped(text: str) -> str:
    """``text`` with each comment's continuation lines joined back to its first line, so
    that a comment reads as the one line :func:`comment_lines` was given."""
    return re.sub(rf"\n[ \t]*{re.escape(CONTINUED)}", " ", text)


def _is_message(name: str) -> bool:
    """``print``, ``warnings.warn``, ``logging.error``, ``logger.warning``...: a message."""
    head, _, tail = name.rpartition(".")
    if name in ("print", "warnings.warn"):
        return True
    return tail in {"debug", "info", "warning", "error", "critical", "exception"} and bool(head)


def dotted(node: ast.AST) -> str:
    """``torch.cuda.synchronize`` for that attribute chain; ``""`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def is_device_literal(node: ast.AST) -> bool:
    """``"cuda"``, ``"cuda:0"``, ``0`` or ``torch.device("cuda"[, 0])``: a device we replace."""
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        text = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
        return _DEVICE_LITERAL.fullmatch(text) is not None  # f"cuda:0": a literal all the same
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return _DEVICE_LITERAL.fullmatch(node.value) is not None
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Call) and dotted(node.func) == "torch.device" and node.args:
        return (
            all(is_device_literal(arg) for arg in node.args)
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        )
    return False


def keyword_of(call: ast.Call, name: str) -> ast.keyword | None:
    """The keyword argument ``name`` of ``call``, if given."""
    return next((kw for kw in call.keywords if kw.arg == name), None)


def is_cpu(node: ast.AST) -> bool:
    """``"cpu"`` or ``torch.device("cpu")``."""
    if isinstance(node, ast.Call) and dotted(node.func) == "torch.device":
        return len(node.args) == 1 and not node.keywords and is_cpu(node.args[0])
    return isinstance(node, ast.Constant) and node.value == "cpu"


def asks_available(node: ast.AST) -> bool:
    """``torch.cuda.is_available()`` (or MPS's, XPU's, any accelerator's), or several of
    them joined by ``and``."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return all(asks_available(value) for value in node.values)
    return (
        isinstance(node, ast.Call)
        and dotted(node.func) in _AVAILABLE
        and not node.args
        and not node.keywords
    )


def is_check(node: ast.AST) -> bool:
    """An availability or build check, or its negation: the test of a nested message."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    return asks_available(node) or (
        isinstance(node, ast.Call) and dotted(node.func) in _BUILT and not node.args
    )


def says(statement: ast.stmt) -> bool:
    """A message, or a check whose branches only hold messages: it tells the user why."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return _is_message(dotted(statement.value.func))
    return (
        isinstance(statement, ast.If)
        and is_check(statement.test)
        and all(says(inner) for inner in (*statement.body, *statement.orelse))
    )


def accelerator_literal(node: ast.AST) -> bool:
    """A device literal that names an accelerator (not an index, not the CPU)."""
    return is_device_literal(node) and not (
        isinstance(node, ast.Constant) and isinstance(node.value, int)
    )


def single_target(statement: ast.stmt) -> ast.expr | None:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return statement.targets[0]
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return statement.target
    return None


@dataclass(frozen=True, order=True)
class Edit:
    """Replace ``source[start:end]`` (UTF-8 byte offsets) by ``text``."""

    start: int
    end: int
    text: str = field(compare=False)


class Source:
    """A file's text, its byte offsets per line and its syntax tree, with parents, and its
    calls by span (what the device-choice rules read of it is :mod:`.choices`')."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8")
        self.tree = ast.parse(text)
        self.line_starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.parents: dict[ast.AST, ast.AST] = {}
        self.calls: dict[tuple[int, int, int, int], ast.Call] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            if isinstance(node, ast.Call) and node.end_lineno is not None:
                span = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset or 0)
                self.calls[span] = node

    def offset(self, line: int, column: int) -> int:
        """Byte offset of (1-based line, byte column)."""
        return self.line_starts[line - 1] + column

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        return self.data[self.start(node) : self.end(node)].decode("utf-8")

    def line_start(self, line: int) -> int:
        return self.line_starts[line - 1]

    def indent(self, line: int) -> str:
        raw = self.data[self.line_starts[line - 1] : self.line_starts[line]].decode("utf-8")
        return raw[: len(raw) - len(raw.lstrip())]

    def statement(self, node: ast.AST) -> ast.stmt:
        """The statement that holds ``node``."""
        while not isinstance(node, ast.stmt):
            node = self.parents[node]
        return node

    def in_function(self, node: ast.AST) -> bool:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return True
        return False

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or the module) whose body holds ``node``."""
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return self.tree

    def contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        return self.start(outer) <= self.start(inner) and self.end(inner) <= self.end(outer)


def merge(edits: Iterable[Edit]) -> list[Edit]:
    """``edits`` in order, without overlaps: by start; at one offset insertions first (in
    the order made), then the largest; an edit inside a larger one is dropped (the larger
    one replaced it as a whole), as is an insertion made twice (two rows for one call:
    ``Tensor.cuda`` and ``Module.cuda``)."""
    accepted: list[Edit] = []
    order = sorted(edits, key=lambda e: (e.start, e.end > e.start, e.start - e.end))
    for edit in order:
        if edit.start == edit.end:  # an insertion: inside another edit it is dropped
            if any(a.start < edit.start < a.end for a in accepted):
                continue
            if any(a.start == a.end == edit.start and a.text == edit.text for a in accepted):
                continue  # made twice (two rows for one call: Tensor.cuda and Module.cuda)
            accepted.append(edit)
            continue
        if any(a.start <= edit.start and edit.end <= a.end and a.end > a.start for a in accepted):
            continue  # within a larger edit, which replaced it as a whole
        if any(a.start < edit.end and edit.start < a.end and a.end > a.start for a in accepted):
            continue  # a partial overlap cannot happen with the rules' edits; be safe
        accepted.append(edit)
    return accepted


def apply(data: bytes, edits: Iterable[Edit], start: int = 0, end: int | None = None) -> str:
    """``data[start:end]`` with the merged ``edits`` made to it, as text."""
    out = bytearray()
    cursor = start
    for edit in edits:
        out += data[cursor : edit.start] + edit.text.encode("utf-8")
        cursor = max(cursor, edit.end)
    out += data[cursor:end]
    return out.decode("utf-8")

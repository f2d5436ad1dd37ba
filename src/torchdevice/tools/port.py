"""``torchdevice port``: the migration report turned into a patch.

The report knows every call the code made to a device-specific API, and the exact source
span of each (``co_positions`` of the call instruction, 3.11+). This module takes a file's
source text and its report entries and returns the device-agnostic source: pure functions,
no torch, no process state, so each rule is a unit test over a string.

How a span is read: the whole file is parsed once with :mod:`ast`, and a report position
is matched to the :class:`ast.Call` node with exactly that span (``ast`` columns are UTF-8
byte offsets, as ``co_positions``' are). Edits are made to the smallest node that has to
change (a device argument, the ``.cuda`` attribute, a function name), never by a regex
over the file; an edit inside a larger edit (a ``torch.device("cuda")`` passed as an
argument that is replaced as a whole) is dropped, so edits never overlap.

What a ``torch.cuda``/``torch.mps`` call becomes comes from :mod:`torchdevice.rewrites`, the
table the report's advice reads too: guarded where ``torch.accelerator`` raises without an
accelerator, and helpers for events and streams, so the patched file runs on the CPU as
well. What cannot be rewritten mechanically is not guessed at: a ``# torchdevice port: ...``
comment line goes above the statement and says why (see docs/port.md for the list). With
``static=True`` the files are also read for such calls that did not run
(:func:`static_entries`), ported under an "unverified" comment.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from torchdevice.callsite import CallSite
from torchdevice.reporting import Entry, EventKind, MigrationReport
from torchdevice.reporting.guide import origin
from torchdevice.rewrites import DEVICE_EXPRESSION, GUARD, HELPERS, helper_closure, rewrite_for

__all__ = [
    "DEVICE_EXPRESSION",
    "STATIC_REASON",
    "FilePort",
    "PortResult",
    "library_of",
    "port_report",
    "port_source",
    "static_entries",
    "unified_diff",
]

#: Prefix of every comment the port writes.
MARK = "# torchdevice port:"

#: Names tried, in order, for the module-level device variable (the first one free).
_DEVICE_NAMES = ("device", "target_device", "torch_device")

#: A device a string literal names that the port replaces by the device variable.
_DEVICE_LITERAL = re.compile(r"(cuda|mps|xpu)(:\d+)?")

_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


def _is_message(name: str) -> bool:
    """``print``, ``warnings.warn``, ``logging.error``, ``logger.warning``...: a message."""
    head, _, tail = name.rpartition(".")
    if name in ("print", "warnings.warn"):
        return True
    return tail in {"debug", "info", "warning", "error", "critical", "exception"} and bool(head)


@dataclass(frozen=True, order=True)
class _Edit:
    """Replace ``source[start:end]`` (UTF-8 byte offsets) by ``text``."""

    start: int
    end: int
    text: str = field(compare=False)


@dataclass(frozen=True)
class FilePort:
    """One file ported: its old and new text and the comments the port left in it."""

    path: str
    old: str
    new: str
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """Whether the port changes this file."""
        return self.old != self.new


@dataclass(frozen=True)
class PortResult:
    """A report ported: the patch, the files in it, and the files it left alone (why)."""

    patch: str
    files: tuple[FilePort, ...]
    skipped: tuple[tuple[str, str], ...]


class _Source:
    """A file's text, its byte offsets per line and its syntax tree, with parents."""

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


def _dotted(node: ast.AST) -> str:
    """``torch.cuda.synchronize`` for that attribute chain; ``""`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_device_literal(node: ast.AST) -> bool:
    """``"cuda"``, ``"cuda:0"``, ``0`` or ``torch.device("cuda"[, 0])``: a device we replace."""
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        text = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
        return _DEVICE_LITERAL.fullmatch(text) is not None  # f"cuda:0": a literal all the same
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return _DEVICE_LITERAL.fullmatch(node.value) is not None
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Call) and _dotted(node.func) == "torch.device" and node.args:
        return (
            all(_is_device_literal(arg) for arg in node.args)
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        )
    return False


def _keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((kw for kw in call.keywords if kw.arg == name), None)


class _Porter:
    """The rules, applied to one file (see the module docstring and docs/port.md)."""

    def __init__(self, source: _Source) -> None:
        self.src = source
        self.edits: list[_Edit] = []
        self.notes: dict[int, list[str]] = {}  # statement's first line -> comments
        self.uses_device = False
        self.helpers: set[str] = set()
        self.module_binding: ast.Assign | None = None
        self.var = self._choose_name()

    # -- the device variable -------------------------------------------------------------

    def _replaceable_binding(self, node: ast.AST) -> bool:
        """``device = torch.device("cuda")``: a binding the port rewrites or removes."""
        return (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and _is_device_literal(node.value)
            and isinstance(node.value, ast.Call)
        )

    def _choose_name(self) -> str:
        """The first of :data:`_DEVICE_NAMES` that nothing else in the file binds."""
        bound: dict[str, list[ast.AST]] = {}
        for node in ast.walk(self.src.tree):
            names: list[str] = []
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names = [node.id]
            elif isinstance(node, ast.arg):
                names = [node.arg]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.alias):
                names = [(node.asname or node.name).split(".")[0]]
            for name in names:
                bound.setdefault(name, []).append(node)
        for name in _DEVICE_NAMES:
            others = [
                node
                for node in bound.get(name, ())
                if not self._replaceable_binding(self.src.parents.get(node, node))
            ]
            if not others:
                return name
        return "_torchdevice_port_device"

    def device(self) -> str:
        self.uses_device = True
        return self.var

    # -- edits and notes ------------------------------------------------------------------

    def replace(self, node: ast.AST, text: str) -> None:
        self.edits.append(_Edit(self.src.start(node), self.src.end(node), text))

    def insert(self, offset: int, text: str) -> None:
        self.edits.append(_Edit(offset, offset, text))

    def note(self, node: ast.AST, text: str) -> None:
        line = self.src.statement(node).lineno
        text = " ".join(text.split())  # a multi-line expression quoted stays one comment line
        if text not in self.notes.setdefault(line, []):
            self.notes[line].append(text)

    def remove_statement(self, statement: ast.stmt, why: str | None) -> None:
        """Remove ``statement``: its whole lines, or (sharing a line) its text.

        A block is never left empty: the sole statement of a body becomes ``pass``.
        """
        first, last = statement.lineno, statement.end_lineno or statement.lineno
        start, end = self.src.start(statement), self.src.end(statement)
        alone = (
            not self.src.data[self.src.line_start(first) : start].strip()
            and not self.src.data[end : self.src.line_start(last + 1)].strip()
        )
        parent = self.src.parents.get(statement)
        sole = any(
            getattr(parent, name, None) == [statement]
            for name in ("body", "orelse", "finalbody", "handlers")
        )
        indent = self.src.indent(first)
        if not alone:
            self.edits.append(_Edit(start, end, "pass"))
            if why:
                self.note(statement, why)
            return
        text = f"{indent}{MARK} {why}\n" if why else ""
        text += f"{indent}pass\n" if sole else ""
        self.edits.append(_Edit(self.src.line_start(first), self.src.line_start(last + 1), text))

    def device_argument(self, node: ast.AST, *, as_type: bool = False) -> None:
        """Make the device argument ``node`` the device variable (or say why not)."""
        if _is_device_literal(node):
            self.replace(node, self.device() + (".type" if as_type else ""))
        elif isinstance(node, ast.Name) and node.id == self.var:
            if as_type:
                self.replace(node, self.device() + ".type")
        elif isinstance(node, ast.Constant) and node.value in ("cpu", None):
            pass  # asks for the CPU: already device-agnostic code
        elif not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
            suffix = " (its .type)" if as_type else ""
            self.note(
                node,
                f"the device here is `{self.src.segment(node)}`, which the port "
                f"cannot read: make it `{self.device()}`{suffix}",
            )
        else:  # the comment names the device variable, so the file gets one to use
            self.note(
                node,
                f"the device here is `{self.src.segment(node)}`, set elsewhere: make it "
                f"`{self.device()}`{' (its .type)' if as_type else ''} where it is defined",
            )

    def call_paren(self, call: ast.Call) -> int:
        """Byte offset just after the call's opening parenthesis."""
        offset = self.src.end(call.func)
        while self.src.data[offset : offset + 1] != b"(":
            offset += 1
        return offset + 1

    def prepend_argument(self, call: ast.Call, text: str) -> None:
        rest = ", " if call.args or call.keywords else ""
        self.insert(self.call_paren(call), text + rest)

    # -- the rules, by API ----------------------------------------------------------------

    def port(self, entry: Entry, call: ast.Call) -> None:
        api = entry.api
        func = call.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if entry.kind in ("fallback", "dtype", "override"):
            self.port_rule(entry, call)
            return
        if called != api.rsplit(".", 1)[-1]:  # `from torch.cuda import synchronize as sync`
            self.note(
                call,
                f"a call of {api} under another name (`{self.src.segment(func)}`): port it by hand",
            )
            return
        if api == "Tensor.type" or (api.startswith("torch.cuda.") and api.endswith("Tensor")):
            self.note(
                call,
                "a legacy typed tensor (torch.cuda.FloatTensor...): use "
                f".to({self.var}, dtype) or a factory with dtype= and device=",
            )
        elif api in ("Tensor.cuda", "Module.cuda"):
            self.port_cuda_method(call)
        elif api in ("Tensor.to", "Module.to"):
            self.port_to(call)
        elif api == "torch.device":
            self.port_torch_device(call)
        elif api == "torch.load":
            self.port_load(call)
        elif api in ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast"):
            self.port_amp(call, "torch.autocast", "device_type")
        elif api in ("torch.amp.GradScaler", "torch.cuda.amp.GradScaler"):
            self.port_amp(call, "torch.amp.GradScaler", "device")
        elif api in ("torch.distributed.init_process_group", "torch.distributed.new_group"):
            if entry.requested.startswith("device_id="):
                self.note(
                    call,
                    "device_id binds NCCL to one GPU, and torch rejects the CPU as "
                    "one: pass it only when device.type == 'cuda'",
                )
            else:
                self.port_backend(call)
        elif api == "torch.nn.parallel.DistributedDataParallel":
            why = "device_ids/output_device name a GPU, and CPU modules reject them"
            self.note(call, f"{why}: leave them out for a module already on `{self.device()}`")
        elif api.startswith("torch.distributed."):
            pass  # a collective: device-agnostic once the backend is (staged on MPS-like hosts)
        elif api.startswith(("torch.cuda.", "torch.mps.")):
            self.port_facade(api, call)
        elif api.startswith("torch.backends.mps."):
            if not (api.endswith(".is_available") and self.port_guard(call, "MPS")):
                why = "torch.accelerator.is_available() asks about any accelerator"
                self.note(call, f"{api}() asks about MPS alone; {why}")
        else:  # factories, torch.Generator, random ops: a device= argument
            argument = _keyword(call, "device")
            if argument is not None:
                self.device_argument(argument.value)
            elif api == "torch.Generator" and call.args:
                self.device_argument(call.args[0])
            else:  # a positional device: a string or torch.device(...) (an int is a size)
                named = [
                    arg
                    for arg in call.args
                    if _is_device_literal(arg)
                    and not (isinstance(arg, ast.Constant) and isinstance(arg.value, int))
                ]
                for arg in named:
                    self.device_argument(arg)
                if not named:
                    self.note(call, f"{api} is given its device in a way the port cannot see")

    def port_rule(self, entry: Entry, call: ast.Call) -> None:
        """Rows of torchdevice's own rules rather than of a device request."""
        if entry.kind == "override":  # "cpu:-1" is torchdevice's; natively it is "cpu"
            for node in [*call.args, *(keyword.value for keyword in call.keywords)]:
                if isinstance(node, ast.Constant) and node.value == "cpu:-1":
                    self.replace(node, '"cpu"')
        elif entry.kind == "dtype":
            self.note(
                call,
                "MPS has no float64: torchdevice narrowed it to float32 here; "
                "use float32 (or keep this on the CPU) for MPS",
            )
        else:
            where = entry.requested.split(",")[0].split(":")[0]  # "mps:0, float32" -> mps
            self.note(
                call,
                f"{entry.api} has no kernel on {where}: "
                "torchdevice reran it on the CPU; natively, move it to the CPU "
                "(or set PYTORCH_ENABLE_MPS_FALLBACK=1 on a Mac)",
            )

    def port_cuda_method(self, call: ast.Call) -> None:
        if not isinstance(call.func, ast.Attribute):
            self.note(call, "a .cuda() call through an alias: use .to(device)")
            return
        self.edits.append(
            _Edit(self.src.end(call.func.value), self.src.end(call.func), ".to")
        )  # `.cuda` -> `.to` (the receiver and the arguments are edited apart)
        positional = call.args[0] if call.args else None
        keyword = _keyword(call, "device")
        if positional is not None:
            self.device_argument(positional)
        elif keyword is not None:
            self.device_argument(keyword.value)  # .to(device=...) takes it too
        else:
            self.prepend_argument(call, self.device())

    def port_to(self, call: ast.Call) -> None:
        keyword = _keyword(call, "device")
        if keyword is not None:
            self.device_argument(keyword.value)
        elif call.args:
            self.device_argument(call.args[0])

    def port_torch_device(self, call: ast.Call) -> None:
        if not _is_device_literal(call):
            kind = call.args[0] if call.args else None
            if (
                isinstance(kind, ast.Constant)
                and isinstance(kind.value, str)
                and kind.value in ("cuda", "mps", "xpu")
            ):  # torch.device("cuda", index): the index stays, the type is the device's
                self.replace(kind, self.device() + ".type")
            else:
                self.device_argument(call)  # a note: its argument comes from elsewhere
            return
        parent = self.src.parents.get(call)
        if (
            isinstance(parent, ast.Assign)
            and self._replaceable_binding(parent)
            and isinstance(parent.targets[0], ast.Name)
            and parent.targets[0].id == self.var
        ):
            if self.src.in_function(parent):  # `device = torch.device("cuda")` in a function
                self.remove_statement(parent, None)  # the module-level one is the same device
                self.uses_device = True
            else:  # the module's own binding (each of them, if it has several) chooses
                self.module_binding = self.module_binding or parent
                self.replace(call, DEVICE_EXPRESSION)
            return
        self.replace(call, self.device())

    def port_load(self, call: ast.Call) -> None:
        keyword = _keyword(call, "map_location")
        if keyword is not None:
            if isinstance(keyword.value, (ast.Dict, ast.Lambda)):
                self.note(call, f"map_location is a mapping or function: map to `{self.var}`")
            else:
                self.device_argument(keyword.value)
            return
        close = self.src.end(call) - 1
        before = self.src.data[:close].rstrip()
        comma = "" if before.endswith((b",", b"(")) else ", "
        self.insert(close, f"{comma}map_location={self.device()}")

    def port_amp(self, call: ast.Call, target: str, keyword_name: str) -> None:
        if _dotted(call.func) != target and _dotted(call.func).startswith("torch.cuda.amp."):
            self.replace(call.func, target)  # torch.cuda.amp.X(...) takes no device type
            self.prepend_argument(call, self.device() + ".type")
            return
        keyword = _keyword(call, keyword_name)
        node = keyword.value if keyword is not None else (call.args[0] if call.args else None)
        if node is None:
            self.prepend_argument(call, self.device() + ".type")
        else:
            self.device_argument(node, as_type=True)

    def port_backend(self, call: ast.Call) -> None:
        keyword = _keyword(call, "backend")
        node = keyword.value if keyword is not None else (call.args[0] if call.args else None)
        if isinstance(node, ast.Constant) and node.value in ("nccl", "gloo", "mccl", "xccl"):
            replacement = f"torch.distributed.get_default_backend_for_device({self.device()})"
            self.replace(node, replacement)
        elif node is not None:
            self.note(
                call,
                f"the backend `{self.src.segment(node)}` is set elsewhere: use "
                f"torch.distributed.get_default_backend_for_device({self.var})",
            )

    def port_facade(self, api: str, call: ast.Call) -> None:
        """A device-module call, by :data:`torchdevice.rewrites.DEVICE_API` (the table the
        report's advice reads too)."""
        name = api.split(".", 2)[2]
        if name == "is_available" and self.port_guard(call, api.split(".")[1].upper()):
            return
        rewrite = rewrite_for(api)
        form = rewrite.form
        if form == "expression" and name == "stream" and (len(call.args) != 1 or call.keywords):
            form = "none"  # torch.cuda.stream(None) or keywords: no plain stream to enter
        if form == "none":
            why = rewrite.why if rewrite.form == "none" else "a stream given by keyword"
            self.note(call, f"{api}(): {why}")
            return
        if rewrite.comment:
            self.note(call, rewrite.why)
        if form == "expression":
            self.replace(call, rewrite.code(self._arguments(call), self.device()))
            return
        if name in ("manual_seed", "manual_seed_all") and self._seeded_before(call):
            self.remove_statement(
                self.src.statement(call),
                f"removed `{self.src.segment(call)}`: "
                "the torch.manual_seed above seeds every device",
            )
            return
        self.replace(call.func, rewrite.target)
        if form == "helper":
            self.helpers.add(rewrite.target)
        elif form == "context" and call.args:
            self.insert(self.src.start(call.args[0]), "(")
            self.insert(self.src.end(call.args[0]), f") if {GUARD} else None")
        elif form == "statement" and self._alone(call):
            indent = self.src.indent(call.lineno)
            self.insert(self.src.start(call), f"if {GUARD}:\n{indent}    ")
        elif form in ("guarded", "statement"):
            self.insert(self.src.start(call), "(")
            self.insert(self.src.end(call), f" if {GUARD} else {rewrite.neutral})")

    def _arguments(self, call: ast.Call) -> str:
        """The text between a call's parentheses."""
        return self.src.data[self.call_paren(call) : self.src.end(call) - 1].decode("utf-8")

    def _alone(self, call: ast.Call) -> bool:
        """Whether ``call`` is a whole statement on lines of its own (not ``a; b``, not
        the body of a one-line ``if``)."""
        statement = self.src.statement(call)
        if not (isinstance(statement, ast.Expr) and statement.value is call):
            return False
        first, last = statement.lineno, statement.end_lineno or statement.lineno
        before = self.src.data[self.src.line_start(first) : self.src.start(statement)]
        after = self.src.data[self.src.end(statement) : self.src.line_start(last + 1)]
        return not before.strip() and not after.split(b"#", 1)[0].strip()

    def _seeded_before(self, call: ast.Call) -> bool:
        """Whether the statement before ``call``'s is ``torch.manual_seed`` of the same
        arguments: the rewrite would repeat it."""
        statement = self.src.statement(call)
        if not (isinstance(statement, ast.Expr) and statement.value is call):
            return False
        parent = self.src.parents.get(statement)
        blocks = ("body", "orelse", "finalbody")
        body: list[ast.stmt] = next(
            (getattr(parent, name) for name in blocks if statement in getattr(parent, name, ())), []
        )
        index = body.index(statement)
        if index == 0:
            return False
        previous = body[index - 1]
        return (
            isinstance(previous, ast.Expr)
            and isinstance(previous.value, ast.Call)
            and _dotted(previous.value.func) == "torch.manual_seed"
            and self._arguments(previous.value).strip() == self._arguments(call).strip()
        )

    def port_guard(self, call: ast.Call, what: str) -> bool:
        """Remove ``if not torch.cuda.is_available(): sys.exit(...)`` (or ``raise``).

        Such a guard says "this code needs CUDA" (or MPS); once ported, it does not: on a host
        without an accelerator it runs on the CPU. Only an ``if`` whose whole test is the
        negated call, with no ``else`` and a body that only exits or raises (after printing
        or logging why), is removed
        (and ``assert torch.cuda.is_available()``); any other use keeps its meaning
        through ``torch.accelerator.is_available()``.
        """
        parent = self.src.parents.get(call)
        if isinstance(parent, ast.Assert) and parent.test is call:
            why = f"removed `assert {self.src.segment(call)}`: the ported code runs on the CPU"
            self.remove_statement(parent, why + " when there is no accelerator")
            return True
        if not (isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)):
            return False
        guard = self.src.parents.get(parent)
        if not (isinstance(guard, ast.If) and guard.test is parent and not guard.orelse):
            return False
        *before, last = guard.body
        exits = isinstance(last, ast.Raise) or (
            isinstance(last, ast.Expr)
            and isinstance(last.value, ast.Call)
            and _dotted(last.value.func) in _EXITS
        )
        says = all(  # what comes before the exit only tells the user why
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Call)
            and _is_message(_dotted(statement.value.func))
            for statement in before
        )
        if not (exits and says):
            return False
        why = f"removed a guard that exits without {what}: the ported code runs on `{self.var}`"
        self.remove_statement(guard, why + ", the CPU when there is no accelerator")
        return True

    # -- putting it together --------------------------------------------------------------

    def finish(self) -> list[_Edit]:
        """The edits, without overlaps, with the device binding and the comments added."""
        preamble = self._preamble()
        if preamble is not None:
            self.edits.append(preamble)
        for line, notes in self.notes.items():
            offset = self.src.line_start(line)
            indent = self.src.indent(line)
            text = "".join(f"{indent}{MARK} {note}\n" for note in notes)
            self.edits.append(_Edit(offset, offset, text))
        accepted: list[_Edit] = []
        # By start; at one offset insertions first (in the order made), then the largest.
        order = sorted(self.edits, key=lambda e: (e.start, e.end > e.start, e.start - e.end))
        for edit in order:
            if edit.start == edit.end:  # an insertion: inside another edit it is dropped
                if any(a.start < edit.start < a.end for a in accepted):
                    continue
                if any(a.start == a.end == edit.start and a.text == edit.text for a in accepted):
                    continue  # made twice (two rows for one call: Tensor.cuda and Module.cuda)
                accepted.append(edit)
                continue
            if any(
                a.start <= edit.start and edit.end <= a.end and a.end > a.start for a in accepted
            ):
                continue  # within a larger edit, which replaced it as a whole
            if any(a.start < edit.end and edit.start < a.end and a.end > a.start for a in accepted):
                continue  # a partial overlap cannot happen with the rules above; be safe
            accepted.append(edit)
        return accepted

    def _preamble(self) -> _Edit | None:
        """``device = ...`` and the helpers, after the module's leading imports (with
        ``import torch`` and the helpers' imports where the file lacks them)."""
        binding = self.uses_device and self.module_binding is None
        helpers, imports = helper_closure(self.helpers)
        if not binding and not helpers:
            return None
        body = self.src.tree.body
        last_import: ast.stmt | None = None
        imported: set[str] = set()
        for statement in body:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                last_import = statement
                if isinstance(statement, ast.Import):
                    imported.update(
                        f"import {alias.name}" for alias in statement.names if alias.asname is None
                    )
            elif (
                not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))
                and last_import is not None
            ):
                break
        needed = [line for line in ("import torch", *imports) if line not in imported]
        text = "".join(f"{line}\n" for line in needed)
        if binding:
            text += f"\n{self.var} = {DEVICE_EXPRESSION}\n"
        if helpers:
            text += "".join(f"\n\n{HELPERS[name]}" for name in helpers) + "\n\n"
        if last_import is None:
            return _Edit(0, 0, text.lstrip("\n") + "\n")
        after = self.src.line_start((last_import.end_lineno or last_import.lineno) + 1)
        return _Edit(after, after, text)


def _calls_of(source: _Source, entry: Entry) -> Iterator[ast.Call]:
    """The call nodes of ``entry``: by exact span, or (3.10: no spans) by line and name."""
    if entry.positions:
        for line, end_line, column, end_column in entry.positions:
            call = source.calls.get((line, end_line, column, end_column))
            if call is not None:
                yield call
        return
    name = entry.api.rsplit(".", 1)[-1]
    for (line, _end, _column, _end_column), call in source.calls.items():
        func = call.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if line == entry.site.lineno and called == name:
            yield call


#: The reason of a row that ``port --static`` found by reading the file, not in a run.
STATIC_REASON = "not run: found by reading the file (port --static)"
_UNVERIFIED = "unverified: this line did not run in the reported run(s); check it by hand"
_BACKEND_CALLS = frozenset({"init_process_group", "new_group"})
#: Calls that take a device as their first positional argument, and their report names.
_POSITIONAL = {
    "to": "Tensor.to",
    "autocast": "torch.autocast",
    "GradScaler": "torch.amp.GradScaler",
}


def _static_api(call: ast.Call) -> tuple[str, str, str] | None:
    """(kind, api, requested) of a call written for one device, read from the source alone;
    ``None`` for any other call."""
    name = _dotted(call.func)
    if name.startswith(("torch.cuda.", "torch.mps.")):
        kind = "redirect" if ".amp." in name else "device-api"
        return kind, name, name.split(".")[1]
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda":
        return "redirect", "Tensor.cuda", "cuda"
    if name == "torch.device" and _is_device_literal(call):
        return "redirect", "torch.device", "cuda"
    called = call.func.attr if isinstance(call.func, ast.Attribute) else name
    if called in _BACKEND_CALLS:
        backend = _keyword(call, "backend")
        node = backend.value if backend is not None else (call.args[0] if call.args else None)
        if isinstance(node, ast.Constant) and node.value == "nccl":
            return "redirect", f"torch.distributed.{called}", "nccl"
        return None
    for keyword in ("device", "map_location", "device_type"):
        found = _keyword(call, keyword)
        if found is not None and _is_device_literal(found.value):
            named = {"map_location": "torch.load", "device_type": "torch.autocast"}
            api = named.get(keyword) or (name if name.startswith("torch.") else f"torch.{called}")
            return "redirect", api, "cuda"
    first = call.args[0] if call.args else None
    if called in _POSITIONAL and isinstance(first, ast.Constant) and _is_device_literal(first):
        return "redirect", _POSITIONAL[called], str(first.value)
    return None


def static_entries(filename: str, text: str, known: Iterable[Entry]) -> list[Entry]:
    """Rows for the calls in ``text`` written for one device that no row of ``known`` covers:
    lines the run did not execute (a branch not taken, a script that stopped early).

    Each is marked :data:`STATIC_REASON`, and the port leaves a comment that it is
    unverified above it. Found with :mod:`ast`, the way Ascend's transfer tool reads a
    project: the same calls a run reports, without their arguments' values.
    """
    tree = ast.parse(text)
    covered = {span for entry in known for span in entry.positions}
    covered_lines = {entry.site.lineno for entry in known if not entry.positions}
    rows: list[Entry] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node.end_lineno is None:
            continue
        span = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset or 0)
        if span in covered or node.lineno in covered_lines:
            continue
        found = _static_api(node)
        if found is None:
            continue
        kind, api, requested = found
        site = CallSite(filename, node.lineno, "?")
        event = cast(EventKind, kind)  # "redirect" or "device-api", from _static_api
        rows.append(Entry(site, event, api, requested, "?", STATIC_REASON, 1, (span,)))
    return rows


def port_source(text: str, entries: Iterable[Entry]) -> tuple[str, tuple[str, ...]]:
    """The device-agnostic version of ``text`` and the comments left in it.

    ``entries`` are the report's rows for this file; a row whose span matches no call in
    ``text`` (the file changed since the run) is skipped.
    """
    source = _Source(text)
    porter = _Porter(source)
    seen: set[tuple[int, str]] = set()
    for entry in entries:
        for call in _calls_of(source, entry):
            if (id(call), entry.api) in seen:  # one rule per call and API
                continue
            seen.add((id(call), entry.api))
            porter.port(entry, call)
            if entry.reason == STATIC_REASON:
                porter.note(call, _UNVERIFIED)
    edits = porter.finish()
    out = bytearray()
    cursor = 0
    for edit in edits:
        out += source.data[cursor : edit.start] + edit.text.encode("utf-8")
        cursor = max(cursor, edit.end)
    out += source.data[cursor:]
    notes = tuple(note for line in sorted(porter.notes) for note in porter.notes[line])
    return out.decode("utf-8"), notes


def unified_diff(label: str, old: str, new: str) -> str:
    """A ``git apply``-able diff of one file, ``label`` relative to the repository root."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        f"a/{label}",
        f"b/{label}",
    )
    text = ""
    for line in lines:
        text += line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
    return f"diff --git a/{label} b/{label}\n{text}" if text else ""


def library_of(path: str) -> str | None:
    """The library ``path`` belongs to (``None``: it is the user's own file).

    The report's own reading (:func:`torchdevice.reporting.guide.origin`: the standard library and
    installed packages, torch included), plus torchdevice itself wherever it lives, and
    code that is no file at all (``<string>``, ``<stdin>``).
    """
    if path.startswith("<") or not os.path.isfile(path):
        return "no file"
    package = origin(path)
    if package is not None:
        return package
    import torchdevice  # noqa: PLC0415 - its own package directory, editable installs too

    own = os.path.dirname(os.path.abspath(torchdevice.__file__)) + os.sep
    return "torchdevice" if os.path.abspath(path).startswith(own) else None


def port_report(report: MigrationReport, root: Path, *, static: bool = False) -> PortResult:
    """Port every user file of ``report`` below ``root``; the patch's paths are relative to it.

    A relative file name (a portable report, :func:`torchdevice.reporting.relocate`) is read
    relative to ``root``.
    """
    root = root.resolve()
    by_file: dict[str, list[Entry]] = {}
    for entry in report.entries:
        filename = entry.site.filename
        if not filename.startswith("<") and not os.path.isabs(filename):
            filename = str(root / filename)  # a portable report: relative to the root
        by_file.setdefault(filename, []).append(entry)
    files: list[FilePort] = []
    skipped: list[tuple[str, str]] = []
    for filename in sorted(by_file):
        library = library_of(filename)
        if library is not None:
            skipped.append((filename, f"not yours ({library})"))
            continue
        path = Path(filename).resolve()
        try:
            label = path.relative_to(root).as_posix()
        except ValueError:
            skipped.append((filename, f"outside {root}"))
            continue
        try:
            old = path.read_text(encoding="utf-8")
            rows = by_file[filename]
            if static:
                rows = [*rows, *static_entries(filename, old, rows)]
            new, notes = port_source(old, rows)
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            skipped.append((filename, f"cannot be ported: {exc}"))
            continue
        files.append(FilePort(label, old, new, notes))
    patch = "".join(unified_diff(file.path, file.old, file.new) for file in files)
    return PortResult(patch, tuple(files), tuple(skipped))

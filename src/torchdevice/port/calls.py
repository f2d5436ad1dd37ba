"""The rules ``torchdevice port`` applies to one file's source text, and the advice they give.

The report knows every call the code made to a device-specific API, and the exact source
span of each (``co_positions`` of the call instruction, 3.11+). This module takes a file's
source text and its report rows and returns the device-agnostic source: pure functions,
no torch, no process state, so each rule is a unit test over a string. It sits below the
report (:mod:`torchdevice.reporting.guide` reads it for its advice) and the ``port`` tool
(:mod:`torchdevice.port.patch`), so that what the report tells a user to write at a line is
what the patch writes there: :func:`advise` is the port of that one call.

How a span is read: the whole file is parsed once with :mod:`ast`, and a report position
is matched to the :class:`ast.Call` node with exactly that span (``ast`` columns are UTF-8
byte offsets, as ``co_positions``' are). Edits are made to the smallest node that has to
change (a device argument, the ``.cuda`` attribute, a function name), never by a regex
over the file; an edit inside a larger edit (a ``torch.device("cuda")`` passed as an
argument that is replaced as a whole) is dropped, so edits never overlap.

What a ``torch.cuda``/``torch.mps``/``torch.backends.mps`` call becomes comes from
:mod:`torchdevice.port.table`: guarded where ``torch.accelerator`` raises without an
accelerator, and helpers for events and streams, so the patched file runs on the CPU as
well. The device-choice idiom (``"cuda" if torch.cuda.is_available() else "cpu"``, its
``torch.device(...)``, MPS and ``if``/``elif`` forms) becomes the one ``device``. A stand-in
value that feeds arithmetic (0 bytes of memory without an accelerator) is said so in a
comment, and a division by it is guarded. What cannot be rewritten mechanically is not
guessed at: a ``# torchdevice port: ...`` comment line goes above the statement and says
why (see docs/port.md for the list).
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from torchdevice.port.table import (
    DEVICE_EXPRESSION,
    GUARD,
    HELPERS,
    LEGACY_TYPE_DTYPES,
    SINCE,
    device_type_of,
    helper_closure,
    rewrite_for,
)
from torchdevice.sites import CallSite, Position

__all__ = [
    "COMMENT_WIDTH",
    "CONTINUED",
    "MARK",
    "STATIC_REASON",
    "PortEntry",
    "advise",
    "comment_lines",
    "dotted",
    "is_device_literal",
    "keyword_of",
    "minimum_torch",
    "port_source",
    "ported_call",
    "unwrapped",
]

#: Prefix of every comment the port writes.
MARK = "# torchdevice port:"

#: The reason of a row that ``port --static`` found by reading the file, not in a run.
STATIC_REASON = "not run: found by reading the file (port --static)"
_UNVERIFIED = "unverified: this line did not run in the reported run(s); check it by hand"

#: Names tried, in order, for the module-level device variable (the first one free), after
#: the name of the module's own device binding, when it has one.
_DEVICE_NAMES = ("device", "target_device", "torch_device")

#: A device a string literal names that the port replaces by the device variable.
_DEVICE_LITERAL = re.compile(r"(cuda|mps|xpu)(:\d+)?")

_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
#: The modules a removed guard may have been the only user of (for its exit).
_EXIT_MODULES = frozenset({"sys", "os"})

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


#: The widest line a comment of the port's takes, indentation included (black's 88 would
#: split most of them; 100 is this project's own width).
COMMENT_WIDTH = 100
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


def _is_cpu(node: ast.AST) -> bool:
    """``"cpu"`` or ``torch.device("cpu")``."""
    if isinstance(node, ast.Call) and dotted(node.func) == "torch.device":
        return len(node.args) == 1 and not node.keywords and _is_cpu(node.args[0])
    return isinstance(node, ast.Constant) and node.value == "cpu"


def _asks_available(node: ast.AST) -> bool:
    """``torch.cuda.is_available()`` (or MPS's, XPU's, any accelerator's), or several of
    them joined by ``and``."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return all(_asks_available(value) for value in node.values)
    return (
        isinstance(node, ast.Call)
        and dotted(node.func) in _AVAILABLE
        and not node.args
        and not node.keywords
    )


def _is_check(node: ast.AST) -> bool:
    """An availability or build check, or its negation: the test of a nested message."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    return _asks_available(node) or (
        isinstance(node, ast.Call) and dotted(node.func) in _BUILT and not node.args
    )


def _says(statement: ast.stmt) -> bool:
    """A message, or a check whose branches only hold messages: it tells the user why."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return _is_message(dotted(statement.value.func))
    return (
        isinstance(statement, ast.If)
        and _is_check(statement.test)
        and all(_says(inner) for inner in (*statement.body, *statement.orelse))
    )


def _kept_branch(check: ast.If) -> list[ast.stmt] | None:
    """The work of an availability check whose other branch only says why (PyTorch's own
    MPS page: ``if not torch.backends.mps.is_available():`` its nested ``is_built()``
    messages, ``else:`` the work; or ``if ...is_available(): work else: message``): the
    branch a ported file keeps, which runs on the device or the CPU. ``None`` for any
    other ``if``, and for one written on a single line."""
    test = check.test
    if not check.orelse:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if not _asks_available(test.operand):
            return None
        says, work = check.body, check.orelse
    elif _asks_available(test):
        work, says = check.body, check.orelse
    else:
        return None
    if check.body[0].lineno == check.lineno or not all(_says(s) for s in says):
        return None
    if len(work) == 1 and isinstance(work[0], ast.If) and work is check.orelse:
        return None  # an elif chain: not the check's form
    return None if all(_says(s) for s in work) else work


def _accelerator_literal(node: ast.AST) -> bool:
    """A device literal that names an accelerator (not an index, not the CPU)."""
    return is_device_literal(node) and not (
        isinstance(node, ast.Constant) and isinstance(node.value, int)
    )


def _is_choice(node: ast.AST) -> bool:
    """The device-choice idiom: ``"cuda" if torch.cuda.is_available() else "cpu"``, chained
    (``... else "mps" if torch.backends.mps.is_available() else "cpu"``), its branches
    ``torch.device(...)`` or the whole of it in one."""
    if isinstance(node, ast.Call) and dotted(node.func) == "torch.device":
        return len(node.args) == 1 and not node.keywords and _is_choice(node.args[0])
    return (
        isinstance(node, ast.IfExp)
        and _asks_available(node.test)
        and _accelerator_literal(node.body)
        and (_is_cpu(node.orelse) or _is_choice(node.orelse))
    )


def _chosen_strings(node: ast.AST) -> bool:
    """Whether a choice expression gives strings (``"cuda"``), not ``torch.device`` objects."""
    if isinstance(node, ast.IfExp):
        return isinstance(node.body, ast.Constant) and _chosen_strings(node.orelse)
    return isinstance(node, ast.Constant)


def _single_target(statement: ast.stmt) -> ast.expr | None:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return statement.targets[0]
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return statement.target
    return None


def _choice_statement(top: ast.If) -> tuple[str, bool] | None:
    """``if torch.cuda.is_available(): device = "cuda"`` ``[elif ...]`` ``else: device =
    "cpu"``: the target's text and whether the values are strings; ``None`` for any other
    ``if``."""
    target: str | None = None
    strings = True
    node = top
    while True:
        if not (_asks_available(node.test) and len(node.body) == 1):
            return None
        assigned = _single_target(node.body[0])
        value = getattr(node.body[0], "value", None)
        if assigned is None or value is None or not _accelerator_literal(value):
            return None
        text = ast.unparse(assigned)
        if target not in (None, text):
            return None
        target = text
        strings = strings and isinstance(value, ast.Constant)
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        if len(node.orelse) != 1:
            return None
        last = node.orelse[0]
        last_target = _single_target(last)
        last_value = getattr(last, "value", None)
        if last_target is None or last_value is None or ast.unparse(last_target) != target:
            return None
        if not _is_cpu(last_value):
            return None
        return target, strings and isinstance(last_value, ast.Constant)


@dataclass(frozen=True)
class _Choice:
    """A device choice in the file: the node that is replaced (an expression, or a whole
    ``if`` statement), the statement that holds it, what it is bound to."""

    node: ast.AST
    statement: ast.stmt
    target: str | None  # the bound name or attribute (``device``, ``self.device``), if bound
    strings: bool  # it chose strings ("cuda"), whose comparisons with strings need .type
    whole_statement: bool  # the if/elif form: the statement itself is replaced


@dataclass(frozen=True, order=True)
class _Edit:
    """Replace ``source[start:end]`` (UTF-8 byte offsets) by ``text``."""

    start: int
    end: int
    text: str = field(compare=False)


class _Source:
    """A file's text, its byte offsets per line and its syntax tree, with parents, and what
    the rules read of the whole file (its device choices, the device variable's name)."""

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
        self.choices = self._find_choices()
        self.var = self._choose_name()

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

    # -- what the rules read of the whole file ------------------------------------------

    def _find_choices(self) -> list[_Choice]:
        """Every device choice, outermost first (a choice inside a larger one is its part)."""
        found: list[_Choice] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.If) and not self._is_elif(node):
                chosen = _choice_statement(node)
                if chosen is not None:
                    found.append(_Choice(node, node, chosen[0], chosen[1], True))
            elif isinstance(node, (ast.IfExp, ast.Call)) and _is_choice(node):
                parent = self.parents.get(node)
                if parent is not None and _is_choice(parent):
                    continue  # part of a larger choice
                statement = self.statement(node)
                target = _single_target(statement)
                bound = target is not None and getattr(statement, "value", None) is node
                inner = node.args[0] if isinstance(node, ast.Call) else node
                found.append(
                    _Choice(
                        node,
                        statement,
                        ast.unparse(target) if bound and target is not None else None,
                        isinstance(node, ast.IfExp) and _chosen_strings(inner),
                        False,
                    )
                )
        return [
            c for c in found if not any(o is not c and self.contains(o.node, c.node) for o in found)
        ]

    def _is_elif(self, node: ast.If) -> bool:
        parent = self.parents.get(node)
        return isinstance(parent, ast.If) and parent.orelse == [node]

    def choice_at(self, node: ast.AST) -> _Choice | None:
        """The device choice ``node`` is part of."""
        return next((c for c in self.choices if self.contains(c.node, node)), None)

    def _binds_a_device(self, statement: ast.AST) -> bool:
        """``device = torch.device("cuda")``, or a device choice: a binding the port
        rewrites or removes."""
        if any(
            choice.target is not None and self.contains(choice.statement, statement)
            for choice in self.choices
        ):
            return True
        return (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and is_device_literal(statement.value)
            and isinstance(statement.value, ast.Call)
        )

    def _choose_name(self) -> str:
        """The name of the module's own device binding when it has one, else the first of
        :data:`_DEVICE_NAMES` that nothing else in the file binds."""
        bound: dict[str, list[ast.AST]] = {}
        for node in ast.walk(self.tree):
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
        # The module's statements, with the work of a module-level availability check
        # that only says why in its other branch: the port keeps it at module level.
        module_level = [
            statement
            for top in self.tree.body
            for statement in ((_kept_branch(top) or [top]) if isinstance(top, ast.If) else [top])
        ]
        own = [
            statement.targets[0].id
            for statement in module_level
            if isinstance(statement, ast.Assign)
            and isinstance(statement.targets[0], ast.Name)
            and self._binds_a_device(statement)
        ] + [
            choice.target
            for choice in self.choices
            if choice.target is not None
            and choice.target.isidentifier()
            and not self.in_function(choice.statement)
        ]
        for name in (*own, *_DEVICE_NAMES):
            others = [
                node
                for node in bound.get(name, ())
                if not self._binds_a_device(self.statement(node) if node in self.parents else node)
            ]
            if not others:
                return name
        return "_torchdevice_port_device"


class _Porter:
    """The rules, applied to one file (see the module docstring and docs/port.md)."""

    def __init__(self, source: _Source) -> None:
        self.src = source
        self.edits: list[_Edit] = []
        self.notes: dict[int, list[str]] = {}  # statement's first line -> comments
        self.removed: list[str] = []  # why each removed statement went
        self.uses_device = False
        self.helpers: set[str] = set()
        self.module_binding: ast.AST | None = None
        #: Lines made less indented by :meth:`unwrap_check`, by how many characters.
        self.dedent: dict[int, int] = {}
        #: What the port removed (statements, a check's test and its other branch): an
        #: import only they used goes too (:meth:`_imports_left_unused`).
        self.removed_nodes: list[ast.AST] = []
        #: Why a rewrite that fixed its line wrote what it wrote (``str(device)`` for a
        #: device name): said in the report's advice, not left as a comment on the line.
        self.explained: list[str] = []
        self.var = source.var
        self.aliases = {
            choice.target for choice in source.choices if choice.target not in (None, self.var)
        }

    def device(self) -> str:
        self.uses_device = True
        return self.var

    # -- edits and notes ------------------------------------------------------------------

    def replace(self, node: ast.AST, text: str) -> None:
        self.edits.append(_Edit(self.src.start(node), self.src.end(node), text))

    def insert(self, offset: int, text: str) -> None:
        self.edits.append(_Edit(offset, offset, text))

    def wrap(self, node: ast.AST, before: str, after: str) -> None:
        self.insert(self.src.start(node), before)
        self.insert(self.src.end(node), after)

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
        indent = self.indent(first)
        self.removed_nodes.append(statement)
        if why and why not in self.removed:
            self.removed.append(why)
        if not alone:
            self.edits.append(_Edit(start, end, "pass"))
            if why:
                self.note(statement, why)
            return
        text = comment_lines(indent, why) if why else ""
        text += f"{indent}pass\n" if sole else ""
        self.edits.append(_Edit(self.src.line_start(first), self.src.line_start(last + 1), text))

    def device_argument(self, node: ast.AST, *, as_type: bool = False) -> None:
        """Make the device argument ``node`` the device variable (or say why not)."""
        if _is_choice(node) or is_device_literal(node):
            self.replace(node, self.device() + (".type" if as_type else ""))
        elif isinstance(node, ast.Name) and node.id == self.var:
            if as_type:
                self.replace(node, self.device() + ".type")
        elif self.src.segment(node) in self.aliases:  # bound to a device choice: the device
            if as_type:
                self.insert(self.src.end(node), ".type")
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

    def port(self, entry: PortEntry, call: ast.Call) -> None:
        api = entry.api
        func = call.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if entry.kind in ("fallback", "dtype", "override"):
            self.port_rule(entry, call)
            return
        if self.port_choice(call):
            return
        if called != api.rsplit(".", 1)[-1]:  # `from torch.cuda import synchronize as sync`
            self.note(
                call,
                f"a call of {api} under another name (`{self.src.segment(func)}`): port it by hand",
            )
            return
        if api == "Tensor.pin_memory":
            self.port_pin_method(call)
        elif entry.requested == "pin_memory=True":
            self.port_pin_keyword(call)
        elif api in ("Tensor.type", "torch.set_default_tensor_type") or (
            api.startswith("torch.cuda.") and api.endswith("Tensor")
        ):
            self.port_legacy_type(api, call)
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
        elif api.startswith(("torch.cuda.", "torch.mps.", "torch.backends.mps.")):
            self.port_facade(api, call)
        else:  # factories, torch.Generator, random ops: a device= argument
            argument = keyword_of(call, "device")
            if argument is not None:
                self.device_argument(argument.value)
            elif api == "torch.Generator" and call.args:
                self.device_argument(call.args[0])
            else:  # a positional device: a string or torch.device(...) (an int is a size)
                named = [arg for arg in call.args if _accelerator_literal(arg)]
                for arg in named:
                    self.device_argument(arg)
                if not named:
                    self.note(call, f"{api} is given its device in a way the port cannot see")

    def port_rule(self, entry: PortEntry, call: ast.Call) -> None:
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

    def port_choice(self, call: ast.Call) -> bool:
        """A call that is part of a device choice (its availability test, one of its
        ``torch.device`` values): the choice becomes the one device (see docs/port.md)."""
        choice = self.src.choice_at(call)
        if choice is None:
            return False
        target = choice.target
        if target is None:  # an argument, a default: the device itself
            self.replace(choice.node, self.device())
            return True
        if target == self.var and self.src.in_function(choice.statement):
            self.remove_statement(choice.statement, None)  # the module's device is the same
            self.uses_device = True
        elif target == self.var:
            self.module_binding = choice.statement
            if choice.whole_statement:
                self.replace(choice.statement, f"{self.var} = {DEVICE_EXPRESSION}")
            else:
                self.replace(choice.node, DEVICE_EXPRESSION)
        elif choice.whole_statement:
            self.replace(choice.statement, f"{target} = {self.device()}")
        else:
            self.replace(choice.node, self.device())
        if choice.strings:
            self._compare_types(choice)
        return True

    def _compare_types(self, choice: _Choice) -> None:
        """A choice of strings is a ``torch.device`` once ported: its comparisons with a
        string (``device == "cuda"``) compare its ``.type``."""
        compared = []
        for node in ast.walk(self.src.tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if not any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands):
                continue
            for operand in operands:
                if (
                    isinstance(operand, (ast.Name, ast.Attribute))
                    and self.src.segment(operand) == choice.target
                ):
                    self.insert(self.src.end(operand), ".type")
                    compared.append(node)
        if compared:
            self.note(
                choice.statement,
                f"`{choice.target}` is a torch.device now, no string: its comparisons with "
                "a string compare its .type",
            )

    def port_cuda_method(self, call: ast.Call) -> None:
        if not isinstance(call.func, ast.Attribute):
            self.note(call, "a .cuda() call through an alias: use .to(device)")
            return
        name_end = self.src.end(call.func)  # the attribute's name ends the attribute
        self.edits.append(
            _Edit(name_end - len(call.func.attr), name_end, "to")
        )  # `cuda` -> `to`: only the name, so `(x * 2).cuda()` keeps its parenthesis (the
        # receiver ends before it) and the receiver and the arguments are edited apart
        positional = call.args[0] if call.args else None
        keyword = keyword_of(call, "device")
        if positional is not None:
            self.device_argument(positional)
        elif keyword is not None:
            self.device_argument(keyword.value)  # .to(device=...) takes it too
        else:
            self.prepend_argument(call, self.device())

    def port_to(self, call: ast.Call) -> None:
        keyword = keyword_of(call, "device")
        if keyword is not None:
            self.device_argument(keyword.value)
        elif call.args:
            self.device_argument(call.args[0])

    def port_pin_method(self, call: ast.Call) -> None:
        """``x.pin_memory()`` raises without an accelerator: pinned where there is one."""
        if not isinstance(call.func, ast.Attribute):
            self.note(call, "a .pin_memory() call through an alias: pin only with an accelerator")
            return
        value = call.func.value
        receiver = self.src.segment(value)
        if not isinstance(value, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            receiver = f"({receiver})"
        self.wrap(call, "(", f" if {GUARD} else {receiver})")

    def port_pin_keyword(self, call: ast.Call) -> None:
        """``pin_memory=True`` raises without an accelerator: pinned where there is one."""
        keyword = keyword_of(call, "pin_memory")
        if keyword is None:
            self.note(call, "pin_memory is asked for in a way the port cannot see")
            return
        if isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
            self.replace(keyword.value, GUARD)
        else:
            self.note(call, f"pin_memory=True needs an accelerator: make it `{GUARD}`")

    def port_torch_device(self, call: ast.Call) -> None:
        if not is_device_literal(call):
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
            and self.src._binds_a_device(parent)
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
        keyword = keyword_of(call, "map_location")
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
        if dotted(call.func) != target and dotted(call.func).startswith("torch.cuda.amp."):
            self.replace(call.func, target)  # torch.cuda.amp.X(...) takes no device type
            self.prepend_argument(call, self.device() + ".type")
            return
        keyword = keyword_of(call, keyword_name)
        node = keyword.value if keyword is not None else (call.args[0] if call.args else None)
        if node is None:
            self.prepend_argument(call, self.device() + ".type")
        else:
            self.device_argument(node, as_type=True)

    def port_backend(self, call: ast.Call) -> None:
        keyword = keyword_of(call, "backend")
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
        """A device-module call, by :func:`torchdevice.port.table.rewrite_for` (the table the
        report's advice falls back on)."""
        name = api.rsplit(".", 1)[1]
        if name in ("is_available", "is_built") and self.port_guard(call):
            return
        rewrite = rewrite_for(api)
        form = rewrite.form
        if form == "expression" and name == "stream" and (len(call.args) != 1 or call.keywords):
            form = "none"  # torch.cuda.stream(None) or keywords: no plain stream to enter
        if name == "get_device_properties" and self._total_memory(call):
            return
        if form == "none" and rewrite.form != "none":
            self.note(call, f"{api}(): a stream given by keyword")
            return
        if form == "none":
            keep = f'keep it behind `if {self.var}.type == "{device_type_of(api)}":`'
            self.note(call, f"{api}(): {rewrite.why}; {keep}")
            return
        if form == "keep":
            self.note(call, f"{api}(): {rewrite.why}")
            return
        if rewrite.comment:  # the rewrite fixes the line: the why is the advice's alone
            self.explained.append(" ".join(rewrite.why.split()))
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
            indent = self.indent(call.lineno)
            self.insert(self.src.start(call), f"if {GUARD}:\n{indent}    ")
        elif form in ("guarded", "statement"):
            self.wrap(call, "(", f" if {GUARD} else {rewrite.neutral})")
            if form == "guarded":
                text = f"{rewrite.target}({self._arguments(call)})"
                self.neutral_feeds(call, text, rewrite.neutral)

    def port_legacy_type(self, api: str, call: ast.Call) -> None:
        """The legacy typed tensors: ``torch.cuda.FloatTensor(...)`` and ``t.type(...)``
        get a note; ``torch.set_default_tensor_type(torch.cuda.HalfTensor)`` (or the
        class's dotted name, ``"torch.cuda.FloatTensor"``) becomes the two calls torch
        names as its replacement, the dtype and the device, on the statement's line."""
        if api != "torch.set_default_tensor_type":
            self.note(
                call,
                "a legacy typed tensor (torch.cuda.FloatTensor...): use "
                f".to({self.var}, dtype) or a factory with dtype= and device=",
            )
            return
        argument = call.args[0] if len(call.args) == 1 and not call.keywords else None
        named = ""
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            named = argument.value
        elif argument is not None:
            named = dotted(argument)
        prefix = "torch.cuda."
        dtype = LEGACY_TYPE_DTYPES.get(named[len(prefix) :]) if named.startswith(prefix) else None
        replacement = f"torch.set_default_dtype(dtype) and torch.set_default_device({self.var})"
        if dtype is None or not self._alone(call):
            self.note(call, f"torch.set_default_tensor_type is deprecated: use {replacement}")
            return
        self.replace(
            call,
            f"torch.set_default_dtype(torch.{dtype}); torch.set_default_device({self.device()})",
        )

    def _total_memory(self, call: ast.Call) -> bool:
        """``get_device_properties(i).total_memory``: the accelerator's total memory, which
        ``torch.accelerator.get_memory_info(i)[1]`` gives."""
        parent = self.src.parents.get(call)
        if not (isinstance(parent, ast.Attribute) and parent.attr == "total_memory"):
            return False
        arguments = [self.src.segment(arg) for arg in call.args] + [
            self.src.segment(keyword.value) for keyword in call.keywords
        ]
        text = f"torch.accelerator.get_memory_info({', '.join(arguments)})[1]"
        self.replace(parent, f"({text} if {GUARD} else 0)")
        self.neutral_feeds(parent, text, "0")
        return True

    def neutral_feeds(self, node: ast.AST, text: str, neutral: str) -> None:
        """Where the stand-in ``neutral`` (what ``text`` is without an accelerator) feeds
        arithmetic, say so; guard each division by a name bound to it."""
        statement = self.src.statement(node)
        inline = False
        walker: ast.AST = node
        while walker is not statement:
            walker = self.src.parents[walker]
            if isinstance(walker, (ast.BinOp, ast.AugAssign)) or (
                isinstance(walker, ast.Subscript) and neutral == "{}"
            ):
                inline = True
        names: set[str] = set()
        value = getattr(statement, "value", None)
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(e.id for e in elements if isinstance(e, ast.Name))
        guarded: list[str] = []
        feeds = False
        for use in ast.walk(self.src.scope(statement)):
            if getattr(use, "lineno", 0) <= (statement.end_lineno or statement.lineno):
                continue
            if isinstance(use, ast.BinOp):
                divisor = use.right
                base = divisor.value if isinstance(divisor, ast.Subscript) else divisor
                used = {n.id for n in ast.walk(use) if isinstance(n, ast.Name)} & names
                if (
                    isinstance(use.op, (ast.Div, ast.FloorDiv, ast.Mod))
                    and isinstance(base, ast.Name)
                    and base.id in names
                ):
                    zero = "0.0" if isinstance(use.op, ast.Div) else "0"
                    self.wrap(use, "(", f" if {self.src.segment(divisor)} else {zero})")
                    guarded.append(self.src.segment(divisor))
                elif used:
                    feeds = True
            elif isinstance(use, ast.AugAssign) or (
                isinstance(use, ast.Subscript) and neutral == "{}"
            ):
                feeds = feeds or any(
                    isinstance(n, ast.Name) and n.id in names for n in ast.walk(use)
                )
        if not (inline or feeds or guarded):
            return
        said = f"without an accelerator `{text}` is {neutral} here (a stand-in, not a measurement)"
        if guarded:
            divisors = ", ".join(f"`{divisor}`" for divisor in dict.fromkeys(guarded))
            said += f"; the division(s) by {divisors} below are guarded"
        elif inline and isinstance(self.src.parents.get(node), ast.BinOp):
            said += "; guard what is computed from it"
        self.note(statement, said)

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
            and dotted(previous.value.func) == "torch.manual_seed"
            and self._arguments(previous.value).strip() == self._arguments(call).strip()
        )

    def port_guard(self, call: ast.Call) -> bool:
        """Remove the guard ``call`` is part of: ``assert torch.cuda.is_available()``, or
        ``if not torch.cuda.is_available():`` (or MPS's) whose body only says why (messages,
        and PyTorch's own nested ``is_built()`` check with its two messages) and exits.

        Such a guard says "this code needs CUDA" (or MPS); once ported, it does not: on a
        host without an accelerator it runs on the CPU. Any other use keeps its meaning
        through ``torch.accelerator.is_available()``.
        """
        parent = self.src.parents.get(call)
        if isinstance(parent, ast.Assert) and parent.test is call:
            why = f"removed `assert {self.src.segment(call)}`: the ported code runs on the CPU"
            self.remove_statement(parent, why + " when there is no accelerator")
            return True
        node: ast.AST = call
        while node in self.src.parents and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            node = self.src.parents[node]
            if (
                isinstance(node, ast.If)
                and self.src.contains(node.test, call)
                and _kept_branch(node) is not None
            ):
                self.unwrap_check(node)
                return True
            if isinstance(node, ast.If) and self._exit_guard(node):
                test = node.test.operand  # type: ignore[attr-defined]
                what = "MPS" if "mps" in self.src.segment(test) else "CUDA"
                why = (
                    f"removed a guard that exits without {what}: the ported code runs on "
                    f"`{self.var}`, the CPU when there is no accelerator"
                )
                self.remove_statement(node, why)
                return True
        return False

    def unwrap_check(self, check: ast.If) -> None:
        """Keep the work of an availability check that only says why in its other branch
        (:func:`_kept_branch`), one level less indented, and remove the rest: ported, the
        work runs on the device, or on the CPU when there is none, where the check printed
        "not built with MPS" and did nothing."""
        kept = _kept_branch(check)
        assert kept is not None
        indent = self.src.indent(check.lineno)
        delta = len(self.src.indent(kept[0].lineno)) - len(indent)
        what = "MPS" if "mps" in self.src.segment(check.test) else "CUDA"
        why = (
            f"removed a check that only said why there is no {what}: its work runs on "
            f"`{self.var}`, the CPU when there is no accelerator"
        )
        if why not in self.removed:
            self.removed.append(why)
        self.removed_nodes += [check.test, *(check.body if kept is check.orelse else check.orelse)]
        header = comment_lines(indent, why)
        last = check.end_lineno or check.lineno
        if kept is check.orelse:
            first = self._else_line(check, check.body[-1]) + 1
            self.edits.append(
                _Edit(self.src.line_start(check.lineno), self.src.line_start(first), header)
            )
        else:
            first = (check.test.end_lineno or check.lineno) + 1
            self.edits.append(
                _Edit(self.src.line_start(check.lineno), self.src.line_start(first), header)
            )
            end_of_work = kept[-1].end_lineno or kept[-1].lineno
            self.edits.append(
                _Edit(
                    self.src.line_start(end_of_work + 1),
                    self.src.line_start((check.end_lineno or check.lineno) + 1),
                    "",
                )
            )
            last = end_of_work
        in_strings = self._string_lines(check)
        prefix = self.src.indent(kept[0].lineno)[len(indent) :].encode("utf-8")
        for line in range(first, last + 1):
            start = self.src.line_start(line)
            if line in in_strings or self.src.data[start : start + delta] != prefix:
                continue  # a line inside a string, or a blank one
            self.edits.append(_Edit(start, start + delta, ""))
            self.dedent[line] = delta

    def _else_line(self, check: ast.If, before: ast.stmt) -> int:
        """The line of ``check``'s ``else:`` (or ``elif``), after the statement ``before``."""
        indent = self.src.indent(check.lineno)
        line = (before.end_lineno or before.lineno) + 1
        while line <= (check.end_lineno or check.lineno):
            text = self.src.data[self.src.line_start(line) : self.src.line_starts[line]].decode()
            if text.startswith(indent) and text[len(indent) :].startswith(("else", "elif")):
                return line
            line += 1
        raise AssertionError("an if with an else has an else line")  # pragma: no cover

    def _string_lines(self, node: ast.AST) -> set[int]:
        """The lines inside ``node`` that continue a multi-line string (left as they are)."""
        lines: set[int] = set()
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Constant, ast.JoinedStr)) and (
                isinstance(inner, ast.JoinedStr) or isinstance(inner.value, str)
            ):
                end = inner.end_lineno or inner.lineno
                lines.update(range(inner.lineno + 1, end + 1))
        return lines

    def indent(self, line: int) -> str:
        """The indentation of ``line`` once ported (less where a check was unwrapped)."""
        return self.src.indent(line)[self.dedent.get(line, 0) :]

    def _exit_guard(self, guard: ast.If) -> bool:
        """``if not <available>():`` with no ``else``, whose body says why and exits."""
        return (
            isinstance(guard.test, ast.UnaryOp)
            and isinstance(guard.test.op, ast.Not)
            and _asks_available(guard.test.operand)
            and not guard.orelse
            and self._ends_in_exit(guard.body)
        )

    def _ends_in_exit(self, block: list[ast.stmt]) -> bool:
        *before, last = block
        if not all(self._says(statement) for statement in before):
            return False
        if isinstance(last, ast.Raise) or (
            isinstance(last, ast.Expr)
            and isinstance(last.value, ast.Call)
            and dotted(last.value.func) in _EXITS
        ):
            return True
        return (
            isinstance(last, ast.If)
            and _is_check(last.test)
            and bool(last.orelse)
            and self._ends_in_exit(last.body)
            and self._ends_in_exit(last.orelse)
        )

    def _says(self, statement: ast.stmt) -> bool:
        return _says(statement)

    # -- putting it together --------------------------------------------------------------

    def finish(self, *, preamble: bool = True) -> list[_Edit]:
        """The edits, without overlaps, with the device binding and the comments added
        (``preamble=False``: the call's own edits alone, for its advice)."""
        if preamble:
            self._imports_left_unused()
        edits = list(self.edits)
        if preamble:
            binding = self._preamble()
            if binding is not None:
                edits.append(binding)
            for line, notes in self.notes.items():
                offset = self.src.line_start(line)
                indent = self.indent(line)
                text = "".join(comment_lines(indent, note) for note in notes)
                edits.append(_Edit(offset, offset, text))
        accepted: list[_Edit] = []
        # By start; at one offset insertions first (in the order made), then the largest.
        order = sorted(edits, key=lambda e: (e.start, e.end > e.start, e.start - e.end))
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
        first_line = 1 if last_import is None else (last_import.end_lineno or 0) + 1
        if helpers:  # two blank lines after them, with those the file already has there
            text += "".join(f"\n\n{HELPERS[name]}" for name in helpers)
            text += "\n" * max(0, 2 - self._blank_lines_from(first_line))
        if last_import is None:
            return _Edit(0, 0, text.lstrip("\n") + ("" if helpers else "\n"))
        after = self.src.line_start(first_line)
        return _Edit(after, after, text)

    def _imports_left_unused(self) -> None:
        """Remove a module-level ``import sys`` (or ``import os``) that only the removed
        statements used: the guard's ``sys.exit`` (``os._exit``). Other imports stay: the
        ported code may use them again (``torch``), or import them for their effect."""
        if not self.removed_nodes:
            return
        for statement in self.src.tree.body:
            if not (
                isinstance(statement, ast.Import)
                and len(statement.names) == 1
                and statement.names[0].asname is None
                and statement.names[0].name in _EXIT_MODULES
            ):
                continue
            name = statement.names[0].name
            uses = [
                node
                for node in ast.walk(self.src.tree)
                if isinstance(node, ast.Name) and node.id == name
            ]
            if uses and all(
                any(self.src.contains(gone, use) for gone in self.removed_nodes) for use in uses
            ):
                self._remove_import(statement)

    def _remove_import(self, statement: ast.stmt) -> None:
        """Remove an import's line, and a blank line after it that would otherwise open
        the file or double the one before it."""
        first, last = statement.lineno, statement.end_lineno or statement.lineno
        before = (
            b""
            if first == 1
            else self.src.data[self.src.line_start(first - 1) : self.src.line_start(first)]
        )
        blank_after = self._blank_lines_from(last + 1) > 0
        end = last + 2 if blank_after and (first == 1 or not before.strip()) else last + 1
        if self.src.data[self.src.line_start(first) : self.src.start(statement)].strip():
            self.remove_statement(statement, None)  # shares its line: the text alone
            return
        self.removed_nodes.append(statement)
        self.edits.append(_Edit(self.src.line_start(first), self.src.line_start(end), ""))

    def _blank_lines_from(self, line: int) -> int:
        """How many blank lines the file has from ``line`` on."""
        count = 0
        while line + count < len(self.src.line_starts):
            start = self.src.line_start(line + count)
            if self.src.data[start : self.src.line_starts[line + count]].strip():
                break
            count += 1
        return count

    def outcome(self, call: ast.Call) -> tuple[str | None, tuple[str, ...]]:
        """What porting ``call`` did: the ported code of the call and of what the port
        changed around it, on one line (``None``: nothing changed; ``""``: removed), and
        the comments it left."""
        statement = self.src.statement(call)
        low, high = self.src.start(statement), self.src.end(statement)
        mine = [e for e in self.finish(preamble=False) if e.start <= high and e.end >= low]
        notes = [
            *self.removed,
            *(n for line in sorted(self.notes) for n in self.notes[line]),
            *self.explained,
        ]
        notes = list(dict.fromkeys(notes))
        if not mine:
            return None, tuple(notes)
        start = min(self.src.start(call), *(e.start for e in mine))
        end = max(self.src.end(call), *(e.end for e in mine))
        out = bytearray()
        cursor = start
        for edit in mine:
            out += self.src.data[cursor : edit.start] + edit.text.encode("utf-8")
            cursor = max(cursor, edit.end)
        out += self.src.data[cursor:end]
        lines = [line.strip() for line in out.decode("utf-8").splitlines()]
        code = " ".join(line for line in lines if line and not line.startswith("#"))
        return ("" if code == "pass" else code), tuple(notes)


def _calls_of(source: _Source, entry: PortEntry) -> Iterator[ast.Call]:
    """The call nodes of ``entry``: by exact span, or (no spans: 3.10, or a row of a rule
    that records none) by line and name."""
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


def port_source(text: str, entries: Iterable[PortEntry]) -> tuple[str, tuple[str, ...]]:
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


#: Parsed files, by their text: the report asks for the advice of many rows of one file.
_PARSED: dict[str, _Source] = {}


def ported_call(text: str, entry: PortEntry) -> tuple[str | None, tuple[str, ...]] | None:
    """What the port writes for ``entry``'s call in the file whose source is ``text``: the
    call's ported code on one line (``None``: unchanged; ``""``: removed) and the comments
    it leaves; ``None`` where no call of the row is in ``text`` (or it does not parse)."""
    source = _PARSED.get(text)
    if source is None:
        try:
            source = _Source(text)
        except (SyntaxError, ValueError):
            return None
        if len(_PARSED) >= 8:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[text] = source
    call = next(_calls_of(source, entry), None)
    if call is None:
        return None
    porter = _Porter(source)
    porter.port(entry, call)
    return porter.outcome(call)


def advise(text: str, entry: PortEntry) -> str | None:
    """:func:`ported_call` as the report's one line of advice: the ported code in
    backquotes, then the comments; ``None`` where :func:`ported_call` has no answer."""
    ported = ported_call(text, entry)
    if ported is None:
        return None
    code, notes = ported
    said = "; ".join(notes)
    if code is None:
        return said or "no change: device-agnostic already"
    if not code:
        return said or "remove it"
    return f"`{code}`" + (f" ({said})" if said else "")


def minimum_torch(old: str, new: str) -> tuple[tuple[int, int], tuple[str, ...]]:
    """The oldest torch that runs what the port wrote into ``old`` to make ``new``, and the
    APIs that need it (:data:`torchdevice.port.table.SINCE`)."""

    def used(text: str) -> set[str]:
        return {
            name
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Attribute) and (name := dotted(node)) in SINCE
        }

    added = used(new) - used(old)
    if not added:
        return (0, 0), ()
    version = max(SINCE[name] for name in added)
    return version, tuple(sorted(name for name in added if SINCE[name] == version))

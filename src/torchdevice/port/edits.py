"""The edits one file's port makes, and what they add up to: the patched text, the
device binding and helpers above the code, and one call's ported line for its advice.

Every rule (:mod:`.choices`, :mod:`.guards`, :mod:`.device_api`, :mod:`.calls`) records
its changes here, never in the text: replacements of the smallest node that has to change,
insertions, removed statements (a block is never left empty), and ``# torchdevice port:``
comments above a statement. :meth:`Edits.finish` merges them (:func:`.source.merge`) with
the module-level ``device = ...`` binding and the helpers the rewrites need.
"""

from __future__ import annotations

import ast

from torchdevice.port.source import Edit, Source, apply, comment_lines, merge
from torchdevice.port.table import DEVICE_EXPRESSION, GUARD, HELPERS, helper_closure

__all__ = ["Edits"]


class Edits:
    """The port of one file in the making: its edits and comments, and what they need
    (the device variable, the helpers)."""

    def __init__(self, source: Source, var: str, aliases: frozenset[str]) -> None:
        self.src = source
        self.edits: list[Edit] = []
        self.notes: dict[int, list[str]] = {}  # statement's first line -> comments
        self.removed: list[str] = []  # why each removed statement went
        self.uses_device = False
        self.helpers: set[str] = set()
        self.module_binding: ast.AST | None = None
        #: Lines made less indented by :func:`.guards.unwrap_check`, by how many characters.
        self.dedent: dict[int, int] = {}
        #: What the port removed (statements, a check's test and its other branch): an
        #: import only they used goes too (:func:`.guards.imports_left_unused`).
        self.removed_nodes: list[ast.AST] = []
        #: Why a rewrite that fixed its line wrote what it wrote (``str(device)`` for a
        #: device name): said in the report's advice, not left as a comment on the line.
        self.explained: list[str] = []
        #: The module-level device variable's name, and other names bound to a device
        #: choice (:class:`.choices.FileChoices`).
        self.var = var
        self.aliases = aliases

    def device(self) -> str:
        self.uses_device = True
        return self.var

    # -- edits and notes ------------------------------------------------------------------

    def replace(self, node: ast.AST, text: str) -> None:
        self.edits.append(Edit(self.src.start(node), self.src.end(node), text))

    def insert(self, offset: int, text: str) -> None:
        self.edits.append(Edit(offset, offset, text))

    def whole_value(self, node: ast.AST) -> bool:
        """Whether ``node`` is the whole value of an assignment or a ``return``: a
        conditional expression put there needs no parentheses of its own (``ruff format``
        takes them off)."""
        parent = self.src.parents.get(node)
        return (
            isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return))
            and parent.value is node
        )

    def replace_value(self, node: ast.AST, text: str) -> None:
        """Replace ``node``, and the parentheses of its own around it where it is a whole
        value (``chained = (\n    "cuda" if ... else "cpu"\n)``): ``text`` needs none."""
        start, end = self.src.start(node), self.src.end(node)
        before = self.src.data[:start].rstrip()
        after = self.src.data[end:]
        if self.whole_value(node) and before.endswith(b"(") and after.lstrip().startswith(b")"):
            start, end = len(before) - 1, end + len(after) - len(after.lstrip()) + 1
        self.edits.append(Edit(start, end, text))

    def guard(self, node: ast.AST, neutral: str) -> None:
        """``node`` where there is an accelerator, ``neutral`` elsewhere: a conditional
        expression, in parentheses unless it is a whole value (:meth:`whole_value`)."""
        if self.whole_value(node):
            self.insert(self.src.end(node), f" if {GUARD} else {neutral}")
        else:
            self.wrap(node, "(", f" if {GUARD} else {neutral})")

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
            self.edits.append(Edit(start, end, "pass"))
            if why:
                self.note(statement, why)
            return
        text = comment_lines(indent, why) if why else ""
        text += f"{indent}pass\n" if sole else ""
        self.edits.append(Edit(self.src.line_start(first), self.src.line_start(last + 1), text))

    def call_paren(self, call: ast.Call) -> int:
        """Byte offset just after the call's opening parenthesis."""
        offset = self.src.end(call.func)
        while self.src.data[offset : offset + 1] != b"(":
            offset += 1
        return offset + 1

    def prepend_argument(self, call: ast.Call, text: str) -> None:
        rest = ", " if call.args or call.keywords else ""
        self.insert(self.call_paren(call), text + rest)

    def arguments(self, call: ast.Call) -> str:
        """The text between a call's parentheses."""
        return self.src.data[self.call_paren(call) : self.src.end(call) - 1].decode("utf-8")

    def alone(self, call: ast.Call) -> bool:
        """Whether ``call`` is a whole statement on lines of its own (not ``a; b``, not
        the body of a one-line ``if``)."""
        statement = self.src.statement(call)
        if not (isinstance(statement, ast.Expr) and statement.value is call):
            return False
        first, last = statement.lineno, statement.end_lineno or statement.lineno
        before = self.src.data[self.src.line_start(first) : self.src.start(statement)]
        after = self.src.data[self.src.end(statement) : self.src.line_start(last + 1)]
        return not before.strip() and not after.split(b"#", 1)[0].strip()

    def indent(self, line: int) -> str:
        """The indentation of ``line`` once ported (less where a check was unwrapped)."""
        return self.src.indent(line)[self.dedent.get(line, 0) :]

    # -- putting it together --------------------------------------------------------------

    def finish(self, *, preamble: bool = True) -> list[Edit]:
        """The edits, merged, with the device binding and the comments added
        (``preamble=False``: the call's own edits alone, for its advice)."""
        edits = list(self.edits)
        if preamble:
            binding = self._preamble()
            if binding is not None:
                edits.append(binding)
            for line, notes in self.notes.items():
                offset = self.src.line_start(line)
                indent = self.indent(line)
                text = "".join(comment_lines(indent, note) for note in notes)
                edits.append(Edit(offset, offset, text))
        return merge(edits)

    def _preamble(self) -> Edit | None:
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
            text += "\n" * max(0, 2 - self.blank_lines_from(first_line))
        if last_import is None:
            return Edit(0, 0, text.lstrip("\n") + ("" if helpers else "\n"))
        after = self.src.line_start(first_line)
        return Edit(after, after, text)

    def blank_lines_from(self, line: int) -> int:
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
        text = apply(self.src.data, mine, start, end)
        lines = [line.strip() for line in text.splitlines()]
        code = " ".join(line for line in lines if line and not line.startswith("#"))
        return ("" if code == "pass" else code), tuple(notes)

"""The guards the port removes or unwraps: code that says "this needs CUDA" (or MPS).

``assert torch.cuda.is_available()``, and ``if not torch.cuda.is_available():`` whose body
only says why and exits, say that the code needs the accelerator; once ported, it does not:
on a host without one it runs on the CPU, so the guard goes (:func:`port_guard`). A check
whose other branch only says why (PyTorch's own MPS page: ``if not
torch.backends.mps.is_available():`` its ``is_built()`` messages, ``else:`` the work) keeps
its work, one level less indented (:func:`unwrap_check`). An ``import sys`` only the removed
exit used goes with it (:func:`imports_left_unused`).
"""

from __future__ import annotations

import ast

from torchdevice.port.edits import Edits
from torchdevice.port.source import Edit, asks_available, comment_lines, dotted, is_check, says

__all__ = ["imports_left_unused", "kept_branch", "port_guard", "unwrap_check"]

_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
#: The modules a removed guard may have been the only user of (for its exit).
_EXIT_MODULES = frozenset({"sys", "os"})


def kept_branch(check: ast.If) -> list[ast.stmt] | None:
    """The work of an availability check whose other branch only says why (PyTorch's own
    MPS page: ``if not torch.backends.mps.is_available():`` its nested ``is_built()``
    messages, ``else:`` the work; or ``if ...is_available(): work else: message``): the
    branch a ported file keeps, which runs on the device or the CPU. ``None`` for any
    other ``if``, and for one written on a single line."""
    test = check.test
    if not check.orelse:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if not asks_available(test.operand):
            return None
        saying, work = check.body, check.orelse
    elif asks_available(test):
        work, saying = check.body, check.orelse
    else:
        return None
    if check.body[0].lineno == check.lineno or not all(says(s) for s in saying):
        return None
    if len(work) == 1 and isinstance(work[0], ast.If) and work is check.orelse:
        return None  # an elif chain: not the check's form
    return None if all(says(s) for s in work) else work


def port_guard(p: Edits, call: ast.Call) -> bool:
    """Remove the guard ``call`` is part of: ``assert torch.cuda.is_available()``, or
    ``if not torch.cuda.is_available():`` (or MPS's) whose body only says why (messages,
    and PyTorch's own nested ``is_built()`` check with its two messages) and exits.

    Such a guard says "this code needs CUDA" (or MPS); once ported, it does not: on a
    host without an accelerator it runs on the CPU. Any other use keeps its meaning
    through ``torch.accelerator.is_available()``.
    """
    parent = p.src.parents.get(call)
    if isinstance(parent, ast.Assert) and parent.test is call:
        why = f"removed `assert {p.src.segment(call)}`: the ported code runs on the CPU"
        p.remove_statement(parent, why + " when there is no accelerator")
        return True
    node: ast.AST = call
    while node in p.src.parents and not isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    ):
        node = p.src.parents[node]
        if (
            isinstance(node, ast.If)
            and p.src.contains(node.test, call)
            and kept_branch(node) is not None
        ):
            unwrap_check(p, node)
            return True
        if isinstance(node, ast.If) and _exit_guard(p, node):
            test = node.test.operand  # type: ignore[attr-defined]
            what = "MPS" if "mps" in p.src.segment(test) else "CUDA"
            why = (
                f"removed a guard that exits without {what}: the ported code runs on "
                f"`{p.var}`, the CPU when there is no accelerator"
            )
            p.remove_statement(node, why)
            return True
    return False


def unwrap_check(p: Edits, check: ast.If) -> None:
    """Keep the work of an availability check that only says why in its other branch
    (:func:`kept_branch`), one level less indented, and remove the rest: ported, the
    work runs on the device, or on the CPU when there is none, where the check printed
    "not built with MPS" and did nothing."""
    kept = kept_branch(check)
    assert kept is not None
    indent = p.src.indent(check.lineno)
    delta = len(p.src.indent(kept[0].lineno)) - len(indent)
    what = "MPS" if "mps" in p.src.segment(check.test) else "CUDA"
    why = (
        f"removed a check that only said why there is no {what}: its work runs on "
        f"`{p.var}`, the CPU when there is no accelerator"
    )
    if why not in p.removed:
        p.removed.append(why)
    p.removed_nodes += [check.test, *(check.body if kept is check.orelse else check.orelse)]
    header = comment_lines(indent, why)
    last = check.end_lineno or check.lineno
    if kept is check.orelse:
        first = _else_line(p, check, check.body[-1]) + 1
        p.edits.append(Edit(p.src.line_start(check.lineno), p.src.line_start(first), header))
    else:
        first = (check.test.end_lineno or check.lineno) + 1
        p.edits.append(Edit(p.src.line_start(check.lineno), p.src.line_start(first), header))
        end_of_work = kept[-1].end_lineno or kept[-1].lineno
        p.edits.append(
            Edit(
                p.src.line_start(end_of_work + 1),
                p.src.line_start((check.end_lineno or check.lineno) + 1),
                "",
            )
        )
        last = end_of_work
    in_strings = _string_lines(p, check)
    prefix = p.src.indent(kept[0].lineno)[len(indent) :].encode("utf-8")
    for line in range(first, last + 1):
        start = p.src.line_start(line)
        if line in in_strings or p.src.data[start : start + delta] != prefix:
            continue  # a line inside a string, or a blank one
        p.edits.append(Edit(start, start + delta, ""))
        p.dedent[line] = delta


def _else_line(p: Edits, check: ast.If, before: ast.stmt) -> int:
    """The line of ``check``'s ``else:`` (or ``elif``), after the statement ``before``."""
    indent = p.src.indent(check.lineno)
    line = (before.end_lineno or before.lineno) + 1
    while line <= (check.end_lineno or check.lineno):
        text = p.src.data[p.src.line_start(line) : p.src.line_starts[line]].decode()
        if text.startswith(indent) and text[len(indent) :].startswith(("else", "elif")):
            return line
        line += 1
    raise AssertionError("an if with an else has an else line")  # pragma: no cover


def _string_lines(p: Edits, node: ast.AST) -> set[int]:
    """The lines inside ``node`` that continue a multi-line string (left as they are)."""
    lines: set[int] = set()
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Constant, ast.JoinedStr)) and (
            isinstance(inner, ast.JoinedStr) or isinstance(inner.value, str)
        ):
            end = inner.end_lineno or inner.lineno
            lines.update(range(inner.lineno + 1, end + 1))
    return lines


def _exit_guard(p: Edits, guard: ast.If) -> bool:
    """``if not <available>():`` with no ``else``, whose body says why and exits."""
    return (
        isinstance(guard.test, ast.UnaryOp)
        and isinstance(guard.test.op, ast.Not)
        and asks_available(guard.test.operand)
        and not guard.orelse
        and _ends_in_exit(p, guard.body)
    )


def _ends_in_exit(p: Edits, block: list[ast.stmt]) -> bool:
    *before, last = block
    if not all(says(statement) for statement in before):
        return False
    if isinstance(last, ast.Raise) or (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and dotted(last.value.func) in _EXITS
    ):
        return True
    return (
        isinstance(last, ast.If)
        and is_check(last.test)
        and bool(last.orelse)
        and _ends_in_exit(p, last.body)
        and _ends_in_exit(p, last.orelse)
    )


def imports_left_unused(p: Edits) -> None:
    """Remove a module-level ``import sys`` (or ``import os``) that only the removed
    statements used: the guard's ``sys.exit`` (``os._exit``). Other imports stay: the
    ported code may use them again (``torch``), or import them for their effect."""
    if not p.removed_nodes:
        return
    for statement in p.src.tree.body:
        if not (
            isinstance(statement, ast.Import)
            and len(statement.names) == 1
            and statement.names[0].asname is None
            and statement.names[0].name in _EXIT_MODULES
        ):
            continue
        name = statement.names[0].name
        uses = [
            node for node in ast.walk(p.src.tree) if isinstance(node, ast.Name) and node.id == name
        ]
        if uses and all(any(p.src.contains(gone, use) for gone in p.removed_nodes) for use in uses):
            _remove_import(p, statement)


def _remove_import(p: Edits, statement: ast.stmt) -> None:
    """Remove an import's line, and a blank line after it that would otherwise open
    the file or double the one before it."""
    first, last = statement.lineno, statement.end_lineno or statement.lineno
    before = (
        b"" if first == 1 else p.src.data[p.src.line_start(first - 1) : p.src.line_start(first)]
    )
    blank_after = p.blank_lines_from(last + 1) > 0
    end = last + 2 if blank_after and (first == 1 or not before.strip()) else last + 1
    if p.src.data[p.src.line_start(first) : p.src.start(statement)].strip():
        p.remove_statement(statement, None)  # shares its line: the text alone
        return
    p.removed_nodes.append(statement)
    p.edits.append(Edit(p.src.line_start(first), p.src.line_start(end), ""))

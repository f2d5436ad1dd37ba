"""Device-module calls (``torch.cuda.X``, ``torch.mps.X``, ``torch.backends.mps.X``), ported
by the table (:func:`.table.rewrite_for`).

Guarded where ``torch.accelerator`` raises without an accelerator, with helpers for events
and streams, so the patched file runs on the CPU as well. A stand-in value that feeds
arithmetic (0 bytes of memory without an accelerator) is said so in a comment, and a
division by it is guarded (:func:`neutral_feeds`). The legacy typed tensors
(``torch.set_default_tensor_type(torch.cuda.HalfTensor)``) are here too: the table's
:data:`.table.LEGACY_TYPE_DTYPES` names their dtypes.
"""

from __future__ import annotations

import ast

from torchdevice.port.edits import Edits
from torchdevice.port.guards import port_guard
from torchdevice.port.source import dotted
from torchdevice.port.table import GUARD, LEGACY_TYPE_DTYPES, device_type_of, rewrite_for

__all__ = ["neutral_feeds", "port_facade", "port_legacy_type"]


def port_facade(p: Edits, api: str, call: ast.Call) -> None:
    """A device-module call, by :func:`torchdevice.port.table.rewrite_for` (the table the
    report's advice falls back on)."""
    name = api.rsplit(".", 1)[1]
    if name in ("is_available", "is_built") and port_guard(p, call):
        return
    rewrite = rewrite_for(api)
    form = rewrite.form
    if form == "expression" and name == "stream" and (len(call.args) != 1 or call.keywords):
        form = "none"  # torch.cuda.stream(None) or keywords: no plain stream to enter
    if name == "get_device_properties" and _total_memory(p, call):
        return
    if form == "none" and rewrite.form != "none":
        p.note(call, f"{api}(): a stream given by keyword")
        return
    if form == "none":
        keep = f'keep it behind `if {p.var}.type == "{device_type_of(api)}":`'
        p.note(call, f"{api}(): {rewrite.why}; {keep}")
        return
    if form == "keep":
        p.note(call, f"{api}(): {rewrite.why}")
        return
    if rewrite.comment:  # the rewrite fixes the line: the why is the advice's alone
        p.explained.append(" ".join(rewrite.why.split()))
    if form == "expression":
        p.replace(call, rewrite.code(p.arguments(call), p.device()))
        return
    if name in ("manual_seed", "manual_seed_all") and _seeded_before(p, call):
        p.remove_statement(
            p.src.statement(call),
            f"removed `{p.src.segment(call)}`: the torch.manual_seed above seeds every device",
        )
        return
    p.replace(call.func, rewrite.target)
    if form == "helper":
        p.helpers.add(rewrite.target)
    elif form == "context" and call.args:
        p.insert(p.src.start(call.args[0]), "(")
        p.insert(p.src.end(call.args[0]), f") if {GUARD} else None")
    elif form == "statement" and p.alone(call):
        indent = p.indent(call.lineno)
        p.insert(p.src.start(call), f"if {GUARD}:\n{indent}    ")
    elif form == "statement":
        p.wrap(call, "(", f" if {GUARD} else {rewrite.neutral})")
    elif form == "guarded":
        p.guard(call, rewrite.neutral)
        text = f"{rewrite.target}({p.arguments(call)})"
        neutral_feeds(p, call, text, rewrite.neutral)


def port_legacy_type(p: Edits, api: str, call: ast.Call) -> None:
    """The legacy typed tensors: ``torch.cuda.FloatTensor(...)`` and ``t.type(...)``
    get a note; ``torch.set_default_tensor_type(torch.cuda.HalfTensor)`` (or the
    class's dotted name, ``"torch.cuda.FloatTensor"``) becomes the two calls torch
    names as its replacement, the dtype and the device, on the statement's line."""
    if api != "torch.set_default_tensor_type":
        p.note(
            call,
            "a legacy typed tensor (torch.cuda.FloatTensor...): use "
            f".to({p.var}, dtype) or a factory with dtype= and device=",
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
    replacement = f"torch.set_default_dtype(dtype) and torch.set_default_device({p.var})"
    if dtype is None or not p.alone(call):
        p.note(call, f"torch.set_default_tensor_type is deprecated: use {replacement}")
        return
    p.replace(
        call,
        f"torch.set_default_dtype(torch.{dtype}); torch.set_default_device({p.device()})",
    )


def _total_memory(p: Edits, call: ast.Call) -> bool:
    """``get_device_properties(i).total_memory``: the accelerator's total memory, which
    ``torch.accelerator.get_memory_info(i)[1]`` gives."""
    parent = p.src.parents.get(call)
    if not (isinstance(parent, ast.Attribute) and parent.attr == "total_memory"):
        return False
    arguments = [p.src.segment(arg) for arg in call.args] + [
        p.src.segment(keyword.value) for keyword in call.keywords
    ]
    text = f"torch.accelerator.get_memory_info({', '.join(arguments)})[1]"
    bare = p.whole_value(parent)
    p.replace(parent, f"{text} if {GUARD} else 0" if bare else f"({text} if {GUARD} else 0)")
    neutral_feeds(p, parent, text, "0")
    return True


def neutral_feeds(p: Edits, node: ast.AST, text: str, neutral: str) -> None:
    """Where the stand-in ``neutral`` (what ``text`` is without an accelerator) feeds
    arithmetic, say so; guard each division by a name bound to it."""
    statement = p.src.statement(node)
    inline = False
    walker: ast.AST = node
    while walker is not statement:
        walker = p.src.parents[walker]
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
    for use in ast.walk(p.src.scope(statement)):
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
                p.wrap(use, "(", f" if {p.src.segment(divisor)} else {zero})")
                guarded.append(p.src.segment(divisor))
            elif used:
                feeds = True
        elif isinstance(use, ast.AugAssign) or (isinstance(use, ast.Subscript) and neutral == "{}"):
            feeds = feeds or any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(use))
    if not (inline or feeds or guarded):
        return
    said = f"without an accelerator `{text}` is {neutral} here (a stand-in, not a measurement)"
    if guarded:
        divisors = ", ".join(f"`{divisor}`" for divisor in dict.fromkeys(guarded))
        said += f"; the division(s) by {divisors} below are guarded"
    elif inline and isinstance(p.src.parents.get(node), ast.BinOp):
        said += "; guard what is computed from it"
    p.note(statement, said)


def _seeded_before(p: Edits, call: ast.Call) -> bool:
    """Whether the statement before ``call``'s is ``torch.manual_seed`` of the same
    arguments: the rewrite would repeat it."""
    statement = p.src.statement(call)
    if not (isinstance(statement, ast.Expr) and statement.value is call):
        return False
    parent = p.src.parents.get(statement)
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
        and p.arguments(previous.value).strip() == p.arguments(call).strip()
    )

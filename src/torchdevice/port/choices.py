"""The device choice: ``"cuda" if torch.cuda.is_available() else "cpu"``, its
``torch.device(...)``, chained MPS and ``if``/``elif`` forms, becomes the one ``device``.

:class:`FileChoices` reads every choice of a file once, and the name of the module-level
device variable the port binds (the module's own binding's name when it has one, else the
first of ``device``, ``target_device``, ``torch_device`` nothing else binds).
:func:`port_choice` replaces a choice: by the variable, or, for the module's own binding,
by :data:`.table.DEVICE_EXPRESSION`; a choice of strings becomes a ``torch.device``, so its
comparisons with a string compare its ``.type``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from torchdevice.port.edits import Edits
from torchdevice.port.guards import kept_branch
from torchdevice.port.source import (
    Source,
    accelerator_literal,
    asks_available,
    dotted,
    is_cpu,
    is_device_literal,
    single_target,
)
from torchdevice.port.table import DEVICE_EXPRESSION

__all__ = ["Choice", "FileChoices", "is_choice", "port_choice"]

#: Names tried, in order, for the module-level device variable (the first one free), after
#: the name of the module's own device binding, when it has one.
_DEVICE_NAMES = ("device", "target_device", "torch_device")


def is_choice(node: ast.AST) -> bool:
    """The device-choice idiom: ``"cuda" if torch.cuda.is_available() else "cpu"``, chained
    (``... else "mps" if torch.backends.mps.is_available() else "cpu"``), its branches
    ``torch.device(...)`` or the whole of it in one."""
    if isinstance(node, ast.Call) and dotted(node.func) == "torch.device":
        return len(node.args) == 1 and not node.keywords and is_choice(node.args[0])
    return (
        isinstance(node, ast.IfExp)
        and asks_available(node.test)
        and accelerator_literal(node.body)
        and (is_cpu(node.orelse) or is_choice(node.orelse))
    )


def _chosen_strings(node: ast.AST) -> bool:
    """Whether a choice expression gives strings (``"cuda"``), not ``torch.device`` objects."""
    if isinstance(node, ast.IfExp):
        return isinstance(node.body, ast.Constant) and _chosen_strings(node.orelse)
    return isinstance(node, ast.Constant)


def _choice_statement(top: ast.If) -> tuple[str, bool] | None:
    """``if torch.cuda.is_available(): device = "cuda"`` ``[elif ...]`` ``else: device =
    "cpu"``: the target's text and whether the values are strings; ``None`` for any other
    ``if``."""
    target: str | None = None
    strings = True
    node = top
    while True:
        if not (asks_available(node.test) and len(node.body) == 1):
            return None
        assigned = single_target(node.body[0])
        value = getattr(node.body[0], "value", None)
        if assigned is None or value is None or not accelerator_literal(value):
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
        last_target = single_target(last)
        last_value = getattr(last, "value", None)
        if last_target is None or last_value is None or ast.unparse(last_target) != target:
            return None
        if not is_cpu(last_value):
            return None
        return target, strings and isinstance(last_value, ast.Constant)


@dataclass(frozen=True)
class Choice:
    """A device choice in the file: the node that is replaced (an expression, or a whole
    ``if`` statement), the statement that holds it, what it is bound to."""

    node: ast.AST
    statement: ast.stmt
    target: str | None  # the bound name or attribute (``device``, ``self.device``), if bound
    strings: bool  # it chose strings ("cuda"), whose comparisons with strings need .type
    whole_statement: bool  # the if/elif form: the statement itself is replaced


class FileChoices:
    """Every device choice of a file, outermost first (a choice inside a larger one is its
    part), and the name of the device variable the port binds."""

    def __init__(self, source: Source) -> None:
        self.src = source
        self.found = self._find_choices()
        self.var = self._choose_name()
        #: Other names bound to a device choice: each is the device once ported.
        self.aliases = frozenset(
            choice.target for choice in self.found if choice.target not in (None, self.var)
        )

    def _find_choices(self) -> list[Choice]:
        """Every device choice, outermost first (a choice inside a larger one is its part)."""
        found: list[Choice] = []
        for node in ast.walk(self.src.tree):
            if isinstance(node, ast.If) and not self._is_elif(node):
                chosen = _choice_statement(node)
                if chosen is not None:
                    found.append(Choice(node, node, chosen[0], chosen[1], True))
            elif isinstance(node, (ast.IfExp, ast.Call)) and is_choice(node):
                parent = self.src.parents.get(node)
                if parent is not None and is_choice(parent):
                    continue  # part of a larger choice
                statement = self.src.statement(node)
                target = single_target(statement)
                bound = target is not None and getattr(statement, "value", None) is node
                inner = node.args[0] if isinstance(node, ast.Call) else node
                found.append(
                    Choice(
                        node,
                        statement,
                        ast.unparse(target) if bound and target is not None else None,
                        isinstance(node, ast.IfExp) and _chosen_strings(inner),
                        False,
                    )
                )
        return [
            c
            for c in found
            if not any(o is not c and self.src.contains(o.node, c.node) for o in found)
        ]

    def _is_elif(self, node: ast.If) -> bool:
        parent = self.src.parents.get(node)
        return isinstance(parent, ast.If) and parent.orelse == [node]

    def at(self, node: ast.AST) -> Choice | None:
        """The device choice ``node`` is part of."""
        return next((c for c in self.found if self.src.contains(c.node, node)), None)

    def binds_a_device(self, statement: ast.AST) -> bool:
        """``device = torch.device("cuda")``, or a device choice: a binding the port
        rewrites or removes."""
        if any(
            choice.target is not None and self.src.contains(choice.statement, statement)
            for choice in self.found
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
        # The module's statements, with the work of a module-level availability check
        # that only says why in its other branch: the port keeps it at module level.
        module_level = [
            statement
            for top in self.src.tree.body
            for statement in ((kept_branch(top) or [top]) if isinstance(top, ast.If) else [top])
        ]
        own = [
            statement.targets[0].id
            for statement in module_level
            if isinstance(statement, ast.Assign)
            and isinstance(statement.targets[0], ast.Name)
            and self.binds_a_device(statement)
        ] + [
            choice.target
            for choice in self.found
            if choice.target is not None
            and choice.target.isidentifier()
            and not self.src.in_function(choice.statement)
        ]
        for name in (*own, *_DEVICE_NAMES):
            others = [
                node
                for node in bound.get(name, ())
                if not self.binds_a_device(
                    self.src.statement(node) if node in self.src.parents else node
                )
            ]
            if not others:
                return name
        return "_torchdevice_port_device"


def port_choice(p: Edits, choices: FileChoices, call: ast.Call) -> bool:
    """A call that is part of a device choice (its availability test, one of its
    ``torch.device`` values): the choice becomes the one device (see docs/port.md)."""
    choice = choices.at(call)
    if choice is None:
        return False
    target = choice.target
    if target is None:  # an argument, a default: the device itself
        p.replace(choice.node, p.device())
        return True
    if target == p.var and p.src.in_function(choice.statement):
        p.remove_statement(choice.statement, None)  # the module's device is the same
        p.uses_device = True
    elif target == p.var:
        p.module_binding = choice.statement
        if choice.whole_statement:
            p.replace(choice.statement, f"{p.var} = {DEVICE_EXPRESSION}")
        else:
            p.replace_value(choice.node, DEVICE_EXPRESSION)
    elif choice.whole_statement:
        p.replace(choice.statement, f"{target} = {p.device()}")
    else:
        p.replace_value(choice.node, p.device())
    if choice.strings:
        _compare_types(p, choice)
    return True


def _compare_types(p: Edits, choice: Choice) -> None:
    """A choice of strings is a ``torch.device`` once ported: its comparisons with a
    string (``device == "cuda"``) compare its ``.type``."""
    compared = []
    for node in ast.walk(p.src.tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if not any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands):
            continue
        for operand in operands:
            if (
                isinstance(operand, (ast.Name, ast.Attribute))
                and p.src.segment(operand) == choice.target
            ):
                p.insert(p.src.end(operand), ".type")
                compared.append(node)
    if compared:
        p.note(
            choice.statement,
            f"`{choice.target}` is a torch.device now, no string: its comparisons with "
            "a string compare its .type",
        )

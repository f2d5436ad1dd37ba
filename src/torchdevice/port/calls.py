"""The per-call rules ``torchdevice port`` applies to one file's source text, and the port
of one file (:func:`port_source`) and of one call (:func:`ported_call`, the report's advice).

The report knows every call the code made to a device-specific API, and the exact source
span of each; :func:`port_source` takes a file's text and its report rows and returns the
device-agnostic text. :func:`port` sends each row's call to its rule: a device argument
(``device=``, ``.to``, ``.cuda()``, ``torch.device``, ``torch.load``'s ``map_location``)
becomes the one device variable, ``autocast``/``GradScaler`` get its ``.type``, a NCCL
backend becomes ``get_default_backend_for_device``, ``pin_memory`` is asked for only where
there is an accelerator; a call that is part of a device choice goes to :mod:`.choices`,
a device-module call to :mod:`.device_api` (and its guards to :mod:`.guards`). What cannot
be rewritten mechanically is not guessed at: a ``# torchdevice port: ...`` comment line
goes above the statement and says why (see docs/port.md for the list).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from torchdevice.port.choices import FileChoices, is_choice, port_choice
from torchdevice.port.device_api import port_facade, port_legacy_type
from torchdevice.port.edits import Edits
from torchdevice.port.guards import imports_left_unused
from torchdevice.port.layout import fit_changed
from torchdevice.port.source import (
    STATIC_REASON,
    UNVERIFIED,
    Edit,
    PortEntry,
    Source,
    accelerator_literal,
    apply,
    dotted,
    is_device_literal,
    keyword_of,
)
from torchdevice.port.table import DEVICE_EXPRESSION, GUARD

__all__ = ["Porter", "port", "port_source", "ported_call", "read"]


class Porter(Edits):
    """The edits of one file's port, with its device choices, which the rules read."""

    def __init__(self, source: Source, choices: FileChoices) -> None:
        super().__init__(source, choices.var, choices.aliases)
        self.choices = choices


def read(text: str) -> tuple[Source, FileChoices]:
    """``text`` parsed, and its device choices."""
    source = Source(text)
    return source, FileChoices(source)


def port(p: Porter, entry: PortEntry, call: ast.Call) -> None:
    """Port ``call``, a call of ``entry``'s row, by the rule for its API."""
    api = entry.api
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if entry.kind in ("fallback", "dtype", "override"):
        port_rule(p, entry, call)
        return
    if port_choice(p, p.choices, call):
        return
    if called != api.rsplit(".", 1)[-1]:  # `from torch.cuda import synchronize as sync`
        p.note(
            call,
            f"a call of {api} under another name (`{p.src.segment(func)}`): port it by hand",
        )
        return
    if api == "Tensor.pin_memory":
        port_pin_method(p, call)
    elif entry.requested == "pin_memory=True":
        port_pin_keyword(p, call)
    elif api in ("Tensor.type", "torch.set_default_tensor_type") or (
        api.startswith("torch.cuda.") and api.endswith("Tensor")
    ):
        port_legacy_type(p, api, call)
    elif api in ("Tensor.cuda", "Module.cuda"):
        port_cuda_method(p, call)
    elif api in ("Tensor.to", "Module.to"):
        port_to(p, call)
    elif api == "torch.device":
        port_torch_device(p, call)
    elif api == "torch.load":
        port_load(p, call)
    elif api in ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast"):
        port_amp(p, call, "torch.autocast", "device_type")
    elif api in ("torch.amp.GradScaler", "torch.cuda.amp.GradScaler"):
        port_amp(p, call, "torch.amp.GradScaler", "device")
    elif api in ("torch.distributed.init_process_group", "torch.distributed.new_group"):
        if entry.requested.startswith("device_id="):
            p.note(
                call,
                "device_id binds NCCL to one GPU, and torch rejects the CPU as "
                "one: pass it only when device.type == 'cuda'",
            )
        else:
            port_backend(p, call)
    elif api == "torch.nn.parallel.DistributedDataParallel":
        why = "device_ids/output_device name a GPU, and CPU modules reject them"
        p.note(call, f"{why}: leave them out for a module already on `{p.device()}`")
    elif api.startswith("torch.distributed."):
        pass  # a collective: device-agnostic once the backend is (staged on MPS-like hosts)
    elif api.startswith(("torch.cuda.", "torch.mps.", "torch.backends.mps.")):
        port_facade(p, api, call)
    else:  # factories, torch.Generator, random ops: a device= argument
        argument = keyword_of(call, "device")
        if argument is not None:
            device_argument(p, argument.value)
        elif api == "torch.Generator" and call.args:
            device_argument(p, call.args[0])
        else:  # a positional device: a string or torch.device(...) (an int is a size)
            named = [arg for arg in call.args if accelerator_literal(arg)]
            for arg in named:
                device_argument(p, arg)
            if not named:
                p.note(call, f"{api} is given its device in a way the port cannot see")


def port_rule(p: Porter, entry: PortEntry, call: ast.Call) -> None:
    """Rows of torchdevice's own rules rather than of a device request."""
    if entry.kind == "override":  # "cpu:-1" is torchdevice's; natively it is "cpu"
        for node in [*call.args, *(keyword.value for keyword in call.keywords)]:
            if isinstance(node, ast.Constant) and node.value == "cpu:-1":
                p.replace(node, '"cpu"')
    elif entry.kind == "dtype":
        p.note(
            call,
            "MPS has no float64: torchdevice narrowed it to float32 here; "
            "use float32 (or keep this on the CPU) for MPS",
        )
    else:
        where = entry.requested.split(",")[0].split(":")[0]  # "mps:0, float32" -> mps
        p.note(
            call,
            f"{entry.api} has no kernel on {where}: "
            "torchdevice reran it on the CPU; natively, move it to the CPU "
            "(or set PYTORCH_ENABLE_MPS_FALLBACK=1 on a Mac)",
        )


def device_argument(p: Porter, node: ast.AST, *, as_type: bool = False) -> None:
    """Make the device argument ``node`` the device variable (or say why not)."""
    if is_choice(node) or is_device_literal(node):
        p.replace(node, p.device() + (".type" if as_type else ""))
    elif isinstance(node, ast.Name) and node.id == p.var:
        if as_type:
            p.replace(node, p.device() + ".type")
    elif p.src.segment(node) in p.aliases:  # bound to a device choice: the device
        if as_type:
            p.insert(p.src.end(node), ".type")
    elif isinstance(node, ast.Constant) and node.value in ("cpu", None):
        pass  # asks for the CPU: already device-agnostic code
    elif not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        suffix = " (its .type)" if as_type else ""
        p.note(
            node,
            f"the device here is `{p.src.segment(node)}`, which the port "
            f"cannot read: make it `{p.device()}`{suffix}",
        )
    else:  # the comment names the device variable, so the file gets one to use
        p.note(
            node,
            f"the device here is `{p.src.segment(node)}`, set elsewhere: make it "
            f"`{p.device()}`{' (its .type)' if as_type else ''} where it is defined",
        )


def port_cuda_method(p: Porter, call: ast.Call) -> None:
    if not isinstance(call.func, ast.Attribute):
        p.note(call, "a .cuda() call through an alias: use .to(device)")
        return
    name_end = p.src.end(call.func)  # the attribute's name ends the attribute
    p.edits.append(
        Edit(name_end - len(call.func.attr), name_end, "to")
    )  # `cuda` -> `to`: only the name, so `(x * 2).cuda()` keeps its parenthesis (the
    # receiver ends before it) and the receiver and the arguments are edited apart
    positional = call.args[0] if call.args else None
    keyword = keyword_of(call, "device")
    if positional is not None:
        device_argument(p, positional)
    elif keyword is not None:
        device_argument(p, keyword.value)  # .to(device=...) takes it too
    else:
        p.prepend_argument(call, p.device())


def port_to(p: Porter, call: ast.Call) -> None:
    keyword = keyword_of(call, "device")
    if keyword is not None:
        device_argument(p, keyword.value)
    elif call.args:
        device_argument(p, call.args[0])


def port_pin_method(p: Porter, call: ast.Call) -> None:
    """``x.pin_memory()`` raises without an accelerator: pinned where there is one."""
    if not isinstance(call.func, ast.Attribute):
        p.note(call, "a .pin_memory() call through an alias: pin only with an accelerator")
        return
    value = call.func.value
    receiver = p.src.segment(value)
    if not isinstance(value, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        receiver = f"({receiver})"
    p.guard(call, receiver)


def port_pin_keyword(p: Porter, call: ast.Call) -> None:
    """``pin_memory=True`` raises without an accelerator: pinned where there is one."""
    keyword = keyword_of(call, "pin_memory")
    if keyword is None:
        p.note(call, "pin_memory is asked for in a way the port cannot see")
        return
    if isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
        p.replace(keyword.value, GUARD)
    else:
        p.note(call, f"pin_memory=True needs an accelerator: make it `{GUARD}`")


def port_torch_device(p: Porter, call: ast.Call) -> None:
    if not is_device_literal(call):
        kind = call.args[0] if call.args else None
        if (
            isinstance(kind, ast.Constant)
            and isinstance(kind.value, str)
            and kind.value in ("cuda", "mps", "xpu")
        ):  # torch.device("cuda", index): the index stays, the type is the device's
            p.replace(kind, p.device() + ".type")
        else:
            device_argument(p, call)  # a note: its argument comes from elsewhere
        return
    parent = p.src.parents.get(call)
    if (
        isinstance(parent, ast.Assign)
        and p.choices.binds_a_device(parent)
        and isinstance(parent.targets[0], ast.Name)
        and parent.targets[0].id == p.var
    ):
        if p.src.in_function(parent):  # `device = torch.device("cuda")` in a function
            p.remove_statement(parent, None)  # the module-level one is the same device
            p.uses_device = True
        else:  # the module's own binding (each of them, if it has several) chooses
            p.module_binding = p.module_binding or parent
            p.replace(call, DEVICE_EXPRESSION)
        return
    p.replace(call, p.device())


def port_load(p: Porter, call: ast.Call) -> None:
    keyword = keyword_of(call, "map_location")
    if keyword is not None:
        if isinstance(keyword.value, (ast.Dict, ast.Lambda)):
            p.note(call, f"map_location is a mapping or function: map to `{p.var}`")
        else:
            device_argument(p, keyword.value)
        return
    close = p.src.end(call) - 1
    before = p.src.data[:close].rstrip()
    comma = "" if before.endswith((b",", b"(")) else ", "
    p.insert(close, f"{comma}map_location={p.device()}")


def port_amp(p: Porter, call: ast.Call, target: str, keyword_name: str) -> None:
    if dotted(call.func) != target and dotted(call.func).startswith("torch.cuda.amp."):
        p.replace(call.func, target)  # torch.cuda.amp.X(...) takes no device type
        p.prepend_argument(call, p.device() + ".type")
        return
    keyword = keyword_of(call, keyword_name)
    node = keyword.value if keyword is not None else (call.args[0] if call.args else None)
    if node is None:
        p.prepend_argument(call, p.device() + ".type")
    else:
        device_argument(p, node, as_type=True)


def port_backend(p: Porter, call: ast.Call) -> None:
    keyword = keyword_of(call, "backend")
    node = keyword.value if keyword is not None else (call.args[0] if call.args else None)
    if isinstance(node, ast.Constant) and node.value in ("nccl", "gloo", "mccl", "xccl"):
        replacement = f"torch.distributed.get_default_backend_for_device({p.device()})"
        p.replace(node, replacement)
    elif node is not None:
        p.note(
            call,
            f"the backend `{p.src.segment(node)}` is set elsewhere: use "
            f"torch.distributed.get_default_backend_for_device({p.var})",
        )


def calls_of(source: Source, entry: PortEntry) -> Iterator[ast.Call]:
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


def port_source(
    text: str, entries: Iterable[PortEntry], *, layout: bool = True
) -> tuple[str, tuple[str, ...]]:
    """The device-agnostic version of ``text`` and the comments left in it.

    ``entries`` are the report's rows for this file; a row whose span matches no call in
    ``text`` (the file changed since the run) is skipped. Each line the port made longer
    than :data:`.layout.WIDTH` is broken at its brackets (``layout=False``: left whole, as
    the report's advice shows it; the tokens are the same).
    """
    source, choices = read(text)
    porter = Porter(source, choices)
    seen: set[tuple[int, str]] = set()
    for entry in entries:
        for call in calls_of(source, entry):
            if (id(call), entry.api) in seen:  # one rule per call and API
                continue
            seen.add((id(call), entry.api))
            port(porter, entry, call)
            if entry.reason == STATIC_REASON:
                porter.note(call, UNVERIFIED)
    imports_left_unused(porter)
    new = apply(source.data, porter.finish())
    if layout:
        new = fit_changed(text, new)
    notes = tuple(note for line in sorted(porter.notes) for note in porter.notes[line])
    return new, notes


#: Parsed files, by their text: the report asks for the advice of many rows of one file.
_PARSED: dict[str, tuple[Source, FileChoices]] = {}


def ported_call(text: str, entry: PortEntry) -> tuple[str | None, tuple[str, ...]] | None:
    """What the port writes for ``entry``'s call in the file whose source is ``text``: the
    call's ported code on one line (``None``: unchanged; ``""``: removed) and the comments
    it leaves; ``None`` where no call of the row is in ``text`` (or it does not parse)."""
    parsed = _PARSED.get(text)
    if parsed is None:
        try:
            parsed = read(text)
        except (SyntaxError, ValueError):
            return None
        if len(_PARSED) >= 8:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[text] = parsed
    source, choices = parsed
    call = next(calls_of(source, entry), None)
    if call is None:
        return None
    porter = Porter(source, choices)
    port(porter, entry, call)
    return porter.outcome(call)

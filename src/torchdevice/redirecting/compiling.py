"""What compiled code sees of torchdevice, and what it guards on.

Dynamo traces the function mode's ``__torch_function__`` and the handlers into every
graph compiled while torchdevice redirects. Nothing of torchdevice's bookkeeping may be
traced: a lock, an exception or a cache read in a graph would break it or put a guard on
every cached decision. So every answer compiled code needs comes from a *constant function*
(:func:`constant_for_dynamo`), which dynamo runs eagerly at trace time and whose result it
puts in the graph as a constant, guarded only on its arguments:

* :func:`traced_slot`: where the handler of a torch function sits in the runtime's
  handlers (the mode's table lookup; guards: the runtime's serial, whether the mode is live);
* :func:`resolve_traced` / :func:`traced_device`: a device request's decision and its
  ``torch.device`` (guards: the runtime's serial, the CPU override, the request);
* the facade's fixed answers (``torch.cuda.get_device_name``...), marked by the facade.

The runtime is named by its serial number (:func:`register`, :func:`by_serial`): dynamo
before torch 2.13 passes no object to a constant function, only plain values. A ``"cpu:-1"``
toggle is a change of torchdevice's state, not a graph op: it breaks the graph
(:func:`graph_break`). Dynamo's table of torch functions must be built from the real
modules, not the facade's (:func:`build_trace_rules_natively`, :func:`clear_trace_rules`).

Two questions, each asked one way in the whole package:

* "Are we compiling?" (record nothing, mark no tensor): :func:`is_compiling`.
  ``torch.compiler.is_compiling()`` is ``torch.jit.is_scripting() or`` a module flag, and
  ``is_scripting()`` is always False in Python code (TorchScript never runs torchdevice's
  Python): three Python calls where one will do, on paths that run on every redirect
  (their cost: benchmarks/README.md). Those paths (:meth:`Runtime.place
  <torchdevice.redirecting.runtime.Runtime.place>`, the facades' call counter, the
  entry-points tier's wrappers, :mod:`torchdevice.redirecting.standing`) inline its body,
  spelled the same::

      if is_tracing() or compiler._is_compiling_flag: ...

* "Is dynamo tracing this code?" (answer with a graph constant): :func:`is_tracing`
  (``torch.compiler.is_dynamo_compiling``), which dynamo folds to True while it traces, so
  traced code never reads the flag (a read would put a guard on it); eager code that runs
  while dynamo compiles or ``torch.export`` traces sees the flag, which torch holds True
  for that time. ``tests/test_compiling.py`` checks both agree with torch's.

A redirected request asks once: :meth:`Runtime.place
<torchdevice.redirecting.runtime.Runtime.place>` answers ``None`` for what it stands for while
compiling, and the marks that follow skip a ``None``.
"""

from __future__ import annotations

import itertools
import operator
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from torchdevice.redirecting.policy import Action, Decision, DeviceSpec, PolicyState

if TYPE_CHECKING:
    from torchdevice.reporting import EventKind

__all__ = [
    "Resolved",
    "TracedRuntime",
    "build_trace_rules_natively",
    "by_serial",
    "clear_trace_rules",
    "compiler",
    "constant_for_dynamo",
    "graph_break",
    "is_compiling",
    "is_tracing",
    "register",
    "resolve_traced",
    "traced_device",
    "traced_slot",
]

#: True only in code dynamo traces (eager code dynamo runs at trace time sees False).
is_tracing = torch.compiler.is_dynamo_compiling
#: ``torch.compiler``, whose ``_is_compiling_flag`` the per-call paths read inline.
compiler = torch.compiler
if not hasattr(compiler, "_is_compiling_flag"):  # pragma: no cover - a torch without it
    raise ImportError(
        "torchdevice needs torch.compiler._is_compiling_flag (torch >= 2.5): "
        f"torch {torch.__version__} has none"
    )
_F = TypeVar("_F", bound=Callable[..., Any])


def is_compiling() -> bool:
    """``torch.compiler.is_compiling()``, one call cheaper (see the module docstring)."""
    return is_tracing() or compiler._is_compiling_flag


def constant_for_dynamo(fn: _F) -> _F:
    """Mark ``fn`` as ``torch._dynamo.assume_constant_result`` does, without importing dynamo.

    Dynamo calls a marked function at trace time with its arguments as Python constants
    (guarding on their sources) and puts the result in the graph as a constant: the
    function itself is never traced. Pass plain values (numbers, strings, devices, torch
    functions): torch 2.13 also passes objects, by identity, but earlier versions refuse
    them ("... is not a constant"), hence :func:`register`'s serial numbers.
    ``assume_constant_result`` sets only this attribute, and importing ``torch._dynamo`` to
    call it would cost every ``import torchdevice`` about a second.
    """
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


# -- the runtimes compiled code names ---------------------------------------------------
#: A cached resolution of a device request: the decision, its ``torch.device``, and how
#: the report counts it (``None``: not at all). What the request stands for is
#: ``decision.standing``. The runtime's decision cache holds these; defined here, below
#: the runtime, so that this module needs no import of it (no import cycle).
Resolved = tuple[Decision, torch.device, "EventKind | None"]


class TracedRuntime(Protocol):
    """What compiled code reads of a runtime (:class:`torchdevice.redirecting.runtime.Runtime`): its
    serial number, its function table and handlers, its decisions and devices."""

    serial: int
    table: Mapping[Callable[..., Any], Callable[..., Any]]
    handlers: tuple[Callable[..., Any], ...]

    @property
    def state(self) -> PolicyState: ...

    def lookup(self, request: object) -> Resolved: ...

    def set_cpu_override(self, on: bool) -> None: ...

    def torch_device(self, spec: DeviceSpec) -> torch.device: ...


_serials = itertools.count(1)
_by_serial: weakref.WeakValueDictionary[int, TracedRuntime] = weakref.WeakValueDictionary()


def register(runtime: TracedRuntime) -> int:
    """A new serial number for ``runtime``: what graphs traced with it guard on.

    A runtime takes a new number when its decisions change for good (a fork child that
    keeps host requests on the CPU): graphs traced before then no longer pass their guards.
    """
    serial = next(_serials)
    _by_serial[serial] = runtime
    return serial


def by_serial(serial: int) -> TracedRuntime:
    """The runtime numbered ``serial`` (alive: a graph traced with it holds its mode)."""
    return _by_serial[serial]


# -- the function mode's table ----------------------------------------------------------
@constant_for_dynamo
def traced_slot(serial: int, live: bool, func: Callable[..., Any]) -> int:
    """Where the handler of ``func`` sits in the handlers of the runtime numbered ``serial``
    (-1: none), as dynamo sees it: run at trace time, its answer a constant.

    Read as a dict, the table would put one guard per function in it (a hundred or so) on
    every compiled call, which can cost more than a small compiled model itself on a GPU
    (benchmarks/README.md, ``compiled.py``). Dynamo guards on ``serial`` and ``live`` (one
    guard each) instead. The runtime outlives its activations (``enable()`` with the same
    settings reuses it), so compiled graphs survive ``disable()``/``enable()`` cycles;
    ``live`` turns false when a mode retires, so a graph traced while it redirected is
    traced again once it passes everything through. The answer is an index, not the
    handler: an object made at trace time has no source dynamo can guard, while
    ``runtime.handlers[i]`` has.
    """
    if not live:
        return -1
    runtime = by_serial(serial)
    handler = runtime.table.get(func)
    return -1 if handler is None else runtime.handlers.index(handler)


# -- device requests --------------------------------------------------------------------
#: A resolution as plain constants: dynamo can read attributes of the objects a constant
#: function returns, but not run their properties, so the decision travels as its fields.
_Flat = tuple[
    tuple[str, "int | None"],
    "tuple[str, int | None] | None",
    Action,
    str,
    bool,
    torch.device,
    "EventKind | None",
]


def resolve_traced(runtime: TracedRuntime, request: object) -> Resolved:
    """:meth:`Runtime.resolve <torchdevice.redirecting.runtime.Runtime.resolve>` while dynamo
    traces: a constant the graph is specialised on.

    Dynamo runs :func:`_traced_resolution` eagerly at trace time instead of tracing it,
    and guards only on what the answer depends on: the runtime (by its serial), the CPU
    override and the request. So nothing traced takes a lock, builds an exception or reads
    the caches (whose growth would fail the guards and recompile), and no eager warm-up is
    needed.
    """
    if isinstance(request, (int, torch.SymInt)) and not isinstance(request, bool):
        # An index that dynamo made dynamic (it changed between calls) becomes a
        # constant again, guarded by value: a device is never symbolic.
        request = operator.index(request)
    flat = _traced_resolution(runtime.serial, runtime.state.cpu_override, request)
    device_spec, requested, action, reason, toggle, device, kind = flat
    decision = Decision(
        DeviceSpec(*device_spec),
        None if requested is None else DeviceSpec(*requested),
        action,
        reason,
        toggle,
    )
    if toggle:
        # Flipping the override is a side effect on the runtime, not a graph op: a graph
        # break runs it eagerly (fullgraph=True reports it as the reason).
        graph_break(_TOGGLE_IN_GRAPH)
        runtime.set_cpu_override(not runtime.state.cpu_override)
    return decision, device, kind


@constant_for_dynamo
def _traced_resolution(serial: int, cpu_override: bool, request: object) -> _Flat:
    """The resolution of ``request`` as dynamo sees it: computed eagerly, at trace time.

    ``cpu_override`` is unused here but passed so that dynamo guards on it: the compiled
    code is specialised on the override and recompiles when it flips. The toggle itself is
    not applied here; :func:`resolve_traced` applies it outside the graph.
    """
    del cpu_override
    decision, device, kind = by_serial(serial).lookup(request)
    spec, requested = decision.device, decision.requested
    return (
        (spec.type, spec.index),
        None if requested is None else (requested.type, requested.index),
        decision.action,
        decision.reason,
        decision.toggle_override,
        device,
        kind,
    )


def traced_device(runtime: TracedRuntime, spec: DeviceSpec) -> torch.device:
    """:meth:`Runtime.torch_device <torchdevice.redirecting.runtime.Runtime.torch_device>` while
    dynamo traces: a constant, computed eagerly (guards: the runtime's serial and the spec)."""
    return _traced_device(runtime.serial, spec.type, spec.index)


@constant_for_dynamo
def _traced_device(serial: int, device_type: str, index: int | None) -> torch.device:
    """The spec travels as its fields: dynamo passes plain constants, not objects it made
    from an earlier constant result."""
    return by_serial(serial).torch_device(DeviceSpec(device_type, index))


def graph_break(reason: str) -> None:
    """Break dynamo's graph here with ``reason`` (fullgraph=True raises with it).

    Only reached while dynamo traces, so ``torch._dynamo`` is loaded.
    """
    torch._dynamo.graph_break(msg=reason)


_TOGGLE_IN_GRAPH = (
    "torchdevice: 'cpu:-1' toggles the CPU override, a change to torchdevice's state that "
    "cannot be part of a graph; request it before the compiled region, or call "
    "torchdevice.set_cpu_override() there"
)


# -- dynamo's table of torch functions --------------------------------------------------
def build_trace_rules_natively() -> None:
    """Let dynamo, if loaded, build its table of torch functions from the real modules.

    Call it before the facades go in. Dynamo builds that table
    (``torch.cuda.is_available`` -> "an op to put in the graph") by name, once, at its
    import, and rebuilds it after :func:`clear_trace_rules`. Built while the facade is in
    place, the table would take the facade's functions for torch ops, and those not in
    dynamo's constant-folding lists (built from the real module when dynamo was imported
    before) would land in the graph: ``torch.cuda.is_available()`` fails ``fullgraph=True``
    after a ``disable()``/``enable()``. Built now, as at a first import, the facade's
    functions stay plain functions that dynamo traces or folds.
    """
    trace_rules = sys.modules.get("torch._dynamo.trace_rules")
    build = getattr(trace_rules, "get_torch_obj_rule_map", None)
    if build is not None:
        build()


def clear_trace_rules() -> None:
    """After the facades left: dynamo rebuilds its table of torch functions lazily, from
    the real modules."""
    trace_rules = sys.modules.get("torch._dynamo.trace_rules")
    clear = getattr(trace_rules, "clear_lru_cache", None)
    if clear is not None:
        clear()

"""The state of one activation: host, settings, policy state, decision cache, recorder.

The modes and wrappers hold a reference to the current :class:`Runtime` and ask it for
decisions. It caches the pure policy's answers per request (so a redirected factory costs a
dict lookup, not a parse), applies the ``cpu:-1`` toggle, converts decisions to
``torch.device`` objects once, and records redirects against the user's call site.

While dynamo traces, none of that is traced: decisions reach the graph as constants
computed at trace time (:meth:`Runtime._resolve_traced`), so compiled code takes no lock,
builds no exception and is guarded on the activation and the CPU override only.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from torchdevice import callsite
from torchdevice.compiling import _compiler
from torchdevice.errors import DeviceRequestError
from torchdevice.host import Host
from torchdevice.logs import redirects_logger as logger
from torchdevice.policy import (
    Action,
    Decision,
    DeviceSpec,
    PolicyState,
    Standing,
    decide,
    has_float64,
    stands_for,
)
from torchdevice.reporting import EventKind, MigrationReport
from torchdevice.reporting.recorder import Recorder

if TYPE_CHECKING:  # the settings model imports pydantic: only load it on enable()
    from types import FrameType

    from torchdevice.settings import Settings

__all__ = ["Runtime", "active", "by_serial", "constant_for_dynamo", "set_active"]

_is_compiling = torch.compiler.is_compiling
#: True only in code dynamo traces (eager code dynamo runs at trace time sees False).
_is_tracing = torch.compiler.is_dynamo_compiling

#: A cached resolution: the decision, its torch.device, how the report counts it, and
#: what the parsed request stands for (``policy.stands_for``; transfers use it).
Resolved = tuple[Decision, torch.device, "EventKind | None", "Standing | None"]
_F = TypeVar("_F", bound=Callable[..., Any])


class Runtime:
    """One activation's state; shared by every thread the activation covers."""

    def __init__(self, host: Host, settings: Settings, recorder: Recorder | None = None) -> None:
        #: This runtime's number in the process: traced code names the runtime by it
        #: (:func:`by_serial`), since dynamo before torch 2.13 passes no object to a
        #: constant function (``constant_for_dynamo``), only plain values.
        self.serial = next(_serials)
        _by_serial[self.serial] = self
        self.host = host
        self.settings = settings
        self.recorder = recorder if recorder is not None else Recorder()
        self._state = PolicyState(cpu_override=settings.cpu_override, keep_cpu=settings.keep_cpu)
        # Backend names registered at run time (a renamed PrivateUse1) are valid requests.
        extra = {torch._C._get_privateuse1_backend_name()}
        if host.device_type is not None:
            extra.add(host.device_type)
        self._extra_types = frozenset(extra)
        self._lock = threading.Lock()
        #: The function mode's table (function -> handler; ``intercepts.build_table``)
        #: and its distinct handlers, set once by :meth:`use_table`: compiled code looks
        #: handlers up here by index (``mode._traced_slot``), so a graph guards on this
        #: runtime, which later activations with the same host and settings reuse.
        self.table: Mapping[Callable[..., Any], Callable[..., Any]] = {}
        self.handlers: tuple[Callable[..., Any], ...] = ()
        #: The decision cache, keyed by (type, request): :meth:`resolve` fills it; the
        #: factory hot path (``intercepts._apply``) reads it without a call. Replaced
        #: whole when the CPU override turns, never changed in place otherwise.
        self.decisions: dict[tuple[type, object], Resolved] = {}
        self._devices: dict[DeviceSpec, torch.device] = {}
        # Per-decision application (device, report kind), keyed by id(decision); the
        # decisions are kept alive in _kept so their ids are never reused.
        self._applied: dict[int, tuple[torch.device, EventKind | None]] = {}
        self._kept: list[Decision] = []
        # The decision-shaped record of each device-module API the facades answered.
        self._api_decisions: dict[str, Decision] = {}
        accelerator = host.accelerator
        #: Where factories called without a device go; ``None`` leaves them alone.
        self.default_device: torch.device | None = (
            None if accelerator is None else self.torch_device(decide(None, host).device)
        )
        #: Device type that has no float64 (MPS): the dtype rule narrows float64 there.
        self.float64_device: str | None = (
            None if has_float64(host) or self.default_device is None
            else self.default_device.type
        )  # fmt: skip

    def use_table(self, table: Mapping[Callable[..., Any], Callable[..., Any]]) -> None:
        """Make ``table`` the function mode's table for this runtime (see ``table``)."""
        self.table = table
        self.handlers = tuple(dict.fromkeys(table.values()))

    # -- decisions ---------------------------------------------------------------------
    @property
    def state(self) -> PolicyState:
        """The current policy state (changes when ``cpu:-1`` toggles the override)."""
        return self._state

    def set_cpu_override(self, on: bool) -> None:
        """Turn the CPU override on or off (what ``cpu:-1`` toggles)."""
        with self._lock:
            if self._state.cpu_override != on:
                self._state = PolicyState(cpu_override=on, keep_cpu=self._state.keep_cpu)
                self.decisions = {}

    def keep_host_requests(self, reason: str) -> None:
        """From now on in this process, host requests stay on the CPU: device-less
        factories and explicit ``"cpu"`` (``keep_cpu``).

        For a fork child that must not touch the accelerator (a ``DataLoader`` worker of a
        process that used it): natively its host tensors are CPU tensors, and placing them
        on the accelerator would fail ("Cannot re-initialize CUDA in forked subprocess").
        """
        with self._lock:
            self.default_device = None
            self._state = PolicyState(cpu_override=self._state.cpu_override, keep_cpu=True)
            self.decisions = {}
            # A new number: graphs compiled before the fork guard on the old one, and their
            # device decisions are not this process's any more.
            self.serial = next(_serials)
            _by_serial[self.serial] = self
        logger.info("host requests stay on the CPU in this process: %s", reason)

    def decide(self, request: object) -> Decision:
        """The policy's decision for ``request``, cached; applies the ``cpu:-1`` toggle."""
        return self.resolve(request)[0]

    def resolve(self, request: object) -> Resolved:
        """Decision, ``torch.device``, report kind and what the request stands for
        (:data:`Resolved`) for ``request``: one dict lookup.

        Keyed by the request's type too, so ``1`` and ``True`` never share an entry.
        While dynamo traces, the answer comes from :func:`_traced_resolution` instead.
        """
        if _is_tracing():
            return self._resolve_traced(request)
        key = (type(request), request)
        try:
            resolved = self.decisions.get(key)
        except TypeError:  # unhashable request: let the policy raise its TypeError
            resolved = None
        if resolved is None:
            resolved = self._decide_new(request, key)
            if resolved[0].toggle_override:
                self.set_cpu_override(not self._state.cpu_override)
        return resolved

    def _decide_new(self, request: object, key: tuple[type, object]) -> Resolved:
        """Ask the policy about a request missing from the cache, and cache its answer.

        A ``cpu:-1`` toggle is never cached: each request flips the override again. The
        toggle itself is the caller's to apply.
        """
        try:
            decision = decide(request, self.host, self._state, self._extra_types)
        except DeviceRequestError:
            # A backend registered since this activation began (a renamed PrivateUse1)
            # is a valid device type too: learn its name and decide again.
            name = torch._C._get_privateuse1_backend_name()
            if name in self._extra_types:
                raise
            self._extra_types = self._extra_types | {name}
            decision = decide(request, self.host, self._state, self._extra_types)
        device, kind = self.applied(decision)
        resolved = (decision, device, kind, stands_for(decision.requested))
        if logger.isEnabledFor(logging.DEBUG):  # once per distinct request: it is cached
            logger.debug(
                "decision: %r -> %s (%s: %s)", request, device, decision.action, decision.reason
            )
        if not decision.toggle_override:
            with contextlib.suppress(TypeError):  # unhashable: decided again next time
                self.decisions[key] = resolved
        return resolved

    def _resolve_traced(self, request: object) -> Resolved:
        """:meth:`resolve` while dynamo traces: a constant the graph is specialised on.

        Dynamo runs :func:`_traced_resolution` eagerly at trace time instead of tracing
        it, and guards only on what the answer depends on: this runtime (by its serial), the
        CPU override and the request. So nothing traced takes a lock, builds an exception
        or reads the caches (whose growth would fail the guards and recompile), and no
        eager warm-up is needed.
        """
        if isinstance(request, (int, torch.SymInt)) and not isinstance(request, bool):
            # An index that dynamo made dynamic (it changed between calls) becomes a
            # constant again, guarded by value: a device is never symbolic.
            request = operator.index(request)
        flat = _traced_resolution(self.serial, self._state.cpu_override, request)
        device_spec, requested, action, reason, toggle, device, kind = flat
        decision = Decision(
            DeviceSpec(*device_spec), None if requested is None else DeviceSpec(*requested),
            action, reason, toggle,
        )  # fmt: skip
        if toggle:
            # Flipping the override is a side effect on this runtime, not a graph op:
            # a graph break runs it eagerly (fullgraph=True reports it as the reason).
            _graph_break(_TOGGLE_IN_GRAPH)
            self.set_cpu_override(not self._state.cpu_override)
        return decision, device, kind, stands_for(decision.requested)

    def torch_device(self, spec: DeviceSpec) -> torch.device:
        """``spec`` as a ``torch.device`` (built once per spec).

        The CPU is ``torch.device("cpu")`` without an index: that is what CPU tensors
        report as their device, and what ``torch.load`` restore locations understand.
        """
        if _is_tracing():
            return _traced_device(self.serial, spec.type, spec.index)
        device = self._devices.get(spec)
        if device is None:
            # Built with function modes off: this may run while a mode (ours, of another
            # activation) is live, and torch.device itself dispatches to modes.
            device_type = spec.type
            if self.host.device_type is not None and device_type == self.host.kind:
                device_type = self.host.device_type  # an extra backend's
            with torch._C.DisableTorchFunction():
                if spec.index is None or device_type == "cpu":
                    device = torch.device(device_type)
                else:
                    device = torch.device(device_type, spec.index)
            self._devices[spec] = device
        return device

    # -- recording ---------------------------------------------------------------------
    def applied(self, decision: Decision) -> tuple[torch.device, EventKind | None]:
        """The device ``decision`` names, and how the report counts it (None: not at all)."""
        hit = self._applied.get(id(decision))
        if hit is None:
            kind: EventKind | None = (
                "redirect" if decision.moved else "override" if decision.action == "override"
                else None
            )  # fmt: skip
            hit = (self.torch_device(decision.device), kind)
            with self._lock:
                self._kept.append(decision)
                self._applied[id(decision)] = hit
        return hit

    def place(
        self,
        request: object,
        api: str | Callable[..., Any],
        *,
        report: bool = True,
        method: str | None = None,
    ) -> tuple[Decision, torch.device]:
        """Where ``request`` goes: the decision and its device, reported when it moved.

        The one placement path of every intercept and wrapper: decide (one cached
        lookup), count a redirect or a ``cpu:-1`` override at the user's line (not while
        dynamo traces, nor with ``report=False`` for torch's own calls), and return the
        ``torch.device`` to use. ``method`` names the ``Module`` method the request came
        through (``"cuda"``, ``"to"``): overrides of it that call ``super()`` are skipped,
        so the row lands where the user called it (:func:`~torchdevice.callsite.past_overrides`).
        """
        resolved = None
        if not _is_tracing():  # resolve(), inlined for the cache hit: Tensor.to's hot path
            try:  # noqa: SIM105 - building a contextlib.suppress costs more than the lookup
                resolved = self.decisions.get((type(request), request))
            except TypeError:  # unhashable: resolve() lets the policy raise
                pass
        if resolved is None:
            resolved = self.resolve(request)
        decision, device, kind, _ = resolved
        # A device object was reported where it was made (``torch.device(...)``): its
        # uses (``x.to(device)``) are no lines to port.
        if kind is not None and report and type(request) is not torch.device \
                and not (_is_tracing() or _compiler._is_compiling_flag):  # fmt: skip
            # From a handler: place <- handler <- the mode's __torch_function__.
            frame = callsite.caller(2)
            if method is not None:
                frame = callsite.past_overrides(frame, method)
            self.recorder.hit(frame, api, decision, kind)
        return decision, device

    def note_device_api(self, api: str, frame: FrameType) -> None:
        """Count a call of a device's own module (``torch.cuda.synchronize``...) that a
        facade answered, at ``frame``'s line (a ``device-api`` row of the report)."""
        decision = self._api_decisions.get(api)
        if decision is None:
            module = api.split(".")[1]  # torch.cuda.X, torch.mps.X, torch.backends.mps.X
            if module == "backends":
                module = api.split(".")[2]
            answered = self.default_device
            device = DeviceSpec("cpu", 0) if answered is None else DeviceSpec(
                answered.type, answered.index
            )  # fmt: skip
            decision = Decision(
                device, DeviceSpec(module, None), "redirect",
                f"torch.{module} answered by the {self.host.kind} host's facade",
            )  # fmt: skip
            with self._lock:
                decision = self._api_decisions.setdefault(api, decision)
        self.recorder.hit(frame, api, decision, "device-api")

    def note_event(
        self, kind: EventKind, api: str, requested: str, decided: str, reason: str
    ) -> None:
        """Record an event that is not a policy decision (a fallback, a dtype rule)."""
        if _is_compiling():
            return
        site = callsite.site_of(callsite.user_frame(1))
        self.recorder.record(site, kind, api, requested, decided, reason)

    def report(self) -> MigrationReport:
        """The migration report of this activation so far."""
        return self.recorder.report(f"{self.host.kind} host, {self.host.device_name()}")


def constant_for_dynamo(fn: _F) -> _F:
    """Mark ``fn`` as ``torch._dynamo.assume_constant_result`` does, without importing dynamo.

    Dynamo calls a marked function at trace time with its arguments as Python constants
    (guarding on their sources) and puts the result in the graph as a constant: the
    function itself is never traced. Pass plain values (numbers, strings, devices, torch
    functions): torch 2.13 also passes objects, by identity, but earlier versions refuse
    them ("... is not a constant"), hence :attr:`Runtime.serial`.
    ``assume_constant_result`` sets only this attribute, and importing ``torch._dynamo`` to
    call it would cost every ``import torchdevice`` about a second.
    """
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


#: A resolution as plain constants: dynamo can read attributes of the objects a constant
#: function returns, but not run their properties, so the decision travels as its fields.
_Flat = tuple[
    tuple[str, "int | None"], "tuple[str, int | None] | None", Action, str, bool,
    torch.device, "EventKind | None",
]  # fmt: skip


@constant_for_dynamo
def _traced_resolution(serial: int, cpu_override: bool, request: object) -> _Flat:
    """The resolution of ``request`` as dynamo sees it: computed eagerly, at trace time.

    ``cpu_override`` is unused here but passed so that dynamo guards on it: the compiled
    code is specialised on the override and recompiles when it flips. The toggle itself is
    not applied here; :meth:`Runtime._resolve_traced` applies it outside the graph.
    """
    del cpu_override
    runtime = by_serial(serial)
    key = (type(request), request)
    try:
        resolved = runtime.decisions.get(key)
    except TypeError:
        resolved = None
    if resolved is None:
        resolved = runtime._decide_new(request, key)
    decision, device, kind, _ = resolved
    spec, requested = decision.device, decision.requested
    return (
        (spec.type, spec.index), None if requested is None else (requested.type, requested.index),
        decision.action, decision.reason, decision.toggle_override, device, kind,
    )  # fmt: skip


@constant_for_dynamo
def _traced_device(serial: int, device_type: str, index: int | None) -> torch.device:
    """:meth:`Runtime.torch_device` as dynamo sees it: a constant, computed eagerly.

    The spec travels as its fields: dynamo passes plain constants, not objects it made
    from an earlier constant result.
    """
    return by_serial(serial).torch_device(DeviceSpec(device_type, index))


def _graph_break(reason: str) -> None:
    """Break dynamo's graph here with ``reason`` (fullgraph=True raises with it).

    Only reached while dynamo traces, so ``torch._dynamo`` is loaded.
    """
    torch._dynamo.graph_break(msg=reason)


_TOGGLE_IN_GRAPH = (
    "torchdevice: 'cpu:-1' toggles the CPU override, a change to torchdevice's state that "
    "cannot be part of a graph; request it before the compiled region, or call "
    "torchdevice.set_cpu_override() there"
)


#: The runtime of the activation in force (``None`` while disabled). Activation sets it;
#: the wrappers, facades and observers read it through :func:`active` at call time, so
#: there is one slot, not a copy per installer.
_active: Runtime | None = None
_serials = itertools.count(1)
_by_serial: weakref.WeakValueDictionary[int, Runtime] = weakref.WeakValueDictionary()


def by_serial(serial: int) -> Runtime:
    """The runtime numbered ``serial`` (alive: a graph traced with it holds its mode)."""
    return _by_serial[serial]


def active() -> Runtime | None:
    """The active runtime, or ``None`` while torchdevice is disabled."""
    return _active


def set_active(runtime: Runtime | None) -> None:
    """Make ``runtime`` the active one (``None``: disabled). Only activation calls this."""
    global _active
    _active = runtime

"""The state of one activation: host, settings, policy state, decision cache, recorder.

The modes and wrappers hold a reference to the current :class:`Runtime` and ask it for
decisions. It caches the pure policy's answers per request (so a redirected factory costs a
dict lookup, not a parse), applies the ``cpu:-1`` toggle, converts decisions to
``torch.device`` objects once, and records redirects against the user's call site.

Every request is placed on one path: :meth:`Runtime.place` (decide, count the redirect at
the user's line, return the device and what the request stands for) over
:meth:`Runtime.resolve` (the toggle) over :meth:`Runtime.lookup` (the one read of the
decision cache). A factory called without a device is the request ``None``: where
device-less factories land (:attr:`Runtime.default_device` on an accelerator host, standing
for the host). While dynamo traces, none of that is traced: decisions reach the graph as
constants computed at trace time by :mod:`torchdevice.redirecting.compiling`, which reads
the same cache through :meth:`Runtime.lookup`. The one request a factory or ``Tensor.to``
does not place is the one :meth:`Runtime.runs_as_made` answers: nothing to decide, count or
mark (``Tensor.to`` keeps the copy rule).

One copy of that path is named here: the entry-points tier inlines :meth:`place`'s cached
path for an explicit device in its factory and ``Tensor.to`` wrappers
(``entry_points._counted``), and :meth:`runs_as_made` in both wrappers, because an
extra Python call on the redirected factory costs more than that tier's instruction budget
allows (benchmarks/README.md, "Figures behind the redirect's design").
``tests/test_entry_points.py::test_both_tiers_place_every_kind_of_request_alike`` runs every
kind of request through both tiers and compares devices, standings and rows
(``test_to_the_cpu_read_off_a_tensor_keeps_the_gpus_copy_rule``: identities); the device-less
factory, which both tiers place through :meth:`Runtime.place`, is checked there too
(``test_both_tiers_place_device_less_factories_through_runtime_place``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from torchdevice.errors import DeviceRequestError
from torchdevice.host import Host
from torchdevice.logs import redirects_logger as logger
from torchdevice.redirecting import callsite, compiling
from torchdevice.redirecting.compiling import Resolved, compiler, is_compiling, is_tracing
from torchdevice.redirecting.policy import (
    Decision,
    DeviceSpec,
    PolicyState,
    Standing,
    decide,
    has_float64,
)
from torchdevice.redirecting.policy import pins as pins_rule
from torchdevice.redirecting.standing import HOST_CPU, READ_CPU, REMEMBERED, requested
from torchdevice.reporting import EventKind, MigrationReport
from torchdevice.reporting.recorder import Recorder, api_name
from torchdevice.sites import site_of

if TYPE_CHECKING:  # the settings model imports pydantic: only load it on enable()
    from types import FrameType

    from torchdevice.settings import Settings

__all__ = ["Resolved", "Runtime", "active", "set_active"]

#: Why a device-less factory stays on the CPU (the decision of the request ``None``).
_DEFAULT_STAYS = "device-less factories stay on the CPU here"

#: The C type, bound at import: the entry-points tier puts a stand-in at ``torch.device``.
_DEVICE = torch.device
with torch._C.DisableTorchFunction():  # torch.device itself reaches function modes
    _CPU_DEVICE = torch.device("cpu")


class Runtime:
    """One activation's state; shared by every thread the activation covers."""

    def __init__(self, host: Host, settings: Settings, recorder: Recorder | None = None) -> None:
        #: This runtime's number in the process: compiled code names the runtime by it
        #: and guards on it (:func:`torchdevice.redirecting.compiling.register`).
        self.serial = compiling.register(self)
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
        #: and its distinct handlers, owned here and set once by :meth:`use_table`: every
        #: :class:`~torchdevice.redirecting.mode.DeviceMode` serving this runtime reads this table,
        #: and compiled code looks handlers up here by index
        #: (:func:`~torchdevice.redirecting.compiling.traced_slot`), so a graph guards on this
        #: runtime, which later activations with the same host and settings reuse.
        self.table: Mapping[Callable[..., Any], Callable[..., Any]] = {}
        self.handlers: tuple[Callable[..., Any], ...] = ()
        #: The decision cache, keyed by (type, request): read only by :meth:`lookup`.
        #: Replaced whole when the CPU override turns, never changed in place otherwise.
        self.decisions: dict[tuple[type, object], Resolved] = {}
        self._devices: dict[DeviceSpec, torch.device] = {}
        # The decision-shaped record of each device-module API the facades answered.
        self._api_decisions: dict[str, Decision] = {}
        accelerator = host.accelerator
        #: Where factories called without a device go; ``None`` leaves them alone. The
        #: device of :meth:`place`'s answer for the request ``None`` where it is not ``None``.
        self.default_device: torch.device | None = (
            None if accelerator is None else self.torch_device(decide(None, host).device)
        )
        cpu = DeviceSpec("cpu", 0)
        self._read_cpu: Resolved = (
            Decision(cpu, cpu, "unchanged", "a device read off a CPU tensor: where it is"),
            READ_CPU,  # not through torch_device: a new activation starts with nothing built
            None,
        )
        #: Where torch's own requests for the CPU go (``callsite.torch_names_cpu``): the
        #: CPU, whatever the policy does with the user's.
        self._torch_cpu: tuple[Decision, torch.device, Standing | None] = (
            Decision(cpu, cpu, "unchanged", "torch's own request for the CPU"),
            _CPU_DEVICE,
            "host",
        )
        #: Device type that has no float64 (MPS): the dtype rule narrows float64 there.
        self.float64_device: str | None = (
            None if has_float64(host) or self.default_device is None else self.default_device.type
        )

    def use_table(self, table: Mapping[Callable[..., Any], Callable[..., Any]]) -> None:
        """Make ``table`` the function mode's table for this runtime (see ``table``).

        Once per runtime: compiled graphs guard on the runtime, not on its table, so a
        second, different table would leave them looking up handlers by stale indices.
        """
        if self.table and self.table is not table:
            raise RuntimeError("torchdevice: this runtime's function table is already set")
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
            self.serial = compiling.register(self)
        logger.info("host requests stay on the CPU in this process: %s", reason)

    def decide(self, request: object) -> Decision:
        """The policy's decision for ``request``, cached; applies the ``cpu:-1`` toggle."""
        return self.resolve(request)[0]

    def resolve(self, request: object) -> Resolved:
        """Decision, ``torch.device`` and report kind (:data:`Resolved`) for ``request``,
        with the ``cpu:-1`` toggle applied.

        While dynamo traces, the answer is a constant of the graph instead
        (:func:`~torchdevice.redirecting.compiling.resolve_traced`).
        """
        if is_tracing():
            return compiling.resolve_traced(self, request)
        resolved = self.lookup(request)
        if resolved[0].toggle_override:
            self.set_cpu_override(not self._state.cpu_override)
        return resolved

    def runs_as_made(self, request: object) -> bool:
        """Whether a factory or ``Tensor.to`` called with ``request`` needs nothing of the
        runtime: the CPU as a CPU tensor reports it (``device=x.device`` and
        ``y.to(x.device)``, which Transformers makes several times a token) where every CPU
        request stays on the CPU, unreported, standing for the host (a CPU-only host, a
        fork child keeping its host requests), and not a device object remembered as
        standing for the device.

        The call then runs as made: no decision, row or mark. ``Tensor.to`` keeps the copy
        rule (a tensor that stands for the device comes back as a copy). The entry-points
        tier's factory and ``Tensor.to`` wrappers inline this test;
        ``tests/test_entry_points.py`` runs such requests through both tiers.
        """
        return (
            self.default_device is None
            and type(request) is _DEVICE
            and request == HOST_CPU
            and id(request) not in REMEMBERED
        )

    def lookup(self, request: object) -> Resolved:
        """The cached resolution of ``request``, decided and cached on a miss; the toggle
        is the caller's to apply.

        The one read of the decision cache, shared by the eager and the traced paths (the
        entry-points tier's inlined copy aside, named in the module's docstring).
        Keyed by the request's type too, so ``1`` and ``True`` never share a cached decision.
        """
        if request is READ_CPU:  # where a CPU tensor is, not a request for the host
            return self._read_cpu
        key = (type(request), request)
        try:
            resolved = self.decisions.get(key)
        except TypeError:  # unhashable request: let the policy raise its TypeError
            resolved = None
        if resolved is None:
            resolved = self._decide_new(request, key)
        return resolved

    def _decide_new(self, request: object, key: tuple[type, object]) -> Resolved:
        """Ask the policy about a request missing from the cache, and cache its answer.

        A ``cpu:-1`` toggle is never cached: each request flips the override again.
        """
        if request is None and self.default_device is None:
            # Device-less factories stay on the CPU: a CPU-only host (the policy's answer
            # too) or a process that keeps its host requests (:meth:`keep_host_requests`).
            decision = Decision(DeviceSpec("cpu", 0), None, "default", _DEFAULT_STAYS)
        else:
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
        device = self.torch_device(decision.device)
        resolved = (decision, device, _report_kind(decision))
        if logger.isEnabledFor(logging.DEBUG):  # once per distinct request: it is cached
            logger.debug(
                "decision: %r -> %s (%s: %s)", request, device, decision.action, decision.reason
            )
        if not decision.toggle_override:
            with contextlib.suppress(TypeError):  # unhashable: decided again next time
                self.decisions[key] = resolved
        return resolved

    def torch_device(self, spec: DeviceSpec) -> torch.device:
        """``spec`` as a ``torch.device`` (built once per spec).

        The CPU is ``torch.device("cpu")`` without an index: that is what CPU tensors
        report as their device, and what ``torch.load`` restore locations understand.
        """
        if is_tracing():
            return compiling.traced_device(self, spec)
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

    # -- placing and recording ------------------------------------------------------------
    def place(
        self,
        request: object,
        api: str | Callable[..., Any],
        report: bool = True,
        method: str | None = None,
        where: Callable[[], FrameType | None] | None = None,
    ) -> tuple[Decision, torch.device, Standing | None]:
        """Where ``request`` goes: the decision, its device and what the request stands
        for (``None`` while torch compiles: marks are for eager tensors), reported when it
        moved.

        The one placement path of every intercept, wrapper and kernel (the entry-points
        tier's inlined copy for an explicit device is named in the module's docstring), a
        device-less factory's too (``request`` ``None``): resolve (one cached lookup), count
        a redirect or a ``cpu:-1`` override at the user's line (not while torch compiles,
        nor with ``report=False`` for torch's own calls), and return the ``torch.device`` to
        use. Callers do not ask the compile check again: they read the standing
        (:func:`~torchdevice.redirecting.standing.requested`: a remembered device object's,
        else its parsed value's), ``None`` while torch compiles. ``api`` names the call in
        the report, and the path from the mode to here
        (:func:`~torchdevice.redirecting.callsite.caller`). ``report``, ``method`` and
        ``where`` are not keyword-only: Python 3.11 specialises calls of functions without
        keyword-only parameters (``CALL_PY_WITH_DEFAULTS``), and this is the hot path of
        every redirect. ``method`` names the ``Module`` method the request came through
        (``"cuda"``, ``"to"``): overrides of it that call ``super()`` are skipped, so the
        row lands where the user called it
        (:func:`~torchdevice.redirecting.callsite.past_overrides`). ``where`` finds the
        user's frame instead, for a caller that is not below the mode or a wrapper (the
        dispatcher's kernels of :mod:`torchdevice.patches.net`); it runs only when there is
        a row.
        """
        if is_tracing() or compiler._is_compiling_flag:  # compiling: nothing recorded
            decision, device, _ = self.resolve(request)
            return decision, device, None
        # resolve(), less its compile check: this is the hot path of every redirect.
        decision, device, kind = self.lookup(request)
        if decision.toggle_override:
            self.set_cpu_override(not self._state.cpu_override)
        standing = decision.standing
        if (
            kind is not None
            and standing == "host"
            and where is None
            and callsite.torch_names_cpu(callsite.entered(api))
        ):
            return self._torch_cpu  # torch's own CPU request: stays, unreported
        if type(request) is _DEVICE:
            # It may stand for another side than its type says (a remembered object:
            # standing.device_object).
            standing = requested(request, standing)
            if where is None:
                # Reported where it was made (``torch.device(...)``): its uses
                # (``x.to(device)``) are no lines to port. A kernel's device (``where``)
                # is the request as torch parsed it from the user's call: reported.
                return decision, device, standing
        if kind is not None and report:
            if where is not None:
                frame = where()
            else:
                frame = callsite.caller(api)
                if method is not None:
                    frame = callsite.past_overrides(frame, method)
            self.recorder.hit(frame, api, decision, kind)
        return decision, device, standing

    def pins(self, device_type: str | None) -> bool:
        """Whether ``pin_memory=True`` can mean anything on this host for a tensor on
        ``device_type`` (``None``: not known yet): the pin-memory rule
        (:func:`torchdevice.redirecting.policy.pins`)."""
        return pins_rule(self.host, device_type)

    def narrow_float64(
        self, api: str | Callable[..., Any], device: torch.device | None, dtype: Any
    ) -> Any:
        """The dtype rule (docs/fallback.md): MPS has no float64, so float64 there is
        float32; any other ``dtype`` (and float64 elsewhere) is returned as is.

        The one copy of the rule, for the function mode's handlers and the dispatcher's
        kernels alike. Logged and reported once per call site as a ``dtype`` event
        (``api`` names the call: a string, or the torch function). Only explicit float64
        requests and float64 data are narrowed; a float64 *default* dtype is left to torch.
        """
        if dtype is torch.float64 and device is not None and device.type == self.float64_device:
            self.note_event(
                "dtype",
                api if isinstance(api, str) else api_name(api),
                f"{device}, float64",
                f"{device}, float32",
                "MPS has no float64: float32 on the device",
            )
            return torch.float32
        return dtype

    def note_device_api(self, api: str, frame: FrameType) -> None:
        """Count a call of a device's own module (``torch.cuda.synchronize``...) that a
        facade answered, at ``frame``'s line (a ``device-api`` row of the report)."""
        decision = self._api_decisions.get(api)
        if decision is None:
            module = api.split(".")[1]  # torch.cuda.X, torch.mps.X, torch.backends.mps.X
            if module == "backends":
                module = api.split(".")[2]
            answered = self.default_device
            device = (
                DeviceSpec("cpu", 0)
                if answered is None
                else DeviceSpec(answered.type, answered.index)
            )
            decision = Decision(
                device,
                DeviceSpec(module, None),
                "redirect",
                f"torch.{module} answered by the {self.host.kind} host's facade",
            )
            with self._lock:
                decision = self._api_decisions.setdefault(api, decision)
        self.recorder.hit(frame, api, decision, "device-api")

    def note_event(
        self, kind: EventKind, api: str, requested: str, decided: str, reason: str
    ) -> None:
        """Record an event that is not a policy decision (a fallback, a dtype rule)."""
        if is_compiling():
            return
        site = site_of(callsite.user_frame(1))
        self.recorder.record(site, kind, api, requested, decided, reason)

    def report(self) -> MigrationReport:
        """The migration report of this activation so far."""
        return self.recorder.report(f"{self.host.kind} host, {self.host.device_name()}")


def _report_kind(decision: Decision) -> EventKind | None:
    """How the report counts ``decision``: a redirect, a ``cpu:-1`` override, or not at all."""
    if decision.moved:
        return "redirect"
    return "override" if decision.action == "override" else None


#: The runtime of the activation in force (``None`` while disabled). Activation sets it;
#: the wrappers, facades and observers read it through :func:`active` at call time, so
#: there is one slot, not a copy per installer.
_active: Runtime | None = None


def active() -> Runtime | None:
    """The active runtime, or ``None`` while torchdevice is disabled."""
    return _active


def set_active(runtime: Runtime | None) -> None:
    """Make ``runtime`` the active one (``None``: disabled). Only activation calls this."""
    global _active
    _active = runtime

"""``torch.distributed`` written for NCCL, run on the backend the host has.

CUDA-first training scripts call ``init_process_group("nccl")``, ``new_group(backend=
"nccl")`` and ``DistributedDataParallel(model, device_ids=[local_rank])``. Off CUDA hosts
NCCL does not exist, so while redirecting:

* the backend a script asks for goes through :func:`torchdevice.redirecting.policy.resolve_backend`
  (``"nccl"`` -> ``"gloo"``, ``"cuda:nccl,cpu:gloo"`` -> ``"gloo"``), logged and reported at
  the user's line; ``dist.is_nccl_available()`` answers as ``torch.cuda.is_available()``
  does (true unless ``cuda_available=False``), so scripts that check it take the NCCL path
  that is then resolved;
* ``DistributedDataParallel`` drops ``device_ids``/``output_device``, which torch accepts
  for CUDA modules only (every rank's model is on the one real device), logged and reported;
* on an accelerator gloo cannot take (MPS, or the simulated accelerator of the tests), the
  collectives scripts and DDP use stage through CPU memory: the device tensors are copied
  to the CPU, the collective runs there, the results are copied back in place. The
  ``torch.distributed`` functions are wrapped for that; DDP, whose C++ reducer calls its
  process group directly (parameter broadcast, shape check, bucketed gradient all-reduce),
  is given a :class:`StagedGroup` around its group.

Every ``torch.distributed`` function that queues work for a process group (collectives,
point-to-point, barriers, object collectives, DDP's parameter broadcast and shape check)
runs with no function mode on the calling thread's stack, on every host: see
:func:`off_the_stack` for why (a clean process exit). On CUDA hosts nothing else changes.
Every change goes through the :mod:`~torchdevice.ledger`.
Functions bound before enabling (``from torch.distributed import init_process_group``)
keep the originals, as for the other wrappers.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import _pop_mode, _push_mode

from torchdevice import ledger
from torchdevice.patches import gloo_workers, nccl_forms
from torchdevice.redirecting.compiling import is_compiling
from torchdevice.redirecting.policy import resolve_backend
from torchdevice.redirecting.runtime import Runtime, active

__all__ = ["GROUP", "StagedGroup", "install", "off_the_stack", "spots", "staging_device"]

#: The ledger group of these wrappers.
GROUP = "distributed"

_ORIGINAL_INIT = c10d.init_process_group
_ORIGINAL_NEW_GROUP = c10d.new_group
_ORIGINAL_IS_NCCL = c10d.is_nccl_available
_ORIGINAL_DDP_INIT = DistributedDataParallel.__dict__["__init__"]
#: The collectives staged through CPU memory on hosts whose device gloo cannot take.
#: ``all_gather_single``/``reduce_scatter_single`` are torch 2.13's names of the
#: ``*_into_tensor``/``*_tensor`` forms (which now call them).
_STAGED_FUNCTIONS = tuple(
    name
    for name in (
        "all_reduce",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce",
        "all_to_all_single",
        "all_to_all",
        "all_gather_single",
        "reduce_scatter_single",
        "gather",
        "scatter",
    )
    if hasattr(c10d, name)
)
_ORIGINAL_COLLECTIVES: dict[str, Callable[..., Any]] = {
    name: getattr(c10d, name) for name in _STAGED_FUNCTIONS
}
#: The other functions that queue work for a process group (or shut it down), run
#: natively and off the stack: objects and barriers build CPU tensors of their own; the
#: point-to-point and gather/scatter forms take CPU tensors (gloo takes no others).
_NATIVE_FUNCTIONS = (
    "barrier",
    "monitored_barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    "send_object_list",
    "recv_object_list",
    "destroy_process_group",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "all_reduce_coalesced",
    "all_gather_coalesced",
)
_ORIGINAL_NATIVE: dict[str, Callable[..., Any]] = {
    name: getattr(c10d, name) for name in _NATIVE_FUNCTIONS if hasattr(c10d, name)
}
#: C++ entry points DDP calls through ``torch.distributed`` (parameter and buffer
#: broadcast, the parameter shape check): they queue work too.
_DDP_ENTRY_POINTS = ("_broadcast_coalesced", "_verify_params_across_processes")
_ORIGINAL_ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    name: getattr(dist, name) for name in _DDP_ENTRY_POINTS if hasattr(dist, name)
}


@contextmanager
def off_the_stack() -> Iterator[None]:
    """Run the block with no function mode on this thread's stack, then put them back.

    A process group's work keeps a copy of the calling thread's thread-local state
    (``at::ThreadLocalState``), function-mode stack included: one reference to each mode's
    ``SafePyObject``. The gloo worker thread that runs the work usually drops the work
    last, and when the stack has since been rebuilt (``handle_torch_function`` pops the top
    mode and pushes it back as a new entry for every Python-level torch function), that
    is the entry's last reference: the worker takes the GIL to release the mode. If the
    main thread is finalizing the interpreter by then, taking the GIL ends the worker
    thread (``pthread_exit``) inside that destructor, and the process aborts with
    "terminate called without an active exception" after the script has finished
    (issue 19). Work queued with an empty stack holds no Python object, and its worker
    never takes the GIL. torch's own code inside runs natively: none of these functions
    is overridable, and what torch builds there (pickled objects, barrier tensors) stays
    where torch puts it. User modes are off for that time too, and back after, in order.
    """
    if is_compiling():  # traced, not run: leave the stack to dynamo
        with torch._C.DisableTorchFunction():
            yield
        return
    popped = [_pop_mode() for _ in range(torch._C._len_torch_function_stack())]  # type: ignore[no-untyped-call]
    try:
        with torch._C.DisableTorchFunction():
            yield
    finally:
        for entry in reversed(popped):
            _push_mode(entry)  # type: ignore[no-untyped-call]


#: How long the exit handler waits for gloo's workers to let go of the tensors held, and
#: then for them to be idle.
_RELEASE_WAIT_S = 2.0
#: Held tensors past which a call waits for the oldest to be let go (a bound on memory).
_HELD_MAX = 64


def _given_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors a ``torch.distributed`` call was given, in lists (two deep) too."""
    found: list[torch.Tensor] = []
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor):
                found.append(item)
            elif isinstance(item, (list, tuple)):
                found.extend(inner for inner in item if isinstance(inner, torch.Tensor))
    return found


class _Held:
    """Tensors a synchronous collective returned while gloo's worker still held them, each
    with the use count it returns to once the worker lets go; kept (a Python reference)
    until then, so that the worker's drop is never a tensor's last reference.

    Let go of at the next synchronous collective, or at exit (:meth:`at_exit`, an
    ``atexit`` handler registered with the first process group or tensor held, before the
    interpreter finalizes: it waits, bounded, for the workers and then drops them in the
    main thread). A forked child drops what its parent held without waiting: the workers
    are not there.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tensors: list[tuple[torch.Tensor, int]] = []
        self._pid = 0  # the process the list belongs to; 0: no exit handler yet

    def __bool__(self) -> bool:
        return bool(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is held now."""
        return any(kept is tensor for kept, _ in self._tensors)

    def keep(self, still: list[tuple[torch.Tensor, int]]) -> None:
        """Let go of what the workers released; keep ``still`` (tensors a worker holds now,
        each with the use count it returns to)."""
        with self._lock:
            self._claim()
            kept = [
                (tensor, count)
                for tensor, count in self._tensors
                if tensor._use_count() > count  # type: ignore[attr-defined]
            ]
            kept.extend(still)
            if len(kept) > _HELD_MAX:
                self._wait(kept[: len(kept) - _HELD_MAX])
                del kept[: len(kept) - _HELD_MAX]
            self._tensors = kept

    def watch(self) -> None:
        """Make sure :meth:`at_exit` runs in this process: called when a process group is
        made, since DDP's own work leaves the workers something to drop (see
        :mod:`torchdevice.patches.gloo_workers`) even when no tensor is ever held."""
        with self._lock:
            self._claim()

    def _claim(self) -> None:
        """Register the exit handler once; forget a parent's tensors in a forked child
        (its workers are not here). Called with the lock held."""
        if self._pid != os.getpid():
            if not self._pid:
                atexit.register(self.at_exit)
            self._pid = os.getpid()
            self._tensors.clear()

    @staticmethod
    def _wait(entries: list[tuple[torch.Tensor, int]]) -> None:
        """Wait (bounded, yielding the GIL) for the workers to let go of ``entries``."""
        deadline = time.monotonic() + _RELEASE_WAIT_S
        for tensor, count in entries:
            while tensor._use_count() > count and time.monotonic() < deadline:  # type: ignore[attr-defined]
                time.sleep(0.0005)

    def at_exit(self) -> None:
        """Before the interpreter finalizes: wait for the workers to let go of the tensors
        held, then until none of them can still take the GIL (a tensor's Python object is
        given back after its count has fallen; DDP's works hold torch's own Python
        objects: :func:`~torchdevice.patches.gloo_workers.wait_until_idle`), then drop
        everything in the main thread."""
        with self._lock:
            if self._pid == os.getpid():
                self._wait(self._tensors)
                gloo_workers.wait_until_idle(_RELEASE_WAIT_S)
            self._tensors.clear()


#: The tensors gloo's workers still hold after synchronous collectives returned.
held = _Held()


def _released(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``original`` so that, called synchronously, the tensors it was given outlive
    gloo's hold on them (:data:`held`).

    A gloo work holds its tensors (``at::Tensor``) until the worker thread drops the work,
    which it does just after marking it complete: right after a synchronous collective
    returns, the worker still holds them about one time in three on a busy machine
    (``Tensor._use_count()`` above its count before the call). If the caller's last
    Python reference goes in that window (``total`` of ``dist.all_reduce(total)`` at the
    end of a function, or a staged CPU copy), PyTorch keeps the tensor's Python object
    alive for the C++ owner, and the worker must take the GIL to free it. When that
    happens while the main thread finalizes the interpreter, taking the GIL ends the
    worker thread inside the work's destructor and the rank aborts ("terminate called
    without an active exception", issue 19: native stack in docs/limitations.md). Holding
    a reference until the worker let go closes the window without waiting for it (a wait
    after every call cost about 50 us of a 36 us all-reduce, benchmarks/README.md).
    Natively the same window exists; calls with ``async_op=True`` return their work to
    the caller, who decides when the tensors go. The worker's drop still takes the GIL
    (torch 2.13 gives the Python reference back once the C++ count has fallen to one, after
    it fell): :meth:`_Held.at_exit` waits for the workers to be idle before the
    interpreter finalizes (:mod:`torchdevice.patches.gloo_workers`).
    """

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tensors = _given_tensors(args, kwargs)
        counts = [tensor._use_count() for tensor in tensors]  # type: ignore[attr-defined]
        result = original(*args, **kwargs)
        if result is None:
            still = [
                (tensor, count)
                for tensor, count in zip(tensors, counts, strict=True)
                if tensor._use_count() > count  # type: ignore[attr-defined]
            ]
            if still or held:
                held.keep(still)
        return result

    return wrapper


def _off_the_stack(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``original`` (a C++ entry point DDP calls) to run :func:`off_the_stack`."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with off_the_stack():
            return original(*args, **kwargs)

    return wrapper


def staging_device(rt: Runtime | None) -> str | None:
    """The device type whose tensors must stage through CPU memory: the accelerator of a
    host without CUDA (gloo takes CPU and CUDA tensors only), else ``None``."""
    if rt is None or rt.host.kind != "mps" or rt.default_device is None:
        return None
    return rt.default_device.type


# -- the backend rule ------------------------------------------------------------------
def _resolved(rt: Runtime, backend: Any, api: str) -> Any:
    """``backend`` as the host runs it, noted at the user's line when it changed."""
    if not isinstance(backend, str):
        return backend
    decision = resolve_backend(backend, rt.host)
    if not decision.moved:
        return backend
    rt.note_event("redirect", api, decision.requested, decision.backend, decision.reason)
    return decision.backend


def _with_backend(original: Callable[..., Any], api: str) -> Callable[..., Any]:
    """Wrap ``original`` so its ``backend`` argument (by keyword or position) is resolved.

    torch's own code runs natively (function modes off): it builds ``torch.device("cpu")``
    to register gloo for the CPU, which the policy would send to the accelerator. Off
    CUDA hosts a ``device_id`` (NCCL's eager binding to a GPU) is dropped: gloo binds to
    no device, and torch rejects the CPU as one.
    """
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt = active()
        if rt is None:
            return original(*args, **kwargs)
        bound = signature.bind_partial(*args, **kwargs)
        backend = bound.arguments.get("backend")
        if "backend" in bound.arguments:
            bound.arguments["backend"] = _resolved(rt, bound.arguments["backend"], api)
        device_id = bound.arguments.get("device_id")
        if device_id is not None and rt.host.kind != "cuda":
            # It binds NCCL to a GPU; torch wants an accelerator with an index, and gloo
            # (CPU, or device tensors staged through CPU) binds to none.
            bound.arguments["device_id"] = None
            rt.note_event(
                "redirect",
                api,
                f"device_id={device_id}",
                "device_id=None",
                f"gloo binds to no device; {rt.host.kind} host",
            )
        with off_the_stack():
            result = original(*bound.args, **bound.kwargs)
        held.watch()  # its workers are waited for at exit
        _mark_nccl(api, backend, bound.arguments.get("backend"), result)
        return result

    return wrapper


def _mark_nccl(api: str, requested: Any, resolved: Any, result: Any) -> None:
    """Remember the group a script created for NCCL, so its collectives take NCCL's forms
    (:mod:`torchdevice.patches.nccl_forms`); a ``new_group`` without a backend inherits the
    default group's."""
    if not dist.is_initialized():
        return
    if requested is not resolved:  # "nccl" resolved to gloo
        nccl_forms.mark_nccl_group(
            c10d._get_default_group() if api.endswith("init_process_group") else result
        )
    elif api.endswith("new_group") and requested is None and nccl_forms.is_nccl_group(None):
        nccl_forms.mark_nccl_group(result)


init_process_group = _with_backend(_ORIGINAL_INIT, "torch.distributed.init_process_group")
new_group = _with_backend(_ORIGINAL_NEW_GROUP, "torch.distributed.new_group")


@functools.wraps(_ORIGINAL_IS_NCCL)
def is_nccl_available() -> bool:
    """True off CUDA hosts while ``torch.cuda.is_available()`` answers true: the NCCL
    path a script then takes is resolved to gloo. The real answer on CUDA hosts."""
    rt = active()
    if rt is None or rt.host.kind == "cuda":
        return bool(_ORIGINAL_IS_NCCL())
    return rt.settings.cuda_available


# -- staging through CPU memory --------------------------------------------------------
def _to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """A real CPU copy (function modes off: the policy would send "cpu" to the device)."""
    with torch._C.DisableTorchFunction():
        return tensor.detach().to("cpu", copy=True)


class _Stage:
    """The CPU stand-ins of one collective's device tensors, and their copy back."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def tensor(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.device.type == self.device_type:
            staged = _to_cpu(value)
            self.pairs.append((value, staged))
            return staged
        return value

    def tree(self, value: Any) -> Any:
        """Stage a tensor, or every tensor of a (nested) list."""
        if isinstance(value, list):
            return [self.tree(item) for item in value]
        return self.tensor(value)

    def back(self) -> None:
        """Copy every staged result back into its device tensor, in place."""
        with torch._C.DisableTorchFunction(), torch.no_grad():
            for device_tensor, staged in self.pairs:
                device_tensor.copy_(staged)


def _run_staged(
    original: Callable[..., Any],
    api: str,
    device_type: str | None,
    bound: inspect.BoundArguments,
) -> Any:
    """``original`` on ``bound``; on hosts that stage, with the device tensors copied to
    the CPU and the results copied back in place (finished work for ``async_op=True``)."""
    if device_type is None:
        return original(*bound.args, **bound.kwargs)
    stage = _Stage(device_type)
    for key, value in bound.arguments.items():
        bound.arguments[key] = stage.tree(value)
    if not stage.pairs:
        with torch._C.DisableTorchFunction():
            return original(*bound.args, **bound.kwargs)
    asked_async = bool(bound.arguments.get("async_op", False))
    if "async_op" in bound.signature.parameters:
        bound.arguments["async_op"] = False
    rt = active()
    if rt is not None:
        rt.note_event("redirect", api, device_type, "cpu", "gloo takes no device tensors: staged")
    with torch._C.DisableTorchFunction():
        original(*bound.args, **bound.kwargs)
    group = bound.arguments.get("group") or c10d._get_default_group()
    if group in c10d._world.pg_coalesce_state:  # recorded: it runs at the manager's exit
        _PENDING.setdefault(group, []).append(stage)
    else:
        stage.back()
    return nccl_forms.DoneWork([pair[0] for pair in stage.pairs]) if asked_async else None


#: Stages of collectives a ``_coalescing_manager`` recorded, copied back at its exit.
_PENDING: dict[dist.ProcessGroup, list[_Stage]] = {}
_ORIGINAL_COALESCING = c10d._coalescing_manager


@contextmanager
def _coalescing_manager(
    group: dist.ProcessGroup | None = None,
    device: torch.device | None = None,
    async_ops: bool = False,
) -> Iterator[Any]:
    """torch's ``_coalescing_manager``; on hosts that stage, the staged collectives it
    recorded (which run at its exit, on the CPU copies) are copied back after it."""
    if staging_device(active()) is None:
        with _ORIGINAL_COALESCING(group, device, async_ops) as manager:
            yield manager
        return
    key = group or c10d._get_default_group()
    try:
        with _ORIGINAL_COALESCING(group, device, async_ops) as manager:
            yield manager
        stages = _PENDING.get(key, [])
        if stages:
            manager.wait()  # with async_ops, the coalesced work must end before the copy
        for stage in stages:
            stage.back()
    finally:
        _PENDING.pop(key, None)


def _runner(name: str, device_type: str | None) -> nccl_forms.Run:
    """Run the collective ``name`` from bound arguments, as the host runs it."""
    return functools.partial(_run_staged, _RELEASED[name], f"torch.distributed.{name}", device_type)


def _collective(name: str) -> Callable[..., Any]:
    """Wrap the collective ``name``: on a group created for NCCL its NCCL-only forms are
    rewritten into gloo's (:mod:`torchdevice.patches.nccl_forms`), and device tensors gloo cannot
    take stage through CPU memory."""
    native = _ORIGINAL_COLLECTIVES[name]
    original = _RELEASED[name]
    signature = inspect.signature(native)
    adapter = nccl_forms.ADAPTERS.get(name)
    # A reduction whose op is not PREMUL_SUM, with nothing to stage, runs as it is: told
    # from the op's place in the call, without binding it (the per-step all-reduce).
    op_at = list(signature.parameters).index("op") if name in nccl_forms.PREMUL_ONLY else -1

    @functools.wraps(native)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with off_the_stack():  # see off_the_stack: the work it queues
            rt = active()
            if rt is None or rt.host.kind == "cuda":
                return native(*args, **kwargs)
            device_type = staging_device(rt)
            if op_at >= 0 and device_type is None:
                op = kwargs["op"] if "op" in kwargs else args[op_at] if len(args) > op_at else None
                if op is None or not nccl_forms.is_premul(op):
                    return original(*args, **kwargs)
            bound = signature.bind_partial(*args, **kwargs)
            if adapter is None or not nccl_forms.is_nccl_group(bound.arguments.get("group")):
                if device_type is None:
                    return original(*args, **kwargs)
                return _run_staged(original, f"torch.distributed.{name}", device_type, bound)
            run = _runner(name, device_type)
            if name == "all_to_all":
                return adapter(run, bound, _runner("all_to_all_single", device_type))
            return adapter(run, bound)

    return wrapper


def _native(name: str) -> Callable[..., Any]:
    """Wrap ``name`` to run with function modes off on hosts that stage: torch builds its
    own CPU tensors and ``torch.device("cpu")`` there (pickled objects, barrier options),
    which the policy would send to the accelerator that gloo cannot take. Off CUDA hosts a
    synchronous call returns once gloo has let go of its tensors (:func:`_released`)."""
    native = _ORIGINAL_NATIVE[name]
    released = _released(native)
    signature = inspect.signature(native)

    @functools.wraps(native)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt = active()
        call = native if rt is None or rt.host.kind == "cuda" else released
        if name == "barrier" and staging_device(rt) is not None:
            # NCCL picks the barrier's GPU from ``device_ids``; torch would bind gloo to
            # the accelerator it cannot take, and gloo itself ignores them.
            bound = signature.bind_partial(*args, **kwargs)
            bound.arguments.pop("device_ids", None)
            args, kwargs = bound.args, bound.kwargs
        with off_the_stack():
            return call(*args, **kwargs)

    return wrapper


#: The collectives as called off CUDA hosts: returning once gloo lets go (:func:`_released`).
_RELEASED = {name: _released(original) for name, original in _ORIGINAL_COLLECTIVES.items()}
_STAGED = {name: _collective(name) for name in _STAGED_FUNCTIONS}
_STAGED.update({name: _native(name) for name in _ORIGINAL_NATIVE})
_ENTRY_POINTS = {
    name: _off_the_stack(original) for name, original in _ORIGINAL_ENTRY_POINTS.items()
}


class StagedGroup(dist.ProcessGroup):
    """A process group whose collectives stage device tensors through CPU memory.

    DDP's C++ reducer and its start-up checks call their process group's methods
    directly, with device tensors. This group runs each of those methods on ``inner``
    (the gloo group the script initialised) with CPU copies, then copies the results back
    in place and returns finished work whose future holds the device tensors.
    """

    def __init__(self, inner: dist.ProcessGroup, device_type: str) -> None:
        # The Python trampoline's constructor takes (rank, size); the stub lists the C++ one.
        super().__init__(inner.rank(), inner.size())  # type: ignore[call-arg]
        self.inner = inner
        self.device_type = device_type

    def _run(self, method: str, *args: Any) -> dist.Work:
        """``inner.method(*args)`` on CPU copies of the device tensors, copied back."""
        stage = _Stage(self.device_type)
        staged = [stage.tree(arg) for arg in args]
        getattr(self.inner, method)(*staged).wait()
        stage.back()
        return nccl_forms.DoneWork([pair[0] for pair in stage.pairs])

    def getBackendName(self) -> str:
        return f"staged {self.inner.name()}"

    def name(self) -> str:
        return self.getBackendName()

    # The (tensors, options) forms the trampoline calls; the stubs list every overload.
    def allreduce(self, tensors: Any, opts: Any) -> dist.Work:  # type: ignore[override]
        return self._run("allreduce", tensors, opts)

    def allreduce_coalesced(self, tensors: Any, opts: Any) -> dist.Work:  # type: ignore[override]
        return self._run("allreduce_coalesced", tensors, opts)

    def broadcast(self, tensors: Any, opts: Any) -> dist.Work:  # type: ignore[override]
        return self._run("broadcast", tensors, opts)

    def allgather(self, outputs: Any, inputs: Any, opts: Any) -> dist.Work:  # type: ignore[override]
        return self._run("allgather", outputs, inputs, opts)

    def _allgather_base(self, output: Any, input: Any, opts: Any) -> dist.Work:  # type: ignore[override]
        return self._run("_allgather_base", output, input, opts)

    def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any) -> dist.Work:  # type: ignore[override]
        return self._run("reduce_scatter", outputs, inputs, opts)

    def _reduce_scatter_base(self, output: Any, input: Any, opts: Any) -> dist.Work:
        return self._run("_reduce_scatter_base", output, input, opts)

    def barrier(self, opts: Any) -> dist.Work:  # type: ignore[override]
        self.inner.barrier(opts).wait()
        return nccl_forms.DoneWork([])


# -- DistributedDataParallel -----------------------------------------------------------
_DDP_SIGNATURE = inspect.signature(_ORIGINAL_DDP_INIT)


@functools.wraps(_ORIGINAL_DDP_INIT)
def _ddp_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """DDP's constructor, accepting what CUDA-first code passes for its one device."""
    rt = active()
    if rt is None:
        _ORIGINAL_DDP_INIT(self, *args, **kwargs)
        return
    if rt.host.kind == "cuda":
        with off_the_stack():  # see off_the_stack: the work it queues
            _ORIGINAL_DDP_INIT(self, *args, **kwargs)
        return
    bound = _DDP_SIGNATURE.bind(self, *args, **kwargs)
    arguments = bound.arguments
    device_ids = arguments.get("device_ids")
    output_device = arguments.get("output_device")
    if device_ids or output_device is not None:
        arguments["device_ids"] = None
        arguments["output_device"] = None
        rt.note_event(
            "redirect",
            "torch.nn.parallel.DistributedDataParallel",
            f"device_ids={device_ids!r}",
            "device_ids=None",
            f"{rt.host.kind} host: one device for every rank, as for CPU modules",
        )
    device_type = staging_device(rt)
    module = arguments.get("module")
    if device_type is not None and isinstance(module, torch.nn.Module):
        on_device = any(p.device.type == device_type for p in module.parameters())
        if on_device:
            group = arguments.get("process_group") or c10d._get_default_group()
            if not isinstance(group, StagedGroup):
                arguments["process_group"] = StagedGroup(group, device_type)
                rt.note_event(
                    "redirect",
                    "torch.nn.parallel.DistributedDataParallel",
                    device_type,
                    "cpu",
                    "gloo takes no device tensors: DDP's collectives staged",
                )
    with off_the_stack():  # torch's own code, natively (see _native)
        _ORIGINAL_DDP_INIT(*bound.args, **bound.kwargs)


# -- installing --------------------------------------------------------------------------
def install() -> None:
    """Put the wrappers in place (idempotent); they ask
    :func:`~torchdevice.redirecting.runtime.active` at each call, so they adapt to the
    host. ``disable()`` takes them out (the ledger)."""
    if ledger.has(GROUP):
        return
    for owner in (dist, c10d):
        ledger.set_attr(GROUP, owner, "init_process_group", init_process_group)
        ledger.set_attr(GROUP, owner, "new_group", new_group)
        for name, wrapper in _STAGED.items():
            ledger.set_attr(GROUP, owner, name, wrapper)
        ledger.set_attr(GROUP, owner, "_coalescing_manager", _coalescing_manager)
    for name, wrapper in _ENTRY_POINTS.items():
        ledger.set_attr(GROUP, dist, name, wrapper)
    # Only the package's name: torch's own check (in distributed_c10d) must stay true.
    ledger.set_attr(GROUP, dist, "is_nccl_available", is_nccl_available)
    ledger.set_attr(GROUP, DistributedDataParallel, "__init__", _ddp_init)


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    names = ("init_process_group", "new_group", *_STAGED, "_coalescing_manager")
    return (
        *(ledger.attr_spot(owner, name) for owner in (dist, c10d) for name in names),
        *(ledger.attr_spot(dist, name) for name in _ENTRY_POINTS),
        ledger.attr_spot(dist, "is_nccl_available"),
        ledger.attr_spot(DistributedDataParallel, "__init__"),
    )

"""torch.distributed written for NCCL, on this CPU host: the backend rule, and its wrappers.

The rule (:func:`torchdevice.redirecting.policy.resolve_backend`) is checked per host without torch;
the wrappers in a one-rank gloo world inside this process (a file store in ``tmp_path``),
which is enough to see what backend a group really got, what DDP accepted and what the
report says. Several ranks are exercised by ``test_distributed_launch.py`` (torchrun).
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.overrides import _get_current_function_mode_stack

import torchdevice
from pristine import REAL_INIT_PROCESS_GROUP, REAL_IS_NCCL_AVAILABLE
from torchdevice import Host
from torchdevice.patches import distributed, gloo_workers
from torchdevice.redirecting.mode import DeviceMode
from torchdevice.redirecting.policy import resolve_backend

CPU, MPS, CUDA = Host.cpu(), Host.mps(), Host.cuda(2)
REAL_ALL_GATHER_INTO_TENSOR = dist.all_gather_into_tensor  # imported before any enable()


# -- the rule ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("requested", "off_cuda"),
    [
        ("nccl", "gloo"),
        ("NCCL", "gloo"),
        (dist.Backend.NCCL, "gloo"),
        ("cuda:nccl,cpu:gloo", "gloo"),
        ("cpu:gloo,cuda:nccl", "gloo"),
        ("cuda:nccl", "gloo"),
        ("gloo", "gloo"),
        ("cpu:gloo", "cpu:gloo"),
        ("mpi", "mpi"),
        ("cpu:mpi,cuda:nccl", "mpi"),
        ("cpu:gloo,mps:nccl", "gloo"),
        ("cuda:", "cuda:"),  # malformed: left for torch's parser to reject
    ],
)
@pytest.mark.parametrize("host", [CPU, MPS], ids=["cpu", "mps"])
def test_backend_rule_off_cuda_hosts(requested: str, off_cuda: str, host: Host) -> None:
    decision = resolve_backend(requested, host)
    assert decision.backend == off_cuda
    assert decision.moved == (off_cuda != requested.lower())
    if decision.moved:
        assert "NCCL needs CUDA" in decision.reason


@pytest.mark.parametrize("requested", ["nccl", "cuda:nccl,cpu:gloo", "gloo"])
def test_backend_rule_keeps_nccl_on_cuda_hosts(requested: str) -> None:
    decision = resolve_backend(requested, CUDA)
    assert (decision.backend, decision.moved) == (requested, False)


# -- the wrappers, in a one-rank world -----------------------------------------------------
@pytest.fixture
def world(tmp_path: Path) -> Iterator[Callable[..., None]]:
    """``init(backend, ...)`` starts a one-rank world on a file store; it ends after the test."""
    store = f"file://{tmp_path / 'store'}"

    def init(*args: Any, **kwargs: Any) -> None:
        dist.init_process_group(*args, init_method=store, rank=0, world_size=1, **kwargs)

    try:
        yield init
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _entries(api: str) -> list[tuple[str, str, int]]:
    return [
        (e.requested, e.decided, e.site.lineno)
        for e in torchdevice.report().entries
        if e.api == api
    ]


def _line() -> int:
    frame = inspect.currentframe()
    assert frame is not None
    assert frame.f_back is not None
    return frame.f_back.f_lineno


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda init: init("nccl"), id="positional"),
        pytest.param(lambda init: init(backend="nccl"), id="keyword"),
        pytest.param(lambda init: init(dist.Backend.NCCL), id="Backend.NCCL"),
        pytest.param(lambda init: init("cuda:nccl,cpu:gloo"), id="device-string"),
    ],
)
def test_init_process_group_nccl_runs_on_gloo(world: Callable[..., None], call: Any) -> None:
    torchdevice.enable()
    call(world)
    assert dist.get_backend() == "gloo"
    [(requested, decided, _)] = _entries("torch.distributed.init_process_group")
    assert decided == "gloo"
    assert "nccl" in requested
    t = torch.arange(3.0, device="cuda")
    dist.all_reduce(t)  # one rank: the sum is the tensor itself, on the real device
    assert t.device.type == "cpu"
    assert t.tolist() == [0.0, 1.0, 2.0]


def test_resolution_is_reported_at_the_users_line(
    world: Callable[..., None], tmp_path: Path
) -> None:
    torchdevice.enable()
    store = f"file://{tmp_path / 'store'}"
    line = _line() + 1
    dist.init_process_group(backend="nccl", init_method=store, rank=0, world_size=1)
    group = dist.new_group(backend="nccl")
    group_line = _line() - 1
    assert _entries("torch.distributed.init_process_group") == [("nccl", "gloo", line)]
    assert _entries("torch.distributed.new_group") == [("nccl", "gloo", group_line)]
    assert dist.get_backend(group) == "gloo"
    entry = next(e for e in torchdevice.report().entries if e.api.endswith("new_group"))
    assert entry.site.filename == __file__


@pytest.mark.filterwarnings("ignore:Attempted to get default timeout for nccl:UserWarning")
def test_native_torch_has_no_nccl_here(world: Callable[..., None]) -> None:
    """What the wrappers fix, and that they leave again on disable()."""
    torchdevice.enable()
    torchdevice.disable()
    assert dist.init_process_group is REAL_INIT_PROCESS_GROUP
    with pytest.raises(RuntimeError, match="Distributed package doesn't have NCCL built in"):
        world("nccl")


def test_device_id_of_nccl_is_dropped(world: Callable[..., None]) -> None:
    """``device_id`` binds NCCL to a GPU; gloo binds to none (torch rejects the CPU)."""
    torchdevice.enable()
    world("nccl", device_id=torch.device("cuda", 0))
    assert dist.get_backend() == "gloo"
    assert ("device_id=cuda:0", "device_id=None") in [  # the device object as written
        (requested, decided)
        for requested, decided, _ in _entries("torch.distributed.init_process_group")
    ]


@pytest.mark.filterwarnings("ignore:Attempted to get default timeout for nccl:UserWarning")
def test_nccl_stays_on_a_cuda_host(world: Callable[..., None]) -> None:
    """On a CUDA host the script's backend is kept: here (no NCCL) torch's own error."""
    torchdevice.enable(host=CUDA)
    with pytest.raises(RuntimeError, match="Distributed package doesn't have NCCL built in"):
        world("nccl")
    assert _entries("torch.distributed.init_process_group") == []


def test_is_nccl_available_answers_like_cuda_is_available() -> None:
    native = REAL_IS_NCCL_AVAILABLE()
    assert native is False  # this CPU build has no NCCL
    torchdevice.enable()
    assert dist.is_nccl_available() is True
    assert torch.cuda.is_available() is True
    torchdevice.enable(cuda_available=False)
    assert dist.is_nccl_available() is False
    assert torch.cuda.is_available() is False
    torchdevice.disable()
    assert dist.is_nccl_available() is native


def test_ddp_accepts_device_ids_of_the_one_device(world: Callable[..., None]) -> None:
    world("gloo")
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="device_ids and output_device arguments only work"):
        DDP(nn.Linear(3, 1), device_ids=[0], output_device=0)  # native torch, CPU module
    torchdevice.enable()
    torch.cuda.set_device(1)  # rank 1 of a node: accepted, one real device
    model = nn.Linear(3, 1).cuda()
    expected = nn.Linear(3, 1)
    expected.load_state_dict(model.state_dict())
    line = _line() + 1
    ddp = DDP(model, device_ids=[1], output_device=1)
    assert ddp.device_ids is None
    assert ddp.device.type == "cpu"
    x = torch.randn(4, 3, device="cuda")
    ddp(x).sum().backward()
    expected(x).sum().backward()
    assert model.weight.grad is not None
    assert expected.weight.grad is not None
    torch.testing.assert_close(model.weight.grad, expected.weight.grad)
    [(requested, decided, at)] = _entries("torch.nn.parallel.DistributedDataParallel")
    assert (requested, decided, at) == ("device_ids=[1]", "device_ids=None", line)


def test_nccl_forms_only_on_groups_created_for_nccl(world: Callable[..., None]) -> None:
    """A ``"nccl"`` group and a ``new_group()`` under it take NCCL's flat gather; a group
    the script asked gloo for keeps gloo's refusal (the 2-rank sweep: test_nccl_forms.py)."""
    torchdevice.enable()
    world("nccl")
    x = torch.arange(6.0, device="cuda").view(2, 3)
    inherited, gloo = dist.new_group(), dist.new_group(backend="gloo")
    for group in (None, inherited):
        flat = torch.zeros(6, device="cuda")
        dist.all_gather_into_tensor(flat, x, group=group)
        assert flat.tolist() == x.view(-1).tolist()
    with pytest.raises(RuntimeError, match="allgather: invalid tensor size"):
        dist.all_gather_into_tensor(torch.zeros(6, device="cuda"), x, group=gloo)


def test_nccl_forms_leave_with_disable(world: Callable[..., None]) -> None:
    world("gloo")
    torchdevice.enable()
    assert dist.all_gather_into_tensor is not REAL_ALL_GATHER_INTO_TENSOR
    torchdevice.disable()
    assert dist.all_gather_into_tensor is REAL_ALL_GATHER_INTO_TENSOR
    with pytest.raises(RuntimeError, match="allgather: invalid tensor size"):
        dist.all_gather_into_tensor(torch.zeros(6), torch.ones(2, 3))


# -- clean exit: queued work holds no function mode (issue 19) ----------------------------
def _all_reduce() -> Any:
    return dist.all_reduce(torch.ones(2, device="cuda"), async_op=True)


def _all_gather() -> Any:
    return dist.all_gather([torch.zeros(2)], torch.ones(2), async_op=True)


@pytest.mark.parametrize(
    "queue",
    [
        pytest.param(lambda: dist.barrier(async_op=True), id="barrier"),
        pytest.param(_all_reduce, id="all_reduce"),
        pytest.param(lambda: dist.broadcast(torch.ones(2), 0, async_op=True), id="broadcast"),
        pytest.param(_all_gather, id="all_gather"),
    ],
)
def test_queued_work_holds_no_function_mode(world: Callable[..., None], queue: Any) -> None:
    """A gloo work copies the calling thread's mode stack; when the stack's entry has been
    rebuilt since, the worker thread releases the mode last and must take the GIL, which
    aborts the process if the interpreter is finalizing. Queued off the stack, the work
    holds no reference to torchdevice's mode."""
    torchdevice.enable()
    world("nccl")
    [mode] = [m for m in _get_current_function_mode_stack() if isinstance(m, DeviceMode)]
    before = sys.getrefcount(mode)
    work = queue()
    nn.functional.relu(torch.ones(1))  # a Python-level torch function: the entry is rebuilt
    work.wait()
    assert sys.getrefcount(mode) == before  # `work` is alive and holds none
    assert _get_current_function_mode_stack()[-1] is mode  # back on the stack
    del work


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda t: dist.all_reduce(t), id="all_reduce"),  # noqa: PLW0108 - read at call time, once enabled
        pytest.param(lambda t: dist.broadcast(t, 0), id="broadcast"),
        pytest.param(lambda t: dist.all_gather([torch.zeros(())], t), id="all_gather"),
        pytest.param(lambda t: dist.reduce(t, 0), id="reduce"),
    ],
)
def test_a_tensor_gloo_still_holds_is_not_left_to_the_worker(
    world: Callable[..., None], call: Callable[[torch.Tensor], None]
) -> None:
    """Right after a synchronous collective returns natively, gloo's worker still holds
    its tensors about one time in three; a tensor dropped then is freed by the worker,
    which takes the GIL for it and aborts the rank if the interpreter is finalizing
    (issue 19). Under torchdevice such a tensor is held until the worker lets go (at the
    next collective, or at exit), so the caller's drop is never the last reference."""
    torchdevice.enable()
    world("nccl")
    tensor = torch.zeros((), device="cuda")
    before = tensor._use_count()
    late = 0
    for _ in range(300):
        call(tensor)
        if tensor._use_count() > before:  # the worker has it still
            late += 1
            assert distributed.held.holds(tensor)
    distributed.held.at_exit()  # what the exit handler does: wait, then drop
    assert tensor._use_count() == before
    assert not distributed.held


def test_the_exit_handler_finds_gloos_workers_idle_after_a_ddp_step(
    world: Callable[..., None],
) -> None:
    """After a DDP step, gloo's worker may still drop the bucket all-reduce's work, which
    holds the Context torch stashed for the backward: it takes the GIL for it, fatal once
    the interpreter finalizes (tests/test_gloo_exit.py shows the abort). The exit handler
    waits, GIL released, until every worker sleeps unchanged across a pause: the workers are
    found by name, and once they have nothing left the wait ends within a few pauses."""
    torchdevice.enable()
    world("nccl")
    model = DDP(nn.Linear(4, 1).cuda())
    for _ in range(5):
        model(torch.ones(2, 4, device="cuda")).sum().backward()
    # Read after the steps: a worker names itself when it first runs, which a loaded
    # machine can put off past the group's creation (CI once found none right after it).
    found = gloo_workers.workers()
    assert found is not None
    assert found  # ProcessGroupGloo's worker threads, by name
    started = time.monotonic()
    assert gloo_workers.wait_until_idle(5.0)
    assert time.monotonic() - started < 2.0
    assert all(state == "S" for state, _, _ in (gloo_workers.workers() or {}).values())

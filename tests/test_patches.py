"""The install list (:data:`torchdevice.patches.INSTALL_ORDER`): every change activation makes
is one of its entries' declared spots, made in the list's order, and the pristine check
reads every declared spot back."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import torch

import torchdevice
from pristine import torch_is_pristine
from torchdevice import Host, ledger, patches
from torchdevice.patches import INSTALL_ORDER

HOSTS = {"cpu": Host.cpu(), "mps": Host.mps(), "cuda": Host.cuda(2)}


def _owner(group: str) -> patches.Patch:
    """The entry of the install list whose changes are recorded under ``group``."""
    owners = [patch for patch in INSTALL_ORDER if group in patch.groups]
    assert len(owners) == 1, f"ledger group {group!r} belongs to {len(owners)} entries"
    return owners[0]


@pytest.mark.parametrize("kind", list(HOSTS))
def test_every_change_is_a_declared_place_of_the_entry_that_made_it(kind: str) -> None:
    """A new change that its installer does not declare fails here, so the pristine check
    (which reads the declared spots) cannot miss it."""
    declared = {patch.name: {spot.what for spot in patch.spots()} for patch in INSTALL_ORDER}
    torchdevice.enable(host=HOSTS[kind], log_level="INFO", keep_cpu=True)
    changes = ledger.changes()
    torchdevice.disable()
    assert changes, "enable() recorded nothing"
    undeclared = [
        f"{change.group}: {change.what}"
        for change in changes
        if change.what not in declared[_owner(change.group).name]
    ]
    assert undeclared == []


#: The entries only one tier installs: the mode's thread hooks, the tier's wrappers.
#: The entries that are one tier's own, by the other tier's name (those it never installs).
_TIER_ONLY = {
    "mode": {"entry-point wrappers"},
    "entry-points": {"thread hooks", "autograd hooks", "compiled graphs"},
}


@pytest.mark.parametrize("intercept", ["mode", "entry-points"])
def test_first_activation_installs_in_the_order_of_the_list(intercept: str) -> None:
    torchdevice.enable(host=Host.mps(), log_level="INFO", intercept=intercept)  # type: ignore[typeddict-item]
    groups = [change.group for change in ledger.changes()]
    torchdevice.disable()
    positions = [INSTALL_ORDER.index(_owner(group)) for group in dict.fromkeys(groups)]
    activation_entries = [
        i
        for i, patch in enumerate(INSTALL_ORDER)
        if patch.when != "settings" and patch.name not in _TIER_ONLY[intercept]
    ]
    walked = [position for position in positions if position in activation_entries]
    assert walked == sorted(walked)
    # Every entry an MPS host needs in this tier (all but the CPU-only torch.accelerator
    # facade, and the other tier's own) ran.
    assert set(walked) == set(activation_entries)
    assert not set(positions) & {
        i for i, patch in enumerate(INSTALL_ORDER) if patch.name in _TIER_ONLY[intercept]
    }


def test_a_reconfiguration_walks_only_the_entries_that_follow_the_host() -> None:
    torchdevice.enable(host=Host.mps())
    assert ledger.has("native MPS fallback observer")
    assert not ledger.has("accelerator facade")
    before = [c for c in ledger.changes() if _owner(c.group).when == "first"]
    torchdevice.enable(host=Host.cpu())
    after = [c for c in ledger.changes() if _owner(c.group).when == "first"]
    assert not ledger.has("native MPS fallback observer")  # the MPS-only entry left
    assert ledger.has("accelerator facade")  # the CPU-only one came
    assert [c.what for c in after] == [c.what for c in before]  # the others stayed as made


@contextmanager
def _swap(owner: Any, name: str) -> Iterator[None]:
    """Change ``owner.name`` behind the ledger's back, and put it back."""
    native = owner.__dict__[name]
    setattr(owner, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        setattr(owner, name, native)


@contextmanager
def _set_level() -> Iterator[None]:
    logger = logging.getLogger("torchdevice")
    native = logger.level
    logger.setLevel(logging.CRITICAL if native != logging.CRITICAL else logging.DEBUG)
    try:
        yield
    finally:
        logger.setLevel(native)


@contextmanager
def _set_env() -> Iterator[None]:
    native = os.environ.pop("ACTIVATE_TORCH_DEVICE", None)
    os.environ["ACTIVATE_TORCH_DEVICE"] = "1" if native != "1" else "0"
    try:
        yield
    finally:
        if native is None:
            os.environ.pop("ACTIVATE_TORCH_DEVICE", None)
        else:
            os.environ["ACTIVATE_TORCH_DEVICE"] = native


LEFT_IN_PLACE: dict[str, tuple[str, Callable[[], AbstractContextManager[None]]]] = {
    "Module.cuda": ("Module.cuda", lambda: _swap(torch.nn.Module, "cuda")),
    "Module.cpu": ("Module.cpu", lambda: _swap(torch.nn.Module, "cpu")),
    "torch.range": ("torch.range", lambda: _swap(torch, "range")),
    "nested_tensor": ("torch.nested.nested_tensor", lambda: _swap(torch.nested, "nested_tensor")),
    "_rebuild_tensor": (
        "torch._utils._rebuild_tensor",
        lambda: _swap(torch._utils, "_rebuild_tensor"),
    ),
    "warnings hook": ("warnings._showwarnmsg", lambda: _swap(warnings, "_showwarnmsg")),
    "logger level": ("the 'torchdevice' logger's level", _set_level),
    "exported variable": ("$ACTIVATE_TORCH_DEVICE", _set_env),
}


@pytest.mark.parametrize("case", list(LEFT_IN_PLACE))
def test_pristine_check_sees_a_change_made_without_the_ledger(case: str) -> None:
    """The spots the hand-written check used to miss, each changed behind the ledger."""
    what, change = LEFT_IN_PLACE[case]
    assert torch_is_pristine() == []
    with change():
        assert torch_is_pristine() == [f"{what} is not as native torch had it"]
    assert torch_is_pristine() == []


def _hooked_backward() -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """A CUDA-first backward: a custom Function's backward, a module's full backward hook
    and a tensor hook that ask for ``"cuda"``, then ``torch.autograd.grad`` through it."""
    seen: list[str] = []

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad * torch.full(grad.shape, 2.0, device="cuda")

    torch.manual_seed(0)
    linear = torch.nn.Linear(2, 2).to("cuda")
    linear.register_full_backward_hook(
        lambda module, grad_in, grad_out: seen.append(grad_out[0].to("cuda").device.type)
    )
    x = torch.randn(3, 2, device="cuda", requires_grad=True)
    x.register_hook(lambda grad: grad.to("cuda") * 3)
    Double.apply(linear(x)).sum().backward()
    (again,) = torch.autograd.grad(Double.apply(linear(x)).square().sum(), x)
    assert x.grad is not None
    return seen, x.grad, again


@pytest.mark.parametrize("intercept", ["mode", "entry-points"])
def test_hooks_and_custom_backward_functions_run_redirected(intercept: str) -> None:
    """Autograd runs the program's hooks and custom backward functions inside
    ``backward()``/``grad()``, which the mode handles with itself off the stack: the
    backward patch puts it back for the engine's run (the sweep found a hook's ``.to("cuda")``
    reaching torch unredirected). Gradients equal the same code run natively on the CPU."""
    torchdevice.enable(host=Host.cpu(), intercept=intercept)  # type: ignore[typeddict-item]
    try:
        seen, grad, again = _hooked_backward()
        assert torch._C._len_torch_function_stack() == (1 if intercept == "mode" else 0)
    finally:
        torchdevice.disable()
    assert seen == ["cpu", "cpu"]
    with torch.device("cpu"):
        native = _native_hooked_backward()
    torch.testing.assert_close(grad, native[0], rtol=0, atol=0)
    torch.testing.assert_close(again, native[1], rtol=0, atol=0)


def _native_hooked_backward() -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_hooked_backward`'s gradients natively, the device being the CPU."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(2, 2)
    x = torch.randn(3, 2, requires_grad=True)
    x.register_hook(lambda grad: grad * 3)
    (linear(x) * 2).sum().backward()
    (again,) = torch.autograd.grad((linear(x) * 2).square().sum(), x)
    assert x.grad is not None
    return x.grad, again

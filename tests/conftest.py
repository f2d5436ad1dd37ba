"""Shared fixtures: every test leaves torch and torchdevice exactly as it found them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.overrides import _get_current_function_mode_stack

import childenv
import torchdevice
from pristine import torch_is_pristine
from torchdevice import facade, patches


@pytest.fixture(params=childenv.TIERS)
def tier(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test once per tier: the children it starts get ``TORCHDEVICE_INTERCEPT``
    (:func:`childenv.tier_env`). The real-program tests use it, so that each passes in the
    entry-points tier as in the mode."""
    childenv.TIER[0] = request.param
    try:
        yield request.param
    finally:
        childenv.TIER[0] = "mode"


@pytest.fixture(autouse=True)
def _restore_torch() -> Iterator[None]:
    """Disable torchdevice after each test, then check torch is native again."""
    assert torch_is_pristine() == [], "a previous test leaked torchdevice state"
    yield
    torchdevice.disable()
    torchdevice.reset_report()
    leftovers = list(_get_current_function_mode_stack())
    for _ in leftovers:  # a failing test may leave its own modes: clear them for the next
        torch.overrides._pop_mode()
    assert torch_is_pristine() == []
    assert not facade.installed()
    assert not patches.installed()
    assert leftovers == [], f"test left modes on the stack: {leftovers}"

"""Shared fixtures: every test leaves torch and torchdevice exactly as it found them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from torch.overrides import _get_current_function_mode_stack

import childenv
import torchdevice
from pristine import torch_is_pristine
from torchdevice import facade, patches


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """What the default run leaves out of the tier axis (``TORCHDEVICE_TEST_EVERY_TIER=1``
    runs everything; docs/tiers.md says which tests are where):

    - the tier on the simulated MPS host: a real-program test runs in the mode and in the
      entry-points tier on the CPU host, and in the mode on the simulated MPS host. That
      fourth combination passed in full once (22 tests, 2026-11-28);
    - in a module that names an ``ENTRY_POINTS_SAMPLE`` (``{parameter: values}``), the
      entry-points tier of the cases outside that sample (test_examples.py: the scripts
      whose device requests the sample already makes; the module says why).
    """
    if os.environ.get("TORCHDEVICE_TEST_EVERY_TIER") == "1":
        return
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        tiered = callspec is not None and callspec.params.get("tier") == "entry-points"
        simulated = tiered and ("simulated-mps" in callspec.id or "simulated" in item.path.name)
        sample = getattr(getattr(item, "module", None), "ENTRY_POINTS_SAMPLE", {})
        unsampled = tiered and any(
            name in callspec.params and callspec.params[name] not in values
            for name, values in sample.items()
        )
        (dropped if simulated or unsampled else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


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

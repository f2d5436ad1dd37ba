"""The ledger: every change recorded, undone newest first, and seen by the pristine check."""

from __future__ import annotations

import os
import sys
import types
import warnings

import pytest
import torch

import torchdevice
from pristine import REAL_SHOWWARNING, torch_is_pristine
from torchdevice import ledger
from torchdevice.patches import amp, calls


def test_pristine_check_reports_a_recorded_change_left_in_place() -> None:
    holder = types.SimpleNamespace(value=1)
    ledger.set_attr("test group", holder, "value", 2)
    try:
        assert torch_is_pristine() == [
            "still recorded in the ledger: test group: namespace(value=2).value"
        ]
    finally:
        ledger.undo("test group")
    assert holder.value == 1
    assert torch_is_pristine() == []


def test_pristine_check_reports_a_torch_change_left_in_place() -> None:
    """A change of torch itself shows twice: in the ledger and in torch's own state."""
    ledger.set_attr("test group", warnings, "showwarning", print)
    try:
        problems = torch_is_pristine()
        assert "still recorded in the ledger: test group: warnings.showwarning" in problems
        assert "warnings.showwarning is not as native torch had it" in problems
    finally:
        ledger.undo()
    assert warnings.showwarning is REAL_SHOWWARNING


def test_undo_runs_newest_first_and_unwinds_the_same_attribute_twice_changed() -> None:
    holder = types.SimpleNamespace(value="native")
    order: list[str] = []
    ledger.hook("a", "first hook", lambda: order.append("first"))
    ledger.set_attr("a", holder, "value", "one")
    ledger.set_attr("b", holder, "value", "two")
    ledger.hook("b", "second hook", lambda: order.append(f"second saw {holder.value}"))
    assert holder.value == "two"
    ledger.undo()
    assert order == ["second saw two", "first"]
    assert holder.value == "native"
    assert ledger.changes() == []


def test_undo_of_one_group_leaves_the_others() -> None:
    holder = types.SimpleNamespace(a=0, b=0)
    ledger.set_attr("a", holder, "a", 1)
    ledger.set_attr("b", holder, "b", 1)
    ledger.undo("a")
    assert (holder.a, holder.b) == (0, 1)
    assert [change.group for change in ledger.changes()] == ["b"]
    assert ledger.has("b")
    assert not ledger.has("a")
    ledger.undo()
    assert (holder.a, holder.b) == (0, 0)


def test_a_longer_lifetime_outlives_undo_and_leaves_with_its_own() -> None:
    """The pytest plugin's variables outlive ``disable()`` (its ``undo()``), under an
    activation's change of the same variable, and leave when their lifetime ends."""
    assert "TORCHDEVICE_LEDGER_PROBE" not in os.environ
    ledger.set_env("run", "TORCHDEVICE_LEDGER_PROBE", "run", lifetime="tool run")
    ledger.set_env("activation", "TORCHDEVICE_LEDGER_PROBE", "activation")
    ledger.undo()
    assert os.environ["TORCHDEVICE_LEDGER_PROBE"] == "run"
    assert [(c.group, c.lifetime) for c in ledger.changes()] == [("run", "tool run")]
    ledger.undo(lifetime="tool run")
    assert "TORCHDEVICE_LEDGER_PROBE" not in os.environ
    assert ledger.changes() == []


def test_undoing_a_covered_change_keeps_the_newer_value_and_unwinds_to_the_first() -> None:
    """Undone out of order (another lifetime, another group), a change that a newer one of
    the same spot covers leaves the spot alone; the newer change then puts back what
    stood there before both."""
    assert "TORCHDEVICE_LEDGER_PROBE" not in os.environ
    ledger.set_env("run", "TORCHDEVICE_LEDGER_PROBE", "run", lifetime="tool run")
    ledger.set_env("activation", "TORCHDEVICE_LEDGER_PROBE", "activation")
    ledger.undo(lifetime="tool run")
    assert os.environ["TORCHDEVICE_LEDGER_PROBE"] == "activation"
    ledger.undo()
    assert "TORCHDEVICE_LEDGER_PROBE" not in os.environ

    holder, twin = types.SimpleNamespace(value="native"), types.SimpleNamespace(value="native")
    ledger.set_attr("a", holder, "value", "one")
    ledger.set_attr("a", twin, "value", "one")  # described alike, another spot
    ledger.set_attr("b", holder, "value", "two")
    ledger.undo("a")
    assert (holder.value, twin.value) == ("two", "native")
    ledger.undo("b")
    assert holder.value == "native"
    assert ledger.changes() == []


def test_an_absent_attribute_module_and_variable_become_absent_again() -> None:
    class Owner:
        inherited = "from the class"

    child = Owner()
    ledger.set_attr("t", child, "inherited", "on the instance")
    ledger.set_attr("t", Owner, "added", 1)
    ledger.set_item("t", sys.modules, "torchdevice_ledger_probe", types.ModuleType("probe"))
    assert "TORCHDEVICE_LEDGER_PROBE" not in os.environ
    ledger.set_env("t", "TORCHDEVICE_LEDGER_PROBE", "1")
    assert os.environ["TORCHDEVICE_LEDGER_PROBE"] == "1"
    ledger.undo()
    assert "inherited" not in vars(child)
    assert child.inherited == "from the class"
    assert not hasattr(Owner, "added")
    assert "torchdevice_ledger_probe" not in sys.modules
    assert "TORCHDEVICE_LEDGER_PROBE" not in os.environ


def test_a_failing_undo_still_undoes_the_rest_and_raises() -> None:
    holder = types.SimpleNamespace(value=0)
    ledger.set_attr("t", holder, "value", 1)

    def broken() -> None:
        raise OSError("cannot undo")

    ledger.hook("t", "broken", broken)
    with pytest.raises(OSError, match="cannot undo"):
        ledger.undo()
    assert holder.value == 0
    assert ledger.changes() == []


def test_enable_records_its_changes_and_disable_empties_the_ledger() -> None:
    torchdevice.enable(host="cpu")
    groups = {change.group for change in ledger.changes()}
    assert {"torch wrappers", "autocast rewrite", "cuda facade", "mps facade"} <= groups
    assert "thread hooks" in groups
    assert amp.installed()
    assert torch.load is calls.load
    torchdevice.disable()
    assert ledger.changes() == []
    assert torch_is_pristine() == []

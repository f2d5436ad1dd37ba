"""Logging as a library should: the user's level, the user's line, warnings at the user's line."""

from __future__ import annotations

import logging
import sys
import warnings

import pytest
import torch

import torchdevice

LOGGER = logging.getLogger("torchdevice")


def test_the_level_is_left_to_the_application(caplog: pytest.LogCaptureFixture) -> None:
    # What logging.basicConfig(level=INFO) or pytest --log-cli-level=INFO do: the root's
    # level. An enable() without log_level must not hide the redirects behind WARNING.
    caplog.set_level(logging.INFO)
    torchdevice.enable()
    assert LOGGER.level == logging.NOTSET
    here = sys._getframe().f_lineno + 1
    torch.zeros(2, device="cuda")
    records = [r for r in caplog.records if r.name == "torchdevice"]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.INFO
    assert "torch.zeros(cuda) -> cpu:0" in record.getMessage()
    # The record is made at the user's line: %(pathname)s:%(lineno)d names this file.
    assert (record.pathname, record.lineno, record.funcName) == (
        __file__,
        here,
        "test_the_level_is_left_to_the_application",
    )


def test_the_root_at_warning_shows_no_redirect(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    torchdevice.enable()
    torch.zeros(2, device="cuda")
    assert [r for r in caplog.records if r.name == "torchdevice"] == []


def test_an_explicit_level_is_applied_and_undone(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)  # the application's root level...
    caplog.handler.setLevel(logging.NOTSET)  # ...and a handler that keeps what reaches it
    torchdevice.enable(log_level="DEBUG")
    assert LOGGER.level == logging.DEBUG
    torch.ones(1, device="mps")
    messages = [r.getMessage() for r in caplog.records if r.name == "torchdevice"]
    # DEBUG adds each decision with its reason, before the INFO line of the call site.
    debug = [m for m in messages if m.startswith("decision: 'mps'")]
    assert len(debug) == 1
    assert "-> cpu (fallback: MPS request on a CPU-only host" in debug[0]
    assert any("torch.ones(mps:0) -> cpu:0" in m for m in messages)
    torchdevice.enable(log_level="ERROR")  # a reconfiguration replaces the level
    assert LOGGER.level == logging.ERROR
    torchdevice.disable()
    assert LOGGER.level == logging.NOTSET


def test_a_warning_torch_raises_in_a_handler_names_the_users_line() -> None:
    torchdevice.enable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here = sys._getframe().f_lineno + 1
        values = torch.range(0, 2, device="cuda")  # deprecated: torch warns from C++
    assert values.tolist() == [0.0, 1.0, 2.0]
    deprecations = [w for w in caught if "torch.range is deprecated" in str(w.message)]
    assert len(deprecations) == 1
    assert (deprecations[0].filename, deprecations[0].lineno) == (__file__, here)


def test_warnings_hook_leaves_with_disable() -> None:
    original = warnings._showwarnmsg  # type: ignore[attr-defined]
    torchdevice.enable()
    assert warnings._showwarnmsg is not original  # type: ignore[attr-defined]
    torchdevice.disable()
    assert warnings._showwarnmsg is original  # type: ignore[attr-defined]

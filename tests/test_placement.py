"""One placement path: what a decision says, who owns the function table, and where the
call site of a request reached through the mode is found."""

from __future__ import annotations

import sys

import pytest
import torch

import torchdevice
from torchdevice import Host
from torchdevice.activation import _resolve_host
from torchdevice.redirecting import callsite
from torchdevice.redirecting.intercepts import build_table
from torchdevice.redirecting.mode import DeviceMode
from torchdevice.redirecting.policy import decide
from torchdevice.redirecting.runtime import Runtime
from torchdevice.settings import load_settings

HOSTS = [Host.mps(), Host.cuda(2), Host.cpu()]


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: h.kind)
@pytest.mark.parametrize(
    ("request_", "standing"),
    [
        (None, "host"),
        ("cpu", "host"),
        ("cpu:0", "host"),
        ("cpu:-1", "host"),
        ("cuda", "device"),
        ("cuda:1", "device"),
        (1, "device"),
        ("mps", "device"),
        (torch.device("cuda", 0), "device"),
        ("meta", None),
    ],
)
def test_a_decision_says_what_the_request_stands_for(host, request_, standing):
    decision = decide(request_, host)
    assert decision.standing == standing
    # Derived, not part of the decision's identity: equal decisions stay equal.
    assert decision == decide(request_, host)
    assert "standing" not in repr(decision)


def test_the_function_table_has_one_owner():
    host = _resolve_host("cpu")
    runtime = Runtime(host, load_settings({}))
    assert runtime.table == {}
    mode = DeviceMode(runtime)
    assert mode.table is runtime.table
    assert torch.zeros in runtime.table
    assert runtime.handlers == tuple(dict.fromkeys(runtime.table.values()))
    again = DeviceMode(runtime)  # a later activation with this runtime: the same table
    assert again.table is runtime.table
    with pytest.raises(RuntimeError, match="function table is already set"):
        runtime.use_table(build_table(host))
    runtime.use_table(runtime.table)  # the same table again is no change
    mode.retire()
    assert mode.table == {}
    assert runtime.table is again.table


def _requests(x: torch.Tensor) -> int:
    first = _requests.__code__.co_firstlineno
    torch.zeros(1, device="cuda")  # + 2
    x.to("cuda")  # + 3
    x.to(device="cuda:0")  # + 4
    x.cuda()  # + 5
    torch.normal(0.0, 1.0, (2,), device="cuda")  # + 6: one handler frame deeper
    torch.ones_like(x, device="cuda")  # + 7
    torch.device("cuda")  # + 8
    return first


EXPECTED = [
    ("torch.zeros", 2),
    ("Tensor.to", 3),
    ("Tensor.to", 4),
    ("Tensor.cuda", 5),
    ("torch.normal", 6),
    ("torch.ones_like", 7),
    ("torch.device", 8),
]


def test_requests_through_the_mode_find_the_users_line_above_its_frame(monkeypatch):
    """Factories and transfers alike: the line is the frame above the door frame, found
    without walking the handler frames (``first_user`` is never asked)."""
    x = torch.ones(2)
    torchdevice.enable(host="cpu")
    try:
        _requests(x)  # learns each path's depth, and that this file is user code
        torchdevice.reset_report()
        walks: list[object] = []
        original = callsite.first_user

        def counting(frame):  # type: ignore[no-untyped-def]
            walks.append(frame)
            return original(frame)

        monkeypatch.setattr(callsite, "first_user", counting)
        for _ in range(2):
            first = _requests(x)
        rows = sorted(
            (e.api, e.site.lineno - first, e.count, e.site.filename)
            for e in torchdevice.report().entries
        )
    finally:
        torchdevice.disable()
    assert walks == []
    assert rows == sorted((api, offset, 2, __file__) for api, offset in EXPECTED)


def test_a_path_met_at_another_depth_is_walked_again():
    """The depth learned for a key is checked against the entry's code every time."""
    torchdevice.enable(host="cpu")
    try:
        torch.zeros(1, device="cuda")
        learned = callsite._depths[torch.zeros]
        callsite._depths[torch.zeros] = learned + 3  # as if learned on another path
        line = sys._getframe().f_lineno + 1
        torch.zeros(1, device="cuda")
        assert callsite._depths[torch.zeros] == learned  # found again by the entry's code
        rows = [
            (e.site.lineno, e.count) for e in torchdevice.report().entries if e.api == "torch.zeros"
        ]
    finally:
        torchdevice.disable()
    assert (line, 1) in rows

"""The pure policy engine: every cell of SPEC §2, bad requests, and its properties.

``decide(request, host, state)`` is checked on injected hosts (``Host.mps()``,
``Host.cuda(n)``, ``Host.cpu()``), so the whole table runs on any machine.
"""

from __future__ import annotations

import builtins
import dataclasses
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.overrides import _get_current_function_mode_stack

import torchdevice
from torchdevice import DeviceRequestError, DeviceRequestTypeError, Host
from torchdevice.redirecting.policy import (
    Decision,
    DeviceSpec,
    PolicyState,
    decide,
    draws_on_generator,
    has_float64,
    parse_request,
    pins,
)

MPS_HOST = Host.mps()
CUDA_HOST = Host.cuda(2)
CPU_HOST = Host.cpu()
HOSTS = {"mps": MPS_HOST, "cuda2": CUDA_HOST, "cpu": CPU_HOST}

CPU0 = DeviceSpec("cpu", 0)
MPS0 = DeviceSpec("mps", 0)
CUDA = DeviceSpec("cuda", None)  # the current CUDA device
CUDA0 = DeviceSpec("cuda", 0)
CUDA1 = DeviceSpec("cuda", 1)

KEEP_CPU_STATES = {
    "cpu_override": PolicyState(cpu_override=True),
    "keep_cpu": PolicyState(keep_cpu=True),
}


def _request_id(request):
    if isinstance(request, torch.device):
        return f"torch.device({str(request)!r})"
    return repr(request)


# ---------------------------------------------------------------------------------------
# SPEC §2, default state: request -> parsed request, then (device, action) per host
# ---------------------------------------------------------------------------------------

DEF, RED, UNC, FBK = "default", "redirect", "unchanged", "to-cpu"

TABLE = [
    # request                parsed                MPS host      CUDA host (2)   CPU-only host
    (None, None, (MPS0, DEF), (CUDA, DEF), (CPU0, DEF)),
    ("cpu", CPU0, (MPS0, RED), (CUDA, RED), (CPU0, UNC)),
    ("cpu:0", CPU0, (MPS0, RED), (CUDA, RED), (CPU0, UNC)),
    ("cpu:3", DeviceSpec("cpu", 3), (MPS0, RED), (CUDA, RED), (CPU0, UNC)),
    (torch.device("cpu"), CPU0, (MPS0, RED), (CUDA, RED), (CPU0, UNC)),
    ("mps", MPS0, (MPS0, UNC), (CUDA, RED), (CPU0, FBK)),
    ("mps:0", MPS0, (MPS0, UNC), (CUDA, RED), (CPU0, FBK)),
    (torch.device("mps"), MPS0, (MPS0, UNC), (CUDA, RED), (CPU0, FBK)),
    ("cuda", CUDA, (MPS0, RED), (CUDA, UNC), (CPU0, FBK)),
    ("cuda:0", CUDA0, (MPS0, RED), (CUDA0, UNC), (CPU0, FBK)),
    ("cuda:1", CUDA1, (MPS0, RED), (CUDA1, UNC), (CPU0, FBK)),
    (0, CUDA0, (MPS0, RED), (CUDA0, UNC), (CPU0, FBK)),
    (1, CUDA1, (MPS0, RED), (CUDA1, UNC), (CPU0, FBK)),
    (torch.device("cuda", 1), CUDA1, (MPS0, RED), (CUDA1, UNC), (CPU0, FBK)),
]

TABLE_CELLS = [
    pytest.param(
        request, requested, HOSTS[host], device, action, id=f"{host}-{_request_id(request)}"
    )
    for request, requested, *cells in TABLE
    for host, (device, action) in zip(HOSTS, cells, strict=True)
]


@pytest.mark.parametrize(("request_", "requested", "host", "device", "action"), TABLE_CELLS)
def test_table_cell(request_, requested, host, device, action):
    decision = decide(request_, host, PolicyState())
    assert decision.device == device
    assert (decision.device.type, decision.device.index) == (device.type, device.index)
    assert decision.action == action
    assert decision.requested == requested
    assert decision.toggle_override is False
    assert isinstance(decision.reason, str)
    assert decision.reason.strip() != ""
    assert decision.moved is (action in ("redirect", "to-cpu"))


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize(
    "state", [PolicyState(), *KEEP_CPU_STATES.values()], ids=["default", *KEEP_CPU_STATES]
)
def test_cpu_minus_one_is_the_override_on_every_host(host, state):
    decision = decide("cpu:-1", host, state)
    assert decision.device == CPU0
    assert decision.action == "override"
    assert decision.toggle_override is True
    assert decision.requested == DeviceSpec("cpu", -1)
    assert decision.reason.strip() != ""
    assert decision.moved is False


def test_default_state_is_the_empty_state():
    for host in HOSTS.values():
        for request in (None, "cpu", "cuda:1", "mps"):
            assert decide(request, host) == decide(request, host, PolicyState())


# --- states that keep explicit CPU requests on the CPU --------------------------------

ACCELERATOR_HOSTS = {"mps": MPS_HOST, "cuda2": CUDA_HOST}
ACCELERATOR_OF = {"mps": MPS0, "cuda2": CUDA}


@pytest.mark.parametrize("state", KEEP_CPU_STATES.values(), ids=KEEP_CPU_STATES.keys())
@pytest.mark.parametrize("host_name", ACCELERATOR_HOSTS)
@pytest.mark.parametrize(
    ("request_", "requested"),
    [("cpu", CPU0), ("cpu:0", CPU0), ("cpu:3", DeviceSpec("cpu", 3)), (torch.device("cpu"), CPU0)],
    ids=_request_id,
)
def test_kept_cpu_requests_stay_on_the_cpu(state, host_name, request_, requested):
    decision = decide(request_, ACCELERATOR_HOSTS[host_name], state)
    assert decision.device == CPU0
    assert decision.action == "unchanged"
    assert decision.requested == requested
    assert decision.toggle_override is False
    assert decision.reason.strip() != ""


@pytest.mark.parametrize("state", KEEP_CPU_STATES.values(), ids=KEEP_CPU_STATES.keys())
@pytest.mark.parametrize("host_name", ACCELERATOR_HOSTS)
def test_kept_cpu_does_not_change_the_other_rows(state, host_name):
    host = ACCELERATOR_HOSTS[host_name]
    accelerator = ACCELERATOR_OF[host_name]
    default = decide(None, host, state)
    assert (default.device, default.action) == (accelerator, "default")
    cuda = decide("cuda", host, state)
    assert cuda.device == (MPS0 if host_name == "mps" else CUDA)
    assert cuda.action == ("redirect" if host_name == "mps" else "unchanged")
    mps = decide("mps", host, state)
    assert mps.device == accelerator
    assert mps.action == ("unchanged" if host_name == "mps" else "redirect")
    for request in (None, "cuda", "cuda:1", 1, "mps", "mps:0"):
        assert decide(request, host, state) == decide(request, host, PolicyState())


@pytest.mark.parametrize("state", KEEP_CPU_STATES.values(), ids=KEEP_CPU_STATES.keys())
def test_kept_cpu_on_a_cpu_host_changes_nothing(state):
    for request in (None, "cpu", "cpu:3", "cuda", "cuda:1", "mps", 0):
        assert decide(request, CPU_HOST, state) == decide(request, CPU_HOST, PolicyState())


# --- device types the table does not govern --------------------------------------------


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ("meta", DeviceSpec("meta", None)),
        ("xla", DeviceSpec("xla", None)),
        ("xla:1", DeviceSpec("xla", 1)),
        (torch.device("meta"), DeviceSpec("meta", None)),
    ],
    ids=_request_id,
)
def test_ungoverned_types_pass_through(host, request_, expected):
    for state in (PolicyState(), *KEEP_CPU_STATES.values()):
        decision = decide(request_, host, state)
        assert decision.device == expected
        assert decision.requested == expected
        assert decision.action == "unchanged"
        assert decision.toggle_override is False
        assert decision.reason.strip() != ""


def test_extra_types_are_accepted_and_pass_through():
    extra = frozenset({"npu"})
    assert parse_request("npu:2", extra) == DeviceSpec("npu", 2)
    decision = decide("npu:2", CUDA_HOST, PolicyState(), extra)
    assert (decision.device, decision.action) == (DeviceSpec("npu", 2), "unchanged")
    with pytest.raises(DeviceRequestError) as excinfo:
        decide("npu:2", CUDA_HOST)
    assert excinfo.value.request == "npu:2"


# ---------------------------------------------------------------------------------------
# Bad requests
# ---------------------------------------------------------------------------------------


def _native_error(request):
    with pytest.raises(RuntimeError) as excinfo:
        torch.device(request)
    return str(excinfo.value)


# Requests torch rejects with the very same message.
SAME_MESSAGE_AS_TORCH = ["cuda:abc", "", "cpu:-2", "cuda:-1", " cuda", "cuda:01", "cuda:"]


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("bad", SAME_MESSAGE_AS_TORCH, ids=repr)
def test_bad_strings_fail_like_torch(host, bad):
    with pytest.raises(DeviceRequestError) as excinfo:
        decide(bad, host)
    assert isinstance(excinfo.value, RuntimeError)
    assert isinstance(excinfo.value, torchdevice.TorchDeviceError)
    assert excinfo.value.request == bad
    assert str(excinfo.value) == _native_error(bad)


def test_bad_string_message_names_the_request():
    with pytest.raises(DeviceRequestError, match=r"^Invalid device string: 'cuda:abc'$"):
        decide("cuda:abc", MPS_HOST)
    assert _native_error("cuda:abc") == "Invalid device string: 'cuda:abc'"


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("bad", ["gpu", "CUDA"])
def test_unknown_device_types_fail_naming_the_request(host, bad):
    with pytest.raises(DeviceRequestError) as excinfo:
        decide(bad, host)
    message = str(excinfo.value)
    assert isinstance(excinfo.value, RuntimeError)
    assert excinfo.value.request == bad
    assert message.startswith("Expected one of ")
    assert message.endswith(f" device type at start of device string: {bad}")
    native = _native_error(bad)
    listed = message.removeprefix("Expected one of ").split(" device type")[0].split(", ")
    native_listed = native.removeprefix("Expected one of ").split(" device type")[0].split(", ")
    assert sorted(listed) == sorted(native_listed)


def test_unknown_device_type_message_is_torchs_verbatim():
    with pytest.raises(DeviceRequestError) as excinfo:
        decide("gpu", CPU_HOST)
    assert str(excinfo.value) == _native_error("gpu")


@pytest.mark.parametrize("request_", ["cuda:2", 2, torch.device("cuda", 2)], ids=_request_id)
def test_cuda_index_past_the_count(request_):
    with pytest.raises(DeviceRequestError) as excinfo:
        decide(request_, CUDA_HOST)
    assert isinstance(excinfo.value, RuntimeError)
    assert excinfo.value.request is request_
    message = str(excinfo.value)
    assert "invalid device ordinal" in message
    assert "index 2" in message
    assert "2 CUDA device(s)" in message
    assert repr(request_) in message


def test_cuda_index_past_the_count_only_matters_on_cuda_hosts():
    assert decide("cuda:7", MPS_HOST).device == MPS0
    assert decide("cuda:7", CPU_HOST).device == CPU0
    assert decide("cuda:7", Host.cuda(8)).device == DeviceSpec("cuda", 7)
    with pytest.raises(DeviceRequestError, match="index 1"):
        decide("cuda:1", Host.cuda(1))


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("request_", ["mps:1", torch.device("mps", 1)], ids=_request_id)
def test_mps_index_other_than_zero_raises(host, request_):
    with pytest.raises(DeviceRequestError) as excinfo:
        decide(request_, host)
    assert isinstance(excinfo.value, RuntimeError)
    assert excinfo.value.request is request_
    assert "Invalid device index 1 for 'mps'" in str(excinfo.value)


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
@pytest.mark.parametrize("bad", [1.5, [1], object(), True, False], ids=lambda b: type(b).__name__)
def test_wrong_types_raise_type_error(host, bad):
    with pytest.raises(TypeError):  # torch raises TypeError too
        torch.device(bad)
    with pytest.raises(DeviceRequestTypeError) as excinfo:
        decide(bad, host)
    assert isinstance(excinfo.value, TypeError)
    assert not isinstance(excinfo.value, RuntimeError)
    assert excinfo.value.request is bad
    assert repr(bad) in str(excinfo.value)


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
def test_negative_int_raises_like_torch(host):
    with pytest.raises(RuntimeError, match=r"^Device index must not be negative"):
        torch.device(-1)
    with pytest.raises(DeviceRequestError, match=r"^Device index must not be negative") as excinfo:
        decide(-1, host)
    assert isinstance(excinfo.value, RuntimeError)
    assert excinfo.value.request == -1


# ---------------------------------------------------------------------------------------
# parse_request
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (None, None),
        ("cpu", CPU0),
        ("cpu:0", CPU0),
        ("cpu:5", DeviceSpec("cpu", 5)),
        ("cpu:-1", DeviceSpec("cpu", -1)),
        ("mps", MPS0),
        ("mps:0", MPS0),
        ("cuda", CUDA),
        ("cuda:0", CUDA0),
        ("cuda:12", DeviceSpec("cuda", 12)),
        (0, CUDA0),
        (3, DeviceSpec("cuda", 3)),
        (torch.device("cpu"), CPU0),
        (torch.device("cpu", 2), DeviceSpec("cpu", 2)),
        (torch.device("mps"), MPS0),
        (torch.device("cuda"), CUDA),
        (torch.device("cuda", 1), CUDA1),
        ("meta", DeviceSpec("meta", None)),
        (torch.device("meta"), DeviceSpec("meta", None)),
        (DeviceSpec("cpu", None), CPU0),
        (DeviceSpec("cuda", None), CUDA),
    ],
    ids=_request_id,
)
def test_parse_request_normalizes_indices(request_, expected):
    assert parse_request(request_) == expected


def test_device_spec_str():
    assert [str(s) for s in (CPU0, MPS0, CUDA, CUDA1, DeviceSpec("cpu", -1))] == [
        "cpu:0",
        "mps:0",
        "cuda",
        "cuda:1",
        "cpu:-1",
    ]


# ---------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------

hosts = st.one_of(st.just(MPS_HOST), st.just(CPU_HOST), st.integers(1, 8).map(Host.cuda))
states = st.builds(PolicyState, cpu_override=st.booleans(), keep_cpu=st.booleans())


def optional(index_strategy):
    return st.one_of(st.none(), index_strategy)


def device_string(device_type, index):
    return device_type if index is None else f"{device_type}:{index}"


@st.composite
def host_and_request(draw):
    """A host and a request valid on it: CUDA indices stay below a CUDA host's count."""
    host = draw(hosts)
    cuda_limit = host.cuda_device_count if host.kind == "cuda" else 8
    cuda_index = st.integers(0, cuda_limit - 1)
    cpu_index = st.integers(-1, 7)
    mps_index = st.just(0)
    kind = draw(st.sampled_from(["none", "string", "int", "torch.device"]))
    if kind == "none":
        return host, None
    if kind == "int":
        return host, draw(cuda_index)
    device_type = draw(st.sampled_from(["cpu", "cuda", "mps"]))
    index_strategy = {"cpu": cpu_index, "cuda": cuda_index, "mps": mps_index}[device_type]
    if kind == "string":
        return host, device_string(device_type, draw(optional(index_strategy)))
    if device_type == "cpu":  # torch.device("cpu", -1) is not constructible
        index_strategy = st.integers(0, 7)
    return host, torch.device(device_type, draw(optional(index_strategy)))


PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _keeps_cpu(state):
    return state.cpu_override or state.keep_cpu


@PROPERTY_SETTINGS
@given(host_and_request(), states)
def test_property_deciding_the_decided_device_again_is_a_fixed_point(host_request, state):
    """For every decision whose action is not "override", deciding its device again, on
    the same host and in the same state, keeps that device with action "unchanged".

    This holds for CPU decisions on accelerator hosts only because such a decision (other
    than the override) arises only in a state that keeps CPU requests on the CPU, and that
    same state keeps the re-decided "cpu:0" there; the test checks that premise too. The
    device is re-decided as a DeviceSpec, as its string and as a torch.device.
    """
    host, request = host_request
    decision = decide(request, host, state)
    if decision.action == "override":
        return
    if decision.device.type == "cpu" and host.kind != "cpu":
        assert _keeps_cpu(state)
    device = decision.device
    for again in (device, str(device), torch.device(str(device))):
        redecided = decide(again, host, state)
        assert redecided.device == device
        assert redecided.action == "unchanged"
        assert redecided.toggle_override is False


@PROPERTY_SETTINGS
@given(hosts, states)
def test_property_override_then_cpu_follows_the_toggled_state(host, state):
    """After "cpu:-1" (CPU, toggle), an explicit "cpu:0" under the toggled state stays on
    the CPU exactly when the host is CPU-only or the toggled state keeps CPU requests."""
    decision = decide("cpu:-1", host, state)
    assert (decision.device, decision.action, decision.toggle_override) == (CPU0, "override", True)
    toggled = dataclasses.replace(state, cpu_override=not state.cpu_override)
    after = decide("cpu:0", host, toggled)
    stays = host.kind == "cpu" or _keeps_cpu(toggled)
    assert (after.device.type == "cpu") is stays
    assert after.action == ("unchanged" if stays else "redirect")


def _host_has(host, device):
    if device.type == "cpu":
        return device.index == 0
    if host.kind == "mps":
        return device == MPS0
    if host.kind == "cuda":
        return device.type == "cuda" and (
            device.index is None or device.index < host.cuda_device_count
        )
    return False


@PROPERTY_SETTINGS
@given(host_and_request(), states)
def test_property_decided_device_exists_on_the_host(host_request, state):
    """The decided device is one the host has: cpu:0 anywhere, mps:0 on an MPS host, and
    cuda (current) or cuda:i with i < count on a CUDA host; a CPU-only host only gets cpu."""
    host, request = host_request
    decision = decide(request, host, state)
    assert _host_has(host, decision.device), (host, request, state, decision)
    if host.kind == "cpu":
        assert decision.device == CPU0
    assert decision.reason.strip() != ""
    assert decision.toggle_override is (decision.action == "override")


@PROPERTY_SETTINGS
@given(host_and_request(), states)
def test_property_decide_is_pure(host_request, state):
    """Same inputs give equal outputs, and neither the state nor the host is mutated."""
    host, request = host_request
    state_before = dataclasses.replace(state)
    host_before = dataclasses.replace(host)
    first = decide(request, host, state)
    second = decide(request, host, state)
    assert isinstance(first, Decision)
    assert first == second
    assert hash(first) == hash(second)
    assert state == state_before
    assert host == host_before
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.cpu_override = not state.cpu_override
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.action = "redirect"


@PROPERTY_SETTINGS
@given(host_and_request(), states)
def test_property_strings_and_torch_devices_decide_alike(host_request, state):
    """A string torch accepts and the torch.device built from it decide the same way."""
    host, request = host_request
    if not isinstance(request, str) or request == "cpu:-1":  # torch rejects "cpu:-1"
        return
    assert decide(torch.device(request), host, state) == decide(request, host, state)


def _torch_global_state():
    return (
        torch.get_default_device(),
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
        sys.modules["torch.cuda"],
        torch.cuda,
        tuple(_get_current_function_mode_stack()),
        torchdevice.is_enabled(),
        frozenset(sys.modules),
    )


@PROPERTY_SETTINGS
@given(host_and_request(), states)
def test_property_decide_leaves_torch_alone(host_request, state):
    """decide imports nothing and changes no torch global state."""
    host, request = host_request
    imports = []
    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        imports.append(name)
        return real_import(name, *args, **kwargs)

    before = _torch_global_state()
    builtins.__import__ = recording_import
    try:
        decide(request, host, state)
    finally:
        builtins.__import__ = real_import
    assert imports == []
    assert _torch_global_state() == before


# -- the rules beside the table ------------------------------------------------------------
RULE_HOSTS = {"cpu": Host.cpu(), "mps": Host.mps(), "cuda": Host.cuda(2)}


@pytest.mark.parametrize("kind", sorted(RULE_HOSTS))
def test_only_an_mps_host_lacks_float64(kind):
    assert has_float64(RULE_HOSTS[kind]) is (kind != "mps")


@pytest.mark.parametrize("kind", sorted(RULE_HOSTS))
@pytest.mark.parametrize("device_type", [None, "cpu", "cuda", "mps"])
def test_only_host_memory_on_a_cuda_host_is_pinned(kind, device_type):
    expected = kind == "cuda" and device_type in (None, "cpu")
    assert pins(RULE_HOSTS[kind], device_type) is expected


@pytest.mark.parametrize(
    ("generator", "target", "expected"),
    [
        ("cpu", "cpu", False),
        ("cpu", "mps:0", True),
        ("cuda:0", "cuda:0", False),
        ("cuda:0", "cuda:1", True),
        ("cpu", "cuda", True),
    ],
)
def test_a_generator_draws_where_it_lives(generator, target, expected):
    assert draws_on_generator(generator, target) is expected


def test_is_inplace_follows_torchs_naming_rule():
    """One definition of "in place" for the fallback's write-back and the generator rule."""
    from torchdevice.redirecting.policy import is_inplace

    assert is_inplace(torch.Tensor.add_)
    assert is_inplace(torch.Tensor.uniform_)
    assert not is_inplace(torch.add)
    assert not is_inplace(torch.Tensor.__add__)
    assert not is_inplace(torch.Tensor.__iadd__)  # a dunder, whatever it does
    assert not is_inplace(object())  # no name

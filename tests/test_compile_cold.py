"""``torch.compile(fullgraph=True)`` of redirected code from a cold start (issue 8, item 3).

Every device request a compiled region makes is decided while dynamo traces, the first
time, with nothing resolved eagerly before: no lock, no exception built, no cache read in
traced code, so one graph, no graph break, and no recompilation when eager code later
resolves other devices.

The cases run in one child interpreter (dynamo and the runtime are process-wide), and each
starts cold: a new activation (a new runtime with empty caches, asserted) and a reset of
dynamo. The first case is the process's first compile, with dynamo imported by it after
``enable()`` (as under ``python -m torchdevice``); the others run after a ``disable()``/
``enable()`` with dynamo loaded. A case prints ``ok NAME`` or ``FAIL NAME`` and its
traceback; each test below reports one case. ``backend="eager"`` (through a compile
counter) gives the breadth; inductor compiles the representative function and module.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

CHILD = r'''
import sys
import traceback

import torch

import torchdevice
from torchdevice import activation

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda", 0)  # made before enable(): a native CUDA device object


def cold():
    """A new activation and a fresh dynamo: nothing this case asks for is resolved yet."""
    torchdevice.disable()
    if "torch._dynamo" in sys.modules:  # not before the first case: its compile loads it
        torch._dynamo.reset()
    activation._last_runtime = None  # else enable() reuses the last runtime, caches and all
    torchdevice.enable()
    rt = activation.current_runtime()
    assert rt.decisions == {} and rt._devices == {}, "not cold"


def check(fn, *args, calls=3, backend=None, between=None):
    """Compile ``fn`` cold with fullgraph=True: one graph, no recompilation, eager-equal."""
    from torch._dynamo.testing import CompileCounter
    from torch._dynamo.utils import counters

    counter = CompileCounter()
    compiled = torch.compile(fn, fullgraph=True, backend=backend or counter)
    counters.clear()
    outs = []
    for _ in range(calls):
        outs.append(compiled(*args))
        if between is not None:
            between()  # eager code resolving other devices must not fail the guards
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1, f"{graphs} graphs compiled over {calls} calls"
    if backend is None:
        assert counter.frame_count == 1 and counter.op_count > 0, vars(counter)
    expected = fn(*args)  # eager, after: the compile above saw a cold cache
    for out in outs:
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
        for got, want in zip(torch.utils._pytree.tree_leaves(out),
                             torch.utils._pytree.tree_leaves(expected)):
            if isinstance(want, torch.Tensor):
                assert got.device == want.device == CPU, (got.device, want.device)
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1, explained.graph_count


def eager_requests():
    """Device requests this activation has not seen, made eagerly between compiled calls."""
    torch.ones(1, device="mps")
    torch.ones(1, device=torch.device("cuda", 0)).to("cuda:0")
    torch.empty(1, device=1)


x = torch.arange(6.0).reshape(2, 3)


def case_first_compile_of_the_process():
    assert "torch._dynamo" not in sys.modules

    def fn(x, index):
        y = x.cuda() + x.to("cuda:0") + torch.ones(3, device=CUDA0) + torch.zeros(3, device=index)
        if torch.cuda.is_available():
            y = y + torch.arange(3, device=x.device) + torch.full((3,), 2.0, device="cuda")
        return y
    check(fn, x, 0, between=eager_requests)


def case_marker():
    # torchdevice marks its trace-time helpers as assume_constant_result does.
    marked = torch._dynamo.assume_constant_result(lambda: 0)
    assert vars(marked) == {"_dynamo_marked_constant": True}, vars(marked)


def case_strings():
    def fn(x):
        return (x + torch.ones(3, device="cuda") + torch.zeros(2, 3, device="cuda:0")
                + torch.full((3,), 2.0, device="mps") + torch.arange(3.0, device="cpu"))
    check(fn, x, between=eager_requests)


def case_device_objects():
    def fn(x):
        inside = torch.device("cuda")  # folded by dynamo; the factory still redirects it
        return x.to(CUDA0) + torch.ones(3, device=CUDA0) + torch.zeros(3, device=inside)
    check(fn, x, between=eager_requests)


def case_x_device():
    def fn(x):
        n = x.shape[-1]
        return (torch.arange(n, device=x.device) * x + torch.zeros_like(x, device=x.device)
                + x.new_ones(n, device=x.device))
    check(fn, x, between=eager_requests)


def case_indices():
    def fn(x, index):
        return torch.ones(3, device=0) + x.to(0) + x.cuda(0) + torch.zeros(3, device=index)
    check(fn, x, 0, between=eager_requests)


def case_cuda_method():
    def fn(x):
        return x.cuda() + 1, x.cuda(non_blocking=True) * 2, x.float().cuda().sum()
    check(fn, x, between=eager_requests)


def case_to_cuda():
    def fn(x):
        return (x.to("cuda"), x.to("cuda", torch.float64), x.to(device="cuda:0", dtype=torch.int64),
                x.to("cuda:0", non_blocking=True) + 1)
    check(fn, x, between=eager_requests)


def case_is_available():
    def fn(x):
        if torch.cuda.is_available():  # device_count() cannot compile natively either
            x = x + torch.ones(3, device=f"cuda:{torch.cuda.current_device()}")
        return x
    check(fn, x, between=eager_requests)
    assert torch.cuda.is_available()


def case_autocast():
    def fn(x):
        with torch.autocast("cuda"):
            return x @ torch.ones(3, 2, device="cuda")
    check(fn, x)
    assert fn(x).dtype == torch.bfloat16


class Net(torch.nn.Module):
    """A CUDA-first module: device strings, x.device, .cuda(), .to("cuda") in forward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 4)
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x):
        x = x.cuda()
        mask = torch.ones(x.shape[0], 1, device="cuda:0")
        positions = torch.arange(x.shape[-1], device=x.device)
        h = self.linear(x + positions) * mask.to("cuda")
        return torch.relu(h) * self.scale + torch.zeros(4, device=torch.device("cuda"))


def case_module():
    check(Net(), x, between=eager_requests)


def case_inductor_function():
    def fn(x):
        n = x.shape[-1]
        y = x.to("cuda:0") + torch.arange(n, device=x.device) + torch.ones(n, device=0)
        return torch.sin(y.cuda()) + torch.zeros(n, device=CUDA0)
    check(fn, x, backend="inductor", between=eager_requests)


def case_inductor_module():
    check(Net(), x, backend="inductor", between=eager_requests)


def case_toggle_is_a_graph_break():
    def fn(x):
        return x + torch.ones(3, device="cpu:-1")
    from torch._dynamo.exc import Unsupported
    try:
        torch.compile(fn, fullgraph=True, backend="eager")(x)
    except Unsupported as error:
        assert "'cpu:-1' toggles the CPU override" in str(error), error
    else:
        raise AssertionError("fullgraph=True compiled a cpu:-1 toggle")
    # Without fullgraph the toggle breaks the graph and runs eagerly, once per call.
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager")
    states = []
    for _ in range(3):
        torch.testing.assert_close(compiled(x), x + 1)
        states.append(activation.current_runtime().state.cpu_override)
    assert states == [True, False, True], states


def case_override_is_guarded():
    def fn(x):
        return x.to("cpu") + 1
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    compiled = torch.compile(fn, fullgraph=True, backend=counter)
    for on in (False, True, False, True):
        torchdevice.set_cpu_override(on)
        torch.testing.assert_close(compiled(x), x + 1)
    assert counter.frame_count == 2, counter.frame_count  # one graph per override state


def case_bad_request_names_it():
    def fn(x):
        return x + torch.ones(3, device="cuda:abc")
    try:
        torch.compile(fn, fullgraph=True, backend="eager")(x)
    except RuntimeError as error:
        assert "Invalid device string: 'cuda:abc'" in str(error), error
        assert "super()" not in str(error) and "context manager" not in str(error), error
    else:
        raise AssertionError("a malformed device compiled")


def case_native_after_disable():
    # Last: after the activations above, compiled code sees the real torch.cuda again.
    torchdevice.disable()
    torch._dynamo.reset()

    def fn(x):
        return x + 1 if torch.cuda.is_available() else x - 1
    expected = x + 1 if torch.cuda.is_available() else x - 1
    torch.testing.assert_close(torch.compile(fn, fullgraph=True, backend="eager")(x), expected)


for name in sys.argv[1:]:
    cold()
    try:
        globals()["case_" + name]()
    except BaseException:
        print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
    else:
        print(f"ok {name}", flush=True)
torchdevice.disable()
'''

CASES = [
    name.removeprefix("def case_").split("(")[0]
    for name in re.findall(r"^def case_\w+\(", CHILD, flags=re.MULTILINE)
]


@pytest.fixture(scope="module")
def child_run() -> tuple[dict[str, str], str]:
    """Run every case once in a fresh interpreter: each case's output ("" when it passed),
    and the child's stderr."""
    env = {**os.environ, "TORCHDEVICE_LOG_LEVEL": "ERROR"}
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), *CASES],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    outcomes: dict[str, str] = {}
    for block in re.split(r"^(?=ok |FAIL )", completed.stdout, flags=re.MULTILINE):
        status, _, rest = block.partition(" ")
        name, _, details = rest.partition("\n")
        if status in ("ok", "FAIL"):
            outcomes[name.strip()] = "" if status == "ok" else details or "failed"
    return outcomes, completed.stderr


@pytest.mark.parametrize("case", CASES)
def test_cold_fullgraph_compile(child_run: tuple[dict[str, str], str], case: str) -> None:
    outcomes, stderr = child_run
    assert case in outcomes, f"{case} did not run; the child's stderr:\n{stderr[-3000:]}"
    if outcomes[case]:
        pytest.fail(f"{case}:\n{outcomes[case]}", pytrace=False)

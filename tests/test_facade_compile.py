"""torch.compile with the facade: while redirecting, and natively after disable().

Dynamo builds tables of ``torch.cuda`` functions when it is first imported. Each scenario
runs in a fresh interpreter so that "dynamo first imported while enabled" really is the
first import, which a test inside this pytest process cannot guarantee.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
import torch
if {import_dynamo_first}:
    import torch._dynamo
import torchdevice

torchdevice.enable()

def step(x):
    if torch.cuda.is_available():
        x = x + torch.cuda.current_device() + 1
    with torch.autocast("cuda"):
        y = x @ x
    return y, torch.cuda.get_device_properties(0).multi_processor_count

x = torch.ones(2, 2, device="cuda")
eager, count = step(x)
for backend in ("eager", "inductor"):
    out, compiled_count = torch.compile(step, fullgraph=True, backend=backend)(x)
    assert out.dtype == torch.bfloat16 == eager.dtype, (backend, out.dtype)
    assert out.device == torch.device("cpu")
    assert out.float().tolist() == [[8.0, 8.0], [8.0, 8.0]], out
    assert compiled_count == count

torchdevice.disable()
import torch._dynamo.device_interface as device_interface
import torch._dynamo.variables.torch as variables
assert torch.cuda.is_available in variables.constant_fold_functions
assert torch.cuda.get_device_properties in variables.constant_fold_functions
assert device_interface.CudaInterface.current_device is torch.cuda.current_device
assert torch.get_device_module("cuda") is torch.cuda

def native(x):
    if torch.cuda.is_available():
        return x + 100
    return x - 100

torch._dynamo.reset()
expected = native(torch.ones(2)).tolist()  # eager, native: what compiled code must give
for backend in ("eager", "inductor"):
    out = torch.compile(native, fullgraph=True, backend=backend)(torch.ones(2))
    assert out.tolist() == expected, (backend, out)
print("ok")
"""


@pytest.mark.parametrize("import_dynamo_first", [False, True])
def test_compile_while_enabled_then_natively_after_disable(import_dynamo_first):
    code = textwrap.dedent(SCRIPT).format(import_dynamo_first=import_dynamo_first)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")

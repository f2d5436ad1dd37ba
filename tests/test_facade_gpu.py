"""On a real CUDA host: the torch.cuda facade stays out of the way, torch.mps answers from CUDA.

Skipped without a CUDA GPU (run on the lent GPU machine).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

import torchdevice
from torchdevice import facade
from torchdevice.facade import mps

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

REAL_CUDA = sys.modules["torch.cuda"]
MIB = 2**20


def test_cuda_code_on_a_cuda_host_uses_the_real_torch_cuda():
    torchdevice.enable()
    assert torch.cuda is REAL_CUDA
    assert not facade.installed()
    x = torch.ones(3, device="cuda")
    assert x.device.type == "cuda"
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    time.sleep(0.06)
    end.record()
    end.synchronize()
    assert 55.0 <= start.elapsed_time(end) < 120.0
    with torch.autocast("cuda"):
        assert (x[None] @ x[:, None]).dtype == torch.float16


MPS_FIRST = """\
import torch
available = torch.backends.mps.is_available() and torch.backends.mps.is_built()
device = torch.device("mps" if available else "cpu")
"""


def test_mps_first_code_runs_on_the_cuda_gpu():
    torchdevice.enable(written_for="mps")  # this module names CUDA: it says what it runs
    assert mps.installed()
    # MPS code finds MPS: docs/facade.md.
    program: dict[str, object] = {"__name__": "__main__"}
    exec(compile(MPS_FIRST, "mps_program.py", "exec"), program)
    device = program["device"]
    assert device == torch.device("mps")
    x = torch.randn(256, 256, device=device)
    assert x.device.type == "cuda"
    torch.mps.synchronize()
    before = torch.mps.current_allocated_memory()
    assert before == torch.cuda.memory_allocated()
    big = torch.empty(64 * MIB, dtype=torch.uint8, device="mps")
    assert torch.mps.current_allocated_memory() - before >= 64 * MIB
    assert torch.mps.driver_allocated_memory() == torch.cuda.memory_reserved()
    del big
    torch.mps.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    assert torch.mps.recommended_max_memory() == total
    torch.mps.manual_seed(7)
    a = torch.rand(4, device="mps")
    torch.mps.manual_seed(7)
    assert torch.equal(torch.rand(4, device="mps"), a)
    y = x @ x  # the first matmul creates cuBLAS's handle on the host: not in the region
    start, end = torch.mps.Event(enable_timing=True), torch.mps.Event(enable_timing=True)
    start.record()
    y = x @ y
    time.sleep(0.03)
    end.record()
    end.synchronize()
    assert 25.0 <= start.elapsed_time(end) < 100.0
    assert y.device.type == "cuda"
    with torch.autocast("mps"):
        assert (x @ x).dtype == torch.float16
    scaler = torch.amp.GradScaler("mps")
    assert scaler._device == "cuda"
    assert scaler.is_enabled()
    with torch.mps.profiler.profile():
        pass
    torchdevice.disable()
    assert not mps.installed()
    assert torch.backends.mps.is_available() is False


def test_cpu_host_semantics_with_a_cuda_build_of_torch():
    """The facade over a CUDA build (host forced to 'cpu'): the real module is hidden."""
    torchdevice.enable(host="cpu")
    assert facade.installed()
    assert torch.zeros(1, device="cuda").device.type == "cpu"
    assert torch.cuda.get_device_properties(0).real_type == "cpu"
    torchdevice.disable()
    assert torch.cuda is REAL_CUDA
    assert torch.zeros(1, device="cuda").device.type == "cuda"


_FORKED_WORKERS = """
import torch, torchdevice
from torch.utils.data import DataLoader, Dataset

class Noise(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, index):
        return torch.rand(4), index  # a device-less factory in the worker

torchdevice.enable()
torch.manual_seed(1)
first = torch.rand(3, device="cuda")  # CUDA is initialized before the workers fork
torch.manual_seed(1)
assert torch.equal(first, torch.rand(3, device="cuda")), "torch.manual_seed seeds CUDA"
loader = DataLoader(Noise(), batch_size=4, num_workers=2, multiprocessing_context="fork")
seen = sorted(int(i) for _, indices in loader for i in indices)
assert seen == list(range(8)), seen
print("ok")
"""


def test_forked_dataloader_workers_after_cuda_initialized():
    """Workers seed themselves with torch.manual_seed, which seeds torch.mps, the facade over
    CUDA here: a fork child of a CUDA process must not initialize CUDA to do it."""
    done = subprocess.run(
        [sys.executable, "-c", _FORKED_WORKERS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"

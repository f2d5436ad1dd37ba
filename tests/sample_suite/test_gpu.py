"""GPU-only tests: skipped natively on a host without CUDA, run redirected."""

import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@requires_cuda
def test_cuda_matmul():
    x = torch.randn(8, 8, device="cuda")
    y = x @ x.T
    torch.cuda.synchronize()
    assert y.shape == (8, 8)


@requires_cuda
def test_peak_memory():
    torch.cuda.reset_peak_memory_stats()
    x = torch.empty(1024, 1024, device="cuda")
    assert torch.cuda.max_memory_allocated() >= 0
    del x


@requires_cuda
def test_tensor_is_on_cuda():
    x = torch.zeros(1, device="cuda")
    assert x.device.type == "cuda"  # redirected: the tensor is where the host can put it

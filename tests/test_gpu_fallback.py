"""On a real CUDA host: ops CUDA cannot run fall back to the CPU and match (issue 4, item 6).

Skipped without a CUDA GPU (run on the lent GPU machine).
"""

from __future__ import annotations

import pytest
import torch

import torchdevice

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture
def redirected():
    torchdevice.enable()
    yield
    torchdevice.disable()


def fallbacks() -> list[tuple[str, str, int]]:
    return [
        (e.api, e.requested, e.count) for e in torchdevice.report().entries if e.kind == "fallback"
    ]


def _error_of(call) -> str | None:
    try:
        call()
    except RuntimeError as error:
        return str(error)
    return None


def test_torch_library_op_with_only_a_cpu_kernel_falls_back(redirected):
    library = torch.library.Library("torchdevice_gpu_test", "DEF")
    library.define("scale(Tensor x, float factor) -> Tensor")
    library.impl("scale", lambda x, factor: x * factor, "CPU")
    x = torch.arange(4.0, device="cuda")
    y = torch.ops.torchdevice_gpu_test.scale(x, 1.5)
    assert y.device.type == "cuda"
    torch.testing.assert_close(y.cpu(), torch.arange(4.0) * 1.5)
    [(api, requested, count)] = fallbacks()
    assert "scale" in api
    assert requested == "cuda:0, float32"
    assert count == 1


def test_integer_matmul_cuda_lacks_falls_back_and_matches_cpu(redirected):
    torchdevice.disable()  # inputs and reference built natively, on the CPU
    a_cpu = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    b_cpu = torch.arange(8, dtype=torch.int64).reshape(4, 2)
    expected = (a_cpu @ b_cpu).tolist()
    native_error = _error_of(lambda: torch.mm(a_cpu.cuda(), b_cpu.cuda()))
    if native_error is None:
        pytest.skip("this CUDA build implements int64 mm: no gap to fall back from")
    assert "not implemented for 'Long'" in native_error
    torchdevice.enable()
    result = torch.mm(a_cpu.to("cuda"), b_cpu.to("cuda"))
    assert result.device.type == "cuda"
    assert result.dtype == torch.int64
    assert result.tolist() == expected  # (.cpu() would redirect to CUDA on a CUDA host)
    assert [(api, count) for api, _, count in fallbacks()] == [("torch.mm", 1)]


def test_genuine_cuda_errors_still_raise(redirected):
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        torch.mm(torch.ones(2, 3, device="cuda"), torch.ones(2, 3, device="cuda"))
    assert fallbacks() == []

"""The dispatcher-level net on an accelerator host (the simulated MPS stand-in).

TorchScript's ``device="cuda"`` and ``device="mps"`` allocations land on the accelerator,
float64 takes the dtype rule as under the mode, and the rows name the caller's line. The
module runs in a child process that registers the backend.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

from childrun import mirror_in_parent

NAME = "simgpu"


def _script(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``torch.jit.script``, which 2.13 deprecates (the suite turns that into an error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(fn)


@_script
def cuda_float64(n: int) -> torch.Tensor:
    return torch.arange(n, device="cuda", dtype=torch.float64)


@_script
def mps_like(x: torch.Tensor) -> torch.Tensor:
    return torch.full_like(x, 3.0, device="mps")


@pytest.fixture
def accelerator():
    import torchdevice
    from torchdevice import Host
    from torchdevice.testing import register

    register(NAME)
    torchdevice.enable(host=Host.simulated(NAME))
    return torch.device(NAME, 0)


def test_torchscript_requests_land_on_the_accelerator(accelerator):
    import torchdevice

    result = cuda_float64(3)  # the net: on the accelerator, float64 narrowed
    assert result.device == accelerator
    assert result.dtype == torch.float32
    torch.testing.assert_close(result.cpu(), torch.arange(3, dtype=torch.float32))
    like = mps_like(torch.zeros(2, dtype=torch.float16))
    assert like.device == accelerator
    assert like.dtype == torch.float16
    assert torch.equal(like.cpu(), torch.full((2,), 3.0, dtype=torch.float16))
    rows = {
        (e.api, e.kind, e.requested, e.decided)
        for e in torchdevice.report().entries
        if e.site.function == "test_torchscript_requests_land_on_the_accelerator"
    }
    assert ("aten::empty.memory_format", "redirect", "cuda", "mps:0") in rows
    assert (
        "aten::empty.memory_format",
        "dtype",
        f"{NAME}:0, float64",
        f"{NAME}:0, float32",
    ) in rows
    # An "mps" request is where it goes on an MPS host: placed, not reported as a redirect.
    assert not any(api == "aten::empty_strided" and kind == "redirect" for api, kind, *_ in rows)


mirror_in_parent(globals())

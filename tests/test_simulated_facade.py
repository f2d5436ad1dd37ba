"""The facade on a registered backend (the simulated MPS stand-in), and forcing that host.

Runs in a child process that registers the backend (see ``childrun``).
"""

from __future__ import annotations

import pytest
import torch

from childrun import mirror_in_parent

NAME = "simgpu"


@pytest.fixture
def accelerator():
    import torchdevice
    from torchdevice.testing import register

    register(NAME)
    torchdevice.enable(host="mps")  # forced: runs on the simulated accelerator
    return torch.device(NAME, 0)


def test_forced_mps_host_runs_on_the_simulated_accelerator(accelerator):
    from torchdevice.activation import current_runtime

    runtime = current_runtime()
    assert runtime is not None
    assert runtime.host.kind == "mps"
    assert runtime.host.device_type == NAME
    assert torch.ones(2, device="cuda").device == accelerator


def test_memory_summary_and_stats_on_a_registered_backend(accelerator):
    buffer = torch.empty(4 * 2**20, dtype=torch.uint8, device="cuda")
    summary = torch.cuda.memory_summary()
    assert f"CUDA requests run on {NAME}" in summary
    assert f"Source: torch.{NAME} (a registered backend)" in summary
    stats = torch.cuda.memory_stats()
    assert sorted(stats) == [
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
    ]
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"] > 0
    del buffer


def test_wait_stream_is_the_backends_own(accelerator):
    side, default = torch.cuda.Stream(), torch.cuda.current_stream()
    assert side.device == default.device == accelerator
    side.wait_stream(default)  # an event recorded on default, waited on by side
    default.wait_stream(side)
    with pytest.raises(TypeError):  # the backend checks its argument: no silent no-op
        side.wait_stream(object())


mirror_in_parent(globals())

"""The op-database sweep on the simulated MPS host: the same samples, landing on ``simgpu``.

Every tensor-free op_db sample asked for on "cuda" (``device=``, ``with torch.device``,
``torch.set_default_device``) must land on the simulated accelerator with the native CPU
run's values: the device computes with the CPU's kernels, and its generator, seeded
alike, draws the CPU's numbers. MPS has no float64, so an explicit float64 ``dtype=`` is
float32 there (docs/fallback.md): the reference is the native run asked for float32.

Registering the backend is permanent, so this module runs itself in a child process
(``childrun.py``); the CPU host's sweep and the shared machinery are in ``test_sweep.py``
and ``opsweep.py``.
"""

from __future__ import annotations

import pytest
import torch

import opsweep
import torchdevice
from childrun import mirror_in_parent
from torchdevice import Host

pytestmark = pytest.mark.slow  # a child pytest process, op_db's import, ~7,400 samples x3

NAME = "simgpu"
#: (op id, way, or "*" for every way) -> why the sweep does not hold the samples to the
#: native CPU run. Counted in each sweep's summary; every excluded sample still runs and
#: must still fail, so an exclusion that is no longer needed fails the sweep.
EXCLUDED = {
    ("broadcast_shapes", "device="): "takes no device (it computes a torch.Size): "
    "device= is a TypeError natively too",
}


def mps_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype rule of an MPS host: float64 is float32 on the device."""
    return torch.float32 if dtype is torch.float64 else dtype


def seed_both() -> None:
    """Seed the CPU's generator and the device's, as ``torch.manual_seed`` does."""
    opsweep.seed_cpu()
    getattr(torch, NAME).manual_seed(opsweep.SEED)


@pytest.fixture(scope="module")
def simgpu() -> torch.device:
    from torchdevice.testing import register

    register(NAME)
    return torch.device(NAME, 0)


@pytest.mark.parametrize("way", opsweep.WAYS)
def test_every_tensor_free_sample_lands_on_the_simulated_device_as_on_the_cpu(simgpu, way):
    host = Host.simulated(NAME)
    tally = opsweep.sweep(
        way, simgpu, lambda: torchdevice.redirect(host=host), EXCLUDED, mps_dtype, seed_both
    )
    print(tally.summary())
    problem = opsweep.verdict(tally)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    assert tally.passed + sum(tally.excluded.values()) == tally.samples > 5000
    assert tally.passed > 3000


def test_normal_constructs_on_the_device_and_its_tensor_overloads_follow_their_tensors(simgpu):
    """The hole the sweep found: ``torch.normal(mean, std, size)`` took no redirect."""
    cpu_generator = torch.Generator
    calls = {
        "constructor": lambda: torch.normal(0.0, 1.0, (4,)),
        "constructor, cpu generator": lambda: torch.normal(
            0.0, 1.0, (4,), generator=cpu_generator().manual_seed(3)
        ),
        "tensor means": lambda: torch.normal(torch.arange(4.0), 0.5),
        "tensor means, cpu generator": lambda: torch.normal(
            torch.arange(4.0), 0.5, generator=cpu_generator().manual_seed(3)
        ),
    }
    native = {}
    for name, call in calls.items():
        torch.manual_seed(5)
        native[name] = call()
    with torchdevice.redirect(host=Host.simulated(NAME), cpu_override=True):
        for name, call in calls.items():
            torch.manual_seed(5)
            got = call()
            assert got.device == simgpu, name
            torch.testing.assert_close(got.cpu(), native[name], rtol=0, atol=0, msg=name)


mirror_in_parent(globals())

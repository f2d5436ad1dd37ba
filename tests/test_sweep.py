"""The op-database sweep on the CPU host: every tensor-free op_db sample, asked for on "cuda".

Natively this host cannot make a single one of these tensors on "cuda"; redirected, each
must land on the CPU with the native CPU run's values (random ops included: the CPU host
draws on the CPU, so the same seed gives the same numbers). How samples are found and
compared is in ``opsweep.py``; the simulated MPS host's sweep is ``test_sweep_simulated.py``.
"""

from __future__ import annotations

import pytest
import torch

import opsweep
import torchdevice

pytestmark = pytest.mark.slow  # ~7,400 samples three ways, and op_db's import: ~10 s

CPU = torch.device("cpu")
NATIVE_ACCELERATOR = torch.cuda.is_available() or torch.backends.mps.is_available()

#: (op id, way, or "*" for every way) -> why the sweep does not hold the samples to the
#: native CPU run. Counted in each sweep's summary; every excluded sample still runs and
#: must still fail, so an exclusion that is no longer needed fails the sweep.
EXCLUDED = {
    ("broadcast_shapes", "device="): "takes no device (it computes a torch.Size): "
    "device= is a TypeError natively too",
}

#: Ops the sweep must reach: a collection that finds fewer is broken, not faster.
EXPECTED = {
    "arange",
    "empty",
    "empty_permuted",
    "empty_strided",
    "eye",
    "full",
    "linspace",
    "linspace.tensor_overload",
    "logspace",
    "logspace.tensor_overload",
    "normal.number_mean",
    "ones",
    "randint",
    "randn",
    "scalar_tensor",
    "tril_indices",
    "triu_indices",
    "zeros",
    "signal.windows.hann",
    "signal.windows.kaiser",
}


def test_the_sweep_reaches_every_factory_in_op_db():
    names = {sample.name for sample in opsweep.all_samples()}
    assert names >= EXPECTED
    assert {name for name, _ in EXCLUDED} <= names, "an exclusion names an op the sweep lacks"
    dtypes = {sample.dtype for sample in opsweep.all_samples()}
    assert {torch.float64, torch.float32, torch.bfloat16, torch.int64, torch.bool} <= dtypes


@pytest.mark.parametrize("way", opsweep.WAYS)
def test_every_tensor_free_sample_lands_on_the_cpu_as_natively(way):
    if not NATIVE_ACCELERATOR:
        with pytest.raises((RuntimeError, AssertionError)):
            opsweep.asked(opsweep.all_samples()[0], way)  # natively: this host has no CUDA
    tally = opsweep.sweep(way, CPU, lambda: torchdevice.redirect(host="cpu"), EXCLUDED)
    print(tally.summary())
    problem = opsweep.verdict(tally)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    assert tally.passed + sum(tally.excluded.values()) == tally.samples > 5000

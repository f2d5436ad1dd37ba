"""Sweep PyTorch's op database through the simulated accelerator, with the CPU fallback on.

Every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` that the CPU
runs in float32 is called on the simulated accelerator (whose op set is MPS's, see
``torchdevice.simulated_mps.mps_ops``) under ``torchdevice.enable`` on a simulated MPS host, and
compared with the same call on the CPU: forward, and backward (``torch.autograd.grad``)
where the OpInfo supports autograd; int64 and complex64 forward too. An op MPS lacks must
give the CPU's result through the fallback; an op it has must give it on the device.

Bounded for CI: the first ``SAMPLES`` samples of each op, the op database imported once.
Samples are built on the device, as PyTorch's own device tests build them (so arguments
an op wants on the CPU stay there), and copied to the CPU for the reference.

Calls that cannot match are listed in :data:`EXCLUDED`, each with its reason; the sweep
checks that each still fails for that reason, so the list cannot go stale. The module runs
in a child process (registering the backend is permanent); see ``childrun.py``.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import torchdevice
from childrun import mirror_in_parent
from torchdevice import Host

NAME = "simgpu"

#: dtype -> (samples per op, whether backward is checked too).
SWEEPS: dict[torch.dtype, tuple[int, bool]] = {
    torch.float32: (2, True),
    torch.int64: (1, False),
    torch.complex64: (1, False),
}

FLOAT64 = "float64"
BACKWARD_KERNEL = "backward kernel missing"
SPARSE = "sparse layout"
STORAGE = "storage beyond the view"
DTYPE_RULE = "the float64 rule"

#: Why a call cannot match, checked by the error it gives (see ``_reason``):
REASONS = {
    # MPS cannot hold float64 (EmptyTensor.cpp): the op's result is float64 by definition,
    # or ATen picks float64 by device type where it picks float32 for MPS (tolerances of
    # linalg_pinv/matrix_rank in LinearAlgebra.cpp; renorm's accumulator, AccumulateType.h:
    # an out-of-tree device gets the CPU's). Raises MPS's own TypeError, as MPS would (or
    # MPS takes its float32 branch). Not a fallback case: no float64 result could come back.
    FLOAT64: "result or ATen intermediate in float64 (MPS's TypeError)",
    # The forward runs on the device, the backward kernel is one MPS lacks (linalg_lu_solve
    # for det/slogdet/solve, _upsample_bilinear2d_aa_backward). Autograd's engine calls it
    # below the function mode, so torchdevice cannot rerun it (docs/limitations.md); on a Mac
    # PyTorch's own MPS fallback, which torchdevice switches on at import, covers it.
    BACKWARD_KERNEL: "backward kernel MPS lacks, run by autograd below the function mode",
    # Sparse layouts MPS has no kernel for: the device registers MPS's SparseMPS (COO) set
    # (simulated_mps.supported_sparse_ops); CSR and sparse.mm's reductions are not in it,
    # so they raise NotImplementedError naming the sparse key, as on a Mac.
    SPARSE: "sparse layout or op MPS has no sparse kernel for",
    # An explicit float64 asked of a transfer, a conversion (.double()) or an op's dtype=
    # argument on the device is float32 there: torchdevice's documented dtype rule
    # (docs/fallback.md), where the CPU keeps float64.
    DTYPE_RULE: "explicit float64 narrowed to float32 on the device (the dtype rule)",
    # as_strided over storage past the view: copying the sample to the CPU keeps the view's
    # elements, not the storage around them, so the reference reads other memory.
    STORAGE: "sample artifact: the CPU copy of an as_strided view has a smaller storage",
}

#: op name (with variant) -> reason, for every dtype swept.
EXCLUDED: dict[str, str] = {
    **dict.fromkeys(
        [
            "cdouble",
            "float_power",
            "linalg.pinv",
            "linalg.pinv.hermitian",
            "linalg.pinv.singular",
            "pinverse",
            "linalg.matrix_rank",
            "linalg.matrix_rank.hermitian",
            "renorm",
        ],
        FLOAT64,
    ),
    **dict.fromkeys(
        [
            "linalg.slogdet",
            "linalg.solve",
            "linalg.solve_ex",
            "linalg.tensorsolve",
            "logdet",
            "_upsample_bilinear2d_aa",
        ],
        BACKWARD_KERNEL,
    ),
    **dict.fromkeys(["sparse.mm.reduce", "sparse.sampled_addmm"], SPARSE),
    **dict.fromkeys(
        [
            "to",
            "double",
            "softmax.with_dtype",
            "log_softmax.with_dtype",
            "nn.functional.softmin.with_dtype",
        ],
        DTYPE_RULE,
    ),
    "as_strided.partial_views": STORAGE,
}

#: Ops whose result is uninitialised memory: only shape, dtype and device are compared.
UNINITIALISED = {"empty_like", "new_empty", "new_empty_strided"}


@dataclass
class Sweep:
    """What the sweep saw, per (op, dtype)."""

    swept: set[tuple[str, torch.dtype]] = field(default_factory=set)
    fell_back: set[tuple[str, torch.dtype]] = field(default_factory=set)
    failed: dict[tuple[str, torch.dtype], str] = field(default_factory=dict)
    #: Samples left out before running, by why (no tensor input, CPU cannot run it...).
    skipped: Counter[str] = field(default_factory=Counter)
    samples: int = 0


def _seed() -> None:
    """Seed the CPU's and the device's generators (what a fallback and the device draw
    from): ``torch.manual_seed`` would also seed CUDA, recording a stack trace each time."""
    torch.default_generator.manual_seed(0)
    getattr(torch, NAME).manual_seed(0)


def _move(value: Any, device: str) -> Any:
    """A sample leaf on ``device``: tensors copied (a leaf stays a leaf), devices renamed."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).requires_grad_(value.requires_grad)
    if device == "cpu" and isinstance(value, (str, torch.device)) and str(value).startswith(NAME):
        return torch.device("cpu")
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _run(op: Any, sample: tuple[Any, Any, Any], backward: bool) -> tuple[Any, Any]:
    """The op's result and, with ``backward``, the gradients of its inputs."""
    inputs, args, kwargs = sample
    out = op(inputs, *args, **kwargs)
    if not backward:
        return out, None
    outs = [
        o for o in _tensors(out) if o.requires_grad and (o.is_floating_point() or o.is_complex())
    ]
    leaves = [t for t in _tensors(sample) if t.requires_grad]
    if not outs or not leaves:
        return out, None
    loss = sum((o.abs() if o.is_complex() else o).sum() for o in outs)
    try:
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    except Exception as error:
        raise _InBackward(error) from error
    return out, grads


class _InBackward(Exception):
    """An error raised by the backward pass (the forward ran)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _reason(error: Exception) -> str:
    """The class of a failure, as :data:`REASONS` names them; else its first line."""
    in_backward = isinstance(error, _InBackward)
    cause = error.error if isinstance(error, _InBackward) else error
    text = str(cause)
    float64 = (
        f"Cannot convert a {NAME} Tensor to float64 dtype as the {NAME} framework doesn't "
        "support float64. Please use float32 instead."
    )
    if isinstance(cause, TypeError) and text == float64:
        return FLOAT64
    if (
        in_backward
        and isinstance(cause, NotImplementedError)
        and f"is not currently implemented for the {NAME} device" in text
    ):
        return BACKWARD_KERNEL
    if f"Sparse{NAME}" in text or "sparse row compressed tensor layout" in text:
        return SPARSE
    if isinstance(cause, AssertionError) and (
        "The values for attribute 'dtype' do not match: torch.float32 != torch.float64." in text
    ):
        return DTYPE_RULE
    if isinstance(cause, AssertionError) and "as_strided" in getattr(cause, "op_name", ""):
        return STORAGE
    first = text.strip().splitlines()[0][:160] if text.strip() else ""
    return f"{'backward: ' if in_backward else ''}{type(cause).__name__}: {first}"


def _compare(name: str, got: Any, expected: Any) -> None:
    """Results on the device, and equal to the CPU's (uninitialised ones: metadata only)."""
    misplaced = [t.device for t in _tensors(got) if t.device.type != NAME]
    assert not misplaced, f"results on {misplaced}"
    got = tree_map(lambda t: t.to("cpu:-1") if isinstance(t, torch.Tensor) else t, got)
    if name in UNINITIALISED:
        metadata = tree_map(
            lambda t: (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t,
            (got, expected),
        )
        assert metadata[0] == metadata[1], f"{metadata[0]} != {metadata[1]}"
        return
    try:
        torch.testing.assert_close(got, expected, equal_nan=True, check_device=False)
    except AssertionError as error:
        error.op_name = name  # type: ignore[attr-defined]
        raise


def _prepare(op: Any, dtype: torch.dtype, count: int, backward: bool, sweep: Sweep) -> list[Any]:
    """(name, op, CPU result, device sample) for the op's first ``count`` samples."""
    name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
    grad = backward and op.supports_autograd
    # sample_inputs_func, not sample_inputs: the latter's tracking walks the whole call stack
    # with inspect.stack() for every op, which is most of the sweep's time under pytest.
    try:
        _seed()
        samples = list(itertools.islice(op.sample_inputs_func(op, NAME, dtype, grad), count))
        built_on_device = True
    except Exception:  # sample code using an op the device lacks: build on the CPU, move
        _seed()
        samples = list(itertools.islice(op.sample_inputs_func(op, "cpu", dtype, grad), count))
        built_on_device = False
    prepared = []
    for sample in samples:
        leaves = (sample.input, sample.args, sample.kwargs)
        if not _tensors(leaves):
            sweep.skipped["no tensor input (factories: issue 8 item 4's sweep)"] += 1
            continue
        if built_on_device:
            device_leaves, cpu_leaves = leaves, tree_map(lambda v: _move(v, "cpu"), leaves)
        else:
            device_leaves, cpu_leaves = tree_map(lambda v: _move(v, NAME), leaves), leaves
        try:
            _seed()
            expected = _run(op, cpu_leaves, grad)
        except Exception:
            sweep.skipped["the CPU cannot run it either (jiterator: CUDA only)"] += 1
            continue
        prepared.append((name, op, expected, device_leaves, grad))
    return prepared


@pytest.fixture(scope="module")
def sweep() -> Sweep:
    """Run the whole sweep once for the module's tests."""
    from torch.testing._internal.common_methods_invocations import op_db

    from torchdevice.testing import register

    register(NAME)
    result = Sweep()
    prepared = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dtype, (count, backward) in SWEEPS.items():
            for op in op_db:
                if dtype in op.supported_dtypes("cpu"):
                    prepared += [
                        (*entry, dtype) for entry in _prepare(op, dtype, count, backward, result)
                    ]
        torchdevice.enable(host=Host.simulated(NAME), cpu_override=True)
        try:
            for name, op, expected, sample, grad, dtype in prepared:
                key = (name, dtype)
                result.swept.add(key)
                result.samples += 1
                torchdevice.reset_report()
                try:
                    _seed()
                    got = _run(op, sample, grad)
                    if any(e.kind == "fallback" for e in torchdevice.report().entries):
                        result.fell_back.add(key)
                    _compare(name, got, expected)
                except Exception as error:
                    result.failed.setdefault(key, _reason(error))
        finally:
            torchdevice.disable()
    return result


def test_every_op_gives_the_cpu_result_on_the_device(sweep):
    """Every swept call matches the CPU, on the device or through the fallback, except the
    documented exclusions, each failing for its documented reason."""
    unexpected = {
        f"{name} ({dtype}): {reason}"
        for (name, dtype), reason in sweep.failed.items()
        if EXCLUDED.get(name) != reason
    }
    assert not unexpected, "\n".join(sorted(unexpected))
    assert len({name for name, _ in sweep.swept}) > 600
    assert sweep.samples > 2000


def test_the_exclusions_are_still_needed(sweep):
    """Each excluded op was swept and still fails, for its reason: the list cannot go stale."""
    failing = {name for name, _ in sweep.failed}
    assert set(EXCLUDED) - failing == set()
    assert set(EXCLUDED.values()) == set(REASONS)


def test_ops_mps_lacks_went_through_the_fallback(sweep):
    """The sweep exercises the fallback, with ops MPS lacks (the others ran on the device)."""
    fell_back = {name for name, dtype in sweep.fell_back if dtype == torch.float32}
    assert {
        "heaviside",
        "take",
        "mode",
        "special.ndtri",
        "nn.functional.pdist",
        "linalg.eigvals",
        "put",
        "matrix_exp",
    } <= fell_back
    assert len(fell_back) >= 40
    assert not fell_back & {"add", "mul", "sin", "matmul", "nn.functional.conv2d", "sum"}


mirror_in_parent(globals())

"""The op-database sweep: every OpInfo sample that takes no tensor, asked for on "cuda".

PyTorch's own ``test_device_mode_ops`` (``test/test_utils.py``) runs every sample of
``op_db`` whose inputs hold no tensor under ``torch.device("meta")`` and checks where the
outputs land. This module does the same for a redirect: each such sample, at every dtype
the OpInfo supports on the CPU, is asked for on ``"cuda"`` in three ways (``device=``
passed to the op, ``with torch.device("cuda")``, ``torch.set_default_device("cuda")``)
and compared with a native CPU run of the same sample under the same seed.

Finding those samples means generating every OpInfo's samples (15 to 35 s on a 2-core
machine, with the load), so they are cached on disk as JSON, keyed by the exact torch build (its
version, git revision and the op database's file); the processes of one test run share
them (the simulated accelerator's sweep runs in a child). An op is collected when its
samples at one dtype (float32 where supported) include a tensor-free one; generating
every dtype's samples of every op (done once, about 45 s on torch 2.13) finds the same 30.

Used by ``test_sweep.py`` (CPU host) and ``test_sweep_simulated.py`` (simulated MPS host).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_any, tree_flatten

#: The three ways code asks for a device, as the exclusion tables name them.
WAYS = ("device=", "with torch.device", "set_default_device")
SEED = 1234
#: Ops whose values are uninitialised memory: shape, dtype, strides and device compare.
UNINITIALISED = frozenset({"empty", "empty_strided", "empty_permuted"})


def op_id(op: Any) -> str:
    """``name`` or ``name.variant``: how the exclusion tables name an OpInfo."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@dataclass(frozen=True)
class Sample:
    """One call: the op, its dtype, and the sample's input and arguments (no ``device``)."""

    op: Any
    dtype: torch.dtype
    input: Any
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]

    @property
    def name(self) -> str:
        return op_id(self.op)

    def __str__(self) -> str:
        shown = [repr(self.input), *map(repr, self.args)]
        shown += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(shown)}) [{self.dtype}]"

    def __call__(self, **extra: Any) -> Any:
        return self.op.op(self.input, *self.args, **{**self.kwargs, **extra})


def _takes_no_tensor(sample: Any) -> bool:
    return not tree_any(
        lambda x: isinstance(x, torch.Tensor), (sample.input, sample.args, sample.kwargs)
    )


def _op_db() -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the op database's own deprecation chatter
        from torch.testing._internal import common_methods_invocations

    return list(common_methods_invocations.op_db)


def _generate(op: Any, dtype: torch.dtype) -> Iterator[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sample generation's own deprecation chatter
        yield from (s for s in op.sample_inputs("cpu", dtype) if _takes_no_tensor(s))


def _collect(op_db: list[Any]) -> dict[str, list[Any]]:
    """Each OpInfo with tensor-free samples, and those samples at every CPU dtype."""
    found: dict[str, list[Any]] = {}
    for op in op_db:
        dtypes = op.supported_dtypes("cpu")
        if not dtypes:
            continue
        probe = torch.float32 if torch.float32 in dtypes else min(dtypes, key=str)
        if not any(True for _ in _generate(op, probe)):
            continue
        found[op_id(op)] = [
            [dtype, s.input, tuple(s.args), {k: v for k, v in s.kwargs.items() if k != "device"}]
            for dtype in sorted(dtypes, key=str)
            for s in _generate(op, dtype)
        ]
    return found


# -- the cache: tensor-free samples are plain values, written as tagged JSON -------------
_FORMAT = 1  # bump when the file's layout changes
_NAMED = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}


def _encode(value: Any) -> Any:
    for tag, kind in _NAMED.items():
        if isinstance(value, kind):
            return {tag: str(value).removeprefix("torch.")}
    if isinstance(value, torch.Size):
        return {"Size": list(value)}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a sample holds a {type(value).__name__}, which the cache cannot store")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, data),) = value.items()
    if tag in _NAMED:
        return getattr(torch, data)
    if tag == "Size":
        return torch.Size(data)
    if tag == "tuple":
        return tuple(_decode(v) for v in data)
    if tag == "complex":
        return complex(*data)
    return {k: _decode(v) for k, v in data.items()}


def _cache_file() -> Path:
    from torch.testing._internal import common_methods_invocations

    stat = Path(common_methods_invocations.__file__).stat()
    build = f"{torch.__version__}|{torch.version.git_version}"
    key = f"{_FORMAT}|{build}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"torchdevice-opsweep-{digest}.json"


@functools.cache
def all_samples() -> tuple[Sample, ...]:
    """Every tensor-free sample of ``op_db`` at every CPU dtype of its op, in op_db order."""
    ops = {op_id(op): op for op in _op_db()}
    cache = _cache_file()
    try:
        found = _decode(json.loads(cache.read_text()))
        if not isinstance(found, dict) or not set(found) <= set(ops):
            raise ValueError("not a cache of this op_db")
    except Exception:  # missing, stale or unreadable: rebuilt from op_db
        found = _collect(list(ops.values()))
        try:
            partial = cache.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(_encode(found)))
            partial.replace(cache)  # atomic: a concurrent reader sees all of it or nothing
        except (OSError, TypeError):
            pass  # no cache this time; the sweep itself does not depend on it
    return tuple(
        Sample(ops[name], dtype, input_, tuple(args), kwargs)
        for name, entries in found.items()
        for dtype, input_, args, kwargs in entries
    )


# -- running and comparing ----------------------------------------------------------------
def seed_cpu() -> None:
    """Seed the CPU generator (``torch.manual_seed`` also walks every lazy device module,
    formatting a stack trace each time: most of the sweep's time, were it used)."""
    torch.default_generator.manual_seed(SEED)


def asked(sample: Sample, way: str, seed: Callable[[], None] = seed_cpu) -> Any:
    """Run ``sample`` asking for ``"cuda"`` in ``way``, seeded."""
    seed()
    if way == "device=":
        return sample(device="cuda")
    if way == "with torch.device":
        with torch.device("cuda"):
            return sample()
    torch.set_default_device("cuda")
    try:
        return sample()
    finally:
        torch.set_default_device(None)


def native(sample: Sample, dtype_rule: Callable[[torch.dtype], torch.dtype] | None) -> Any:
    """The native CPU run, seeded; ``dtype_rule`` rewrites an explicit ``dtype=``."""
    seed_cpu()
    dtype = sample.kwargs.get("dtype")
    if dtype_rule is not None and isinstance(dtype, torch.dtype):
        return sample(dtype=dtype_rule(dtype))
    return sample()


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return bool(got == want) and type(got) is type(want)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.equal`` (fast) where the dtype has it; NaNs and complex32 take the slow path."""
    try:
        return torch.equal(a, b)
    except RuntimeError:  # "equal_cpu" not implemented for 'ComplexHalf'
        return False


def difference(got: Any, want: Any, device: torch.device, uninitialised: bool) -> str | None:
    """What differs between a redirected result and its reference (``None``: nothing)."""
    got_leaves, got_spec = tree_flatten(got)
    want_leaves, want_spec = tree_flatten(want)
    if got_spec != want_spec:
        return f"returned {got_spec}, natively {want_spec}"
    for g, w in zip(got_leaves, want_leaves, strict=True):
        if not isinstance(w, torch.Tensor):
            if not _same(g, w):
                return f"returned {g!r}, natively {w!r}"
            continue
        if not isinstance(g, torch.Tensor):
            return f"returned a {type(g).__name__}, natively a tensor"
        if g.device != device:
            return f"landed on {g.device}, not {device}"
        if (g.dtype, g.shape, g.layout) != (w.dtype, w.shape, w.layout):
            return f"{g.dtype} {tuple(g.shape)} {g.layout}, natively {w.dtype} {tuple(w.shape)}"
        if uninitialised:
            if g.stride() != w.stride():
                return f"strides {g.stride()}, natively {w.stride()}"
            continue
        on_cpu = g.cpu()
        if _equal(on_cpu, w):
            continue
        try:
            torch.testing.assert_close(on_cpu, w, rtol=0, atol=0, equal_nan=True)
        except AssertionError as error:
            return " ".join(str(error).split())
    return None


@dataclass
class Tally:
    """What one sweep did, counted for the report and the docs."""

    way: str
    ops: set[str] = field(default_factory=set)
    dtypes: set[tuple[str, torch.dtype]] = field(default_factory=set)
    samples: int = 0
    passed: int = 0
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> samples
    failures: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # excluded, yet it passed

    def summary(self) -> str:
        return (
            f"{self.way}: {len(self.ops)} ops, {len(self.dtypes)} op-dtype pairs, "
            f"{self.samples} samples: {self.passed} passed, "
            f"{sum(self.excluded.values())} excluded, {len(self.failures)} failed"
        )


@functools.cache
def references(
    dtype_rule: Callable[[torch.dtype], torch.dtype] | None,
) -> tuple[tuple[Any, BaseException | None], ...]:
    """The native run of every sample (or the error it raised), computed once."""
    results: list[tuple[Any, BaseException | None]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "ComplexHalf support is experimental"
        for sample in all_samples():
            try:
                results.append((native(sample, dtype_rule), None))
            except Exception as error:  # reported per sample by the sweep
                results.append((None, error))
    return tuple(results)


def sweep(
    way: str,
    device: torch.device,
    redirect: Callable[[], AbstractContextManager[Any]],
    exclusions: Mapping[tuple[str, str], str],
    dtype_rule: Callable[[torch.dtype], torch.dtype] | None = None,
    seed: Callable[[], None] = seed_cpu,
) -> Tally:
    """Ask every tensor-free sample for ``"cuda"`` in ``way`` under ``redirect()``.

    ``exclusions`` maps ``(op id, way)`` (``"*"`` for every way) to the reason. Excluded
    samples run too: one that passes is reported as stale, so the table cannot rot.
    """
    refs = references(dtype_rule)  # native runs first: the redirect is not on yet
    outcomes: list[tuple[Any, str | None]] = []
    with redirect(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "ComplexHalf support is experimental"
        for sample, (_, native_error) in zip(all_samples(), refs, strict=True):
            if native_error is not None:
                outcomes.append((None, f"natively {type(native_error).__name__}: {native_error}"))
                continue
            try:
                outcomes.append((asked(sample, way, seed), None))
            except Exception as error:  # reported per sample
                outcomes.append((None, f"{type(error).__name__}: {' '.join(str(error).split())}"))
    # Compared once the redirect is off: under it, even ``.cpu()`` would go to the device.
    tally = Tally(way)
    for sample, (want, _), (got, error) in zip(all_samples(), refs, outcomes, strict=True):
        tally.ops.add(sample.name)
        tally.dtypes.add((sample.name, sample.dtype))
        tally.samples += 1
        problem = error
        if problem is None:
            problem = difference(got, want, device, sample.op.name in UNINITIALISED)
        reason = exclusions.get((sample.name, way)) or exclusions.get((sample.name, "*"))
        if reason is not None:
            tally.excluded[reason] = tally.excluded.get(reason, 0) + 1
            if problem is None:
                tally.stale.append(f"{sample}: excluded ({reason}), yet it passed")
        elif problem is None:
            tally.passed += 1
        else:
            tally.failures.append(f"{sample}: {problem}"[:300])
    return tally


def verdict(tally: Tally) -> str | None:
    """The failure message for a sweep (``None`` when it passed), first ten of each."""
    if not tally.failures and not tally.stale:
        return None
    lines = [tally.summary()]
    for title, items in (("failures", tally.failures), ("stale exclusions", tally.stale)):
        if items:
            lines += [f"{len(items)} {title}:", *items[:10]]
    return "\n".join(lines)

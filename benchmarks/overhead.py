"""Per-call overhead of torchdevice's function mode, measured against baselines in one run.

Usage::

    python benchmarks/overhead.py [--quick] [--json PATH] [--check]

Every case is measured as rounds of interleaved blocks (A, B, C, then B, C, A, ...): each
block switches its variant on (``torchdevice.enable()``, ``torch.set_default_device("cpu")``,
a do-nothing ``TorchFunctionMode``, or nothing), runs the operation ``N`` times in a tight
loop timed with ``time.perf_counter_ns``, and switches it off again. Per-call times are the
median over rounds; ratios are the median of the per-round ratios (both blocks of a pair
ran within milliseconds of each other, so machine drift cancels). Targets are ratios for
the same reason: absolute microseconds differ between machines, the ratio to a baseline
taken in the same run does not (much).

On a CUDA host the factory case runs on the GPU: native ``torch.zeros(4, device="cuda")``
against the same call under torchdevice (cuda stays cuda there: what CUDA-first code pays),
plus an MPS request torchdevice really redirects to CUDA; those loops end with
``torch.cuda.synchronize()``, and a kernel launch (a few µs) then dominates each call. The
other cases use CPU tensors on every host: they measure the mode's host-side cost per call.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import torchdevice
from torchdevice import ledger
from torchdevice.patches import net
from torchdevice.redirecting.fallback import Fallback

#: Tolerance on "torchdevice costs no more per call than set_default_device": the two
#: modes do about the same work on a miss, so allow 10 % of timing noise.
TINY_OP_TOLERANCE = 1.10
FACTORY_LIMIT = 2.5
MLP_LIMIT = 1.03
FALLBACK_LIMIT = 1.01
#: A redirected factory over the floor of a mode that passes ``device=`` on (issue 21):
#: what torchdevice's decision, report count and mark may add to that floor.
OWN_FACTORY_LIMIT = 1.3
#: The do-nothing mode on the factory call with a device argument (CPU hosts).
NOOP_WITH_DEVICE = "Noop mode zeros(4, device='cpu')"
NET_ONLY = "dispatcher net installed, no mode"
#: The factory variant, on a CUDA host only, whose request torchdevice moves (MPS -> CUDA).
MPS_ON_CUDA = "torchdevice zeros(4, device='mps')"


class Noop(TorchFunctionMode):
    """The cheapest possible Python function mode: the floor any mode pays per call."""

    def __torch_function__(
        self,
        f: Callable[..., Any],
        t: Any,
        a: tuple[Any, ...] = (),
        k: dict[str, Any] | None = None,
    ) -> Any:
        return f(*a, **(k or {}))


# -- variants: how a block switches its mode on and off ---------------------------------
@dataclass
class Variant:
    """One arm of a comparison: a loop running the operation ``n`` times, and its mode."""

    name: str
    loop: Callable[[int], None]
    enter: Callable[[], None] = lambda: None
    exit: Callable[[], None] = lambda: None
    samples: list[float] = field(default_factory=list)  # ns per call, one per round


def _torchdevice_variant(name: str, loop: Callable[[int], None]) -> Variant:
    return Variant(name, loop, torchdevice.enable, torchdevice.disable)


def _armed_fallback_variant(name: str, loop: Callable[[int], None]) -> Variant:
    """torchdevice with the CPU fallback armed, and no op ever falling back.

    A CPU-only host arms no fallback (nothing to fall back from), so the fallback of an
    accelerator host is put on the mode by hand, for a device type no tensor here has:
    every call then takes the armed path (the cached-op check and the ``try``) and none
    fails — exactly the cost an accelerator host pays when nothing falls back. An
    accelerator host (CUDA) arms its own: it is kept, and this variant is plain torchdevice.
    """

    def enter() -> None:
        torchdevice.enable()
        mode = torchdevice.activation._mode
        runtime = torchdevice.activation.current_runtime()
        assert mode is not None
        assert runtime is not None
        if mode.fallback is None:
            mode.fallback = Fallback(runtime, "privateuseone")

    return Variant(name, loop, enter, torchdevice.disable)


def _default_device_variant(name: str, loop: Callable[[int], None]) -> Variant:
    return Variant(
        name,
        loop,
        lambda: torch.set_default_device("cpu"),
        lambda: torch.set_default_device(None),
    )


def _net_variant(name: str, loop: Callable[[int], None]) -> Variant:
    """The dispatcher-level net alone (``torchdevice.net``), no mode: its kernels sit on
    device keys no CPU tensor reaches, so this must cost nothing."""
    return Variant(name, loop, net.install, lambda: ledger.undo(net.GROUP))


def _noop_variant(name: str, loop: Callable[[int], None]) -> Variant:
    mode = Noop()
    return Variant(name, loop, mode.__enter__, lambda: mode.__exit__(None, None, None))


# -- the operations: each loop body is the operation alone ------------------------------
def _add_loop(a: torch.Tensor, b: torch.Tensor) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            _ = a + b

    return run


def _zeros_loop(device: str | None, sync: bool = False) -> Callable[[int], None]:
    """``n`` factories; with ``sync``, then ``torch.cuda.synchronize()`` (their kernels done)."""
    if device is None:

        def run(n: int) -> None:
            for _ in range(n):
                _ = torch.zeros(4)
            if sync:
                torch.cuda.synchronize()

    else:

        def run(n: int) -> None:
            for _ in range(n):
                _ = torch.zeros(4, device=device)
            if sync:
                torch.cuda.synchronize()

    return run


def _forward_loop(model: nn.Module, x: torch.Tensor) -> Callable[[int], None]:
    def run(n: int) -> None:
        with torch.no_grad():
            for _ in range(n):
                _ = model(x)

    return run


@dataclass
class Case:
    """Variants compared on one operation; ratios are taken against ``variants[0]``."""

    key: str
    title: str
    variants: list[Variant]
    block_ms: float
    calls: int = 0


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """``--device``, shared by the scripts that measure either host (see :func:`pick_device`)."""
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="native side's device (auto: cuda if available)",
    )


def no_sync() -> None:
    """Nothing to wait for: CPU work is done when the call returns."""


def synchronizer(device: str) -> Callable[[], None]:
    """What ends a timed block: ``torch.cuda.synchronize`` on CUDA (the GPU's work done)."""
    return torch.cuda.synchronize if device == "cuda" else no_sync


def pick_device(requested: str) -> str:
    """``--device``: ``auto`` is ``cuda`` where torch sees a CUDA GPU, else ``cpu``."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False on this host")
    return requested


def _redirect_request() -> tuple[str, str | None]:
    """The CUDA request of CUDA-first code, and the native call landing where it lands.

    On a CPU or MPS host torchdevice sends it to the host's default device, where a native
    ``torch.zeros(4)`` lands; on a CUDA host it stays on CUDA (the cost left is
    torchdevice's overhead on CUDA-first code), against a native ``device="cuda"``.
    """
    if torch.cuda.is_available():
        return "cuda", "cuda"
    return "cuda", None


def _factory_names() -> tuple[str, str]:
    """Names of the redirected and the native factory variants."""
    request, native_device = _redirect_request()
    native = "zeros(4)" if native_device is None else f"zeros(4, device={native_device!r})"
    return f"torchdevice zeros(4, device={request!r})", f"native {native}"


def build_cases(quick: bool) -> list[Case]:
    """The four comparisons of the brief, with their inputs built once, outside the timing."""
    scale = 0.5 if quick else 2.0
    a, b = torch.randn(16), torch.randn(16)
    add = _add_loop(a, b)
    request, native_device = _redirect_request()
    on_gpu = native_device == "cuda"  # a CUDA host: every factory below lands on the GPU
    native_zeros = _zeros_loop(native_device, on_gpu)
    redirected_name, native_name = _factory_names()
    factory_variants = [
        Variant(native_name, native_zeros),
        _torchdevice_variant(redirected_name, _zeros_loop(request, on_gpu)),
        _noop_variant(native_name.replace("native", "Noop mode"), native_zeros),
        _torchdevice_variant("torchdevice zeros(4) (no device)", _zeros_loop(None, on_gpu)),
    ]
    if not on_gpu:  # the floor of a mode that passes a device on: the same call with device=
        factory_variants.append(_noop_variant(NOOP_WITH_DEVICE, _zeros_loop("cpu", on_gpu)))
    if on_gpu:  # a request torchdevice really moves here: MPS-first code on a CUDA host
        factory_variants.append(
            _torchdevice_variant(MPS_ON_CUDA, _zeros_loop("mps", on_gpu)),
        )

    linear = nn.Linear(64, 64)
    linear_x = torch.randn(32, 64)
    mlp = nn.Sequential(
        nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)
    )
    mlp_x = torch.randn(64, 512)
    return [
        Case(
            "tiny_op",
            "a + b (16 floats)",
            [
                Variant("native", add),
                _torchdevice_variant("torchdevice", add),
                _default_device_variant("set_default_device", add),
                _noop_variant("Noop mode", add),
                _net_variant(NET_ONLY, add),
            ],
            10 * scale,
        ),
        Case(
            "factory",
            f"torch.zeros(4) / torch.zeros(4, device={request!r})",
            factory_variants,
            10 * scale,
        ),
        Case(
            "linear",
            "Linear(64, 64) forward, input (32, 64)",
            [
                Variant("native", _forward_loop(linear, linear_x)),
                _torchdevice_variant("torchdevice", _forward_loop(linear, linear_x)),
                _noop_variant("Noop mode", _forward_loop(linear, linear_x)),
            ],
            10 * scale,
        ),
        Case(
            "mlp",
            "MLP forward: 3 x Linear(512, 512) + ReLU, batch 64",
            [
                Variant("native", _forward_loop(mlp, mlp_x)),
                _torchdevice_variant("torchdevice", _forward_loop(mlp, mlp_x)),
                _noop_variant("Noop mode", _forward_loop(mlp, mlp_x)),
                _armed_fallback_variant("torchdevice + fallback armed", _forward_loop(mlp, mlp_x)),
            ],
            25 * scale,
        ),
    ]


# -- measurement ------------------------------------------------------------------------
def _block(variant: Variant, calls: int, warm: int) -> int:
    """Switch ``variant`` on, warm it, time ``calls`` calls, switch it off; ns in all."""
    variant.enter()
    try:
        variant.loop(warm)
        start = time.perf_counter_ns()
        variant.loop(calls)
        return time.perf_counter_ns() - start
    finally:
        variant.exit()


def calibrate(case: Case) -> int:
    """Calls per block so that the slowest variant's block lasts about ``block_ms``."""
    calls = 1
    while True:
        slowest = max(_block(v, calls, 2) for v in case.variants)
        if slowest >= case.block_ms * 1e6 / 4 or calls >= 1 << 22:
            break
        calls *= 2
    return max(1, round(calls * case.block_ms * 1e6 / max(slowest, 1)))


def measure(case: Case, rounds: int) -> None:
    """Warm up, calibrate, then run ``rounds`` interleaved rounds, rotating the order."""
    for variant in case.variants:  # warm-up: first calls, lazy imports, allocator
        _block(variant, 200, 20)
    case.calls = calibrate(case)
    warm = max(2, case.calls // 50)
    count = len(case.variants)
    for r in range(rounds):
        shift = r % count
        for variant in case.variants[shift:] + case.variants[:shift]:
            variant.samples.append(_block(variant, case.calls, warm) / case.calls)


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def ratio(case: Case, name: str, baseline: str | None = None) -> tuple[float, float, float]:
    """p25, median, p75 of the per-round ratio ``name`` / ``baseline`` (default: first)."""
    by_name = {v.name: v for v in case.variants}
    denominator = by_name[baseline] if baseline else case.variants[0]
    pairs = zip(by_name[name].samples, denominator.samples, strict=True)
    return _quantiles([x / y for x, y in pairs])


@dataclass
class Target:
    """A ratio ``numerator / denominator`` within ``case`` that must stay <= ``limit``.

    Without a limit it is reported for information (a reference point, never a failure).
    """

    label: str
    case: str
    numerator: str
    denominator: str
    limit: float | None
    measured: float = 0.0

    @property
    def passed(self) -> bool:
        return self.limit is None or self.measured <= self.limit

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return "info"
        return "PASS" if self.passed else "FAIL"


def targets() -> list[Target]:
    """The three targets, then reference ratios that explain them (no limit)."""
    redirected_name, native_name = _factory_names()
    extra = []
    if torch.cuda.is_available():
        extra.append(
            Target(
                "MPS request redirected to CUDA / native factory",
                "factory",
                MPS_ON_CUDA,
                native_name,
                None,
            )
        )
    return [
        Target(
            f"tiny op: torchdevice / set_default_device <= 1.0 (tolerance {TINY_OP_TOLERANCE:.2f})",
            "tiny_op",
            "torchdevice",
            "set_default_device",
            TINY_OP_TOLERANCE,
        ),
        Target(
            f"redirected factory / native factory <= {FACTORY_LIMIT}",
            "factory",
            redirected_name,
            native_name,
            FACTORY_LIMIT,
        ),
        Target(
            f"MLP forward: torchdevice / native <= {MLP_LIMIT}",
            "mlp",
            "torchdevice",
            "native",
            MLP_LIMIT,
        ),
        Target(
            f"MLP forward: fallback armed, nothing falling back / torchdevice <= {FALLBACK_LIMIT}",
            "mlp",
            "torchdevice + fallback armed",
            "torchdevice",
            FALLBACK_LIMIT,
        ),
        Target("tiny op: torchdevice / native", "tiny_op", "torchdevice", "native", None),
        Target("tiny op: torchdevice / Noop mode", "tiny_op", "torchdevice", "Noop mode", None),
        Target("tiny op: dispatcher net alone / native", "tiny_op", NET_ONLY, "native", None),
        Target(
            "redirected factory / Noop-mode factory (the floor of any Python mode)",
            "factory",
            redirected_name,
            native_name.replace("native", "Noop mode"),
            None,
        ),
        *(
            [
                Target(
                    "Noop-mode zeros(4, device='cpu') / native factory (the floor of any mode "
                    "that passes a device argument on)",
                    "factory",
                    NOOP_WITH_DEVICE,
                    native_name,
                    None,
                ),
                Target(
                    "redirected factory / Noop-mode zeros(4, device='cpu') (torchdevice's part) "
                    f"<= {OWN_FACTORY_LIMIT}",
                    "factory",
                    redirected_name,
                    NOOP_WITH_DEVICE,
                    OWN_FACTORY_LIMIT,
                ),
            ]
            if not torch.cuda.is_available()
            else []
        ),
        Target(
            "pass-through factory: torchdevice zeros(4) / Noop-mode zeros(4)",
            "factory",
            "torchdevice zeros(4) (no device)",
            native_name.replace("native", "Noop mode"),
            None,
        ),
        Target("Linear forward: torchdevice / native", "linear", "torchdevice", "native", None),
        Target("Linear forward: Noop mode / native", "linear", "Noop mode", "native", None),
        Target("MLP forward: Noop mode / native", "mlp", "Noop mode", "native", None),
        Target("MLP forward: torchdevice / Noop mode", "mlp", "torchdevice", "Noop mode", None),
        *extra,
    ]


# -- reporting --------------------------------------------------------------------------
def sanity_check(request: str) -> str:
    """Confirm the redirect really happens (else the factory case measures nothing)."""
    torchdevice.enable()
    try:
        landed = torch.zeros(1, device=request).device
    finally:
        torchdevice.disable()
    return str(landed)


def markdown(cases: list[Case], checks: list[Target]) -> str:
    """Results and targets as Markdown tables."""
    lines = [
        "| case | variant | µs/call (median) | p25-p75 | ratio vs first (median, p25-p75) |",
        "|---|---|---:|---:|---:|",
    ]
    for case in cases:
        for i, v in enumerate(case.variants):
            lo, mid, hi = (x / 1000 for x in _quantiles(v.samples))
            if i == 0:
                rel = "1 (baseline)"
            else:
                r_lo, r_mid, r_hi = ratio(case, v.name)
                rel = f"{r_mid:.3f} ({r_lo:.3f}-{r_hi:.3f})"
            title = f"{case.title} [N={case.calls}]" if i == 0 else ""
            lines.append(f"| {title} | {v.name} | {mid:.3f} | {lo:.3f}-{hi:.3f} | {rel} |")
    lines += ["", "| target | measured | limit | result |", "|---|---:|---:|---|"]
    for t in checks:
        limit = "-" if t.limit is None else f"{t.limit:.2f}"
        lines.append(f"| {t.label} | {t.measured:.3f} | {limit} | {t.verdict} |")
    return "\n".join(lines)


def to_json(cases: list[Case], checks: list[Target], meta: dict[str, Any]) -> dict[str, Any]:
    """Everything measured, as plain data."""
    out: dict[str, Any] = {"meta": meta, "cases": {}, "targets": []}
    for case in cases:
        variants = {}
        for i, v in enumerate(case.variants):
            lo, mid, hi = (x / 1000 for x in _quantiles(v.samples))
            entry: dict[str, Any] = {"median_us": mid, "p25_us": lo, "p75_us": hi}
            if i:
                r_lo, r_mid, r_hi = ratio(case, v.name)
                entry["ratio_vs_first"] = {"median": r_mid, "p25": r_lo, "p75": r_hi}
            variants[v.name] = entry
        out["cases"][case.key] = {
            "title": case.title,
            "calls_per_block": case.calls,
            "rounds": len(case.variants[0].samples),
            "baseline": case.variants[0].name,
            "variants": variants,
        }
    for t in checks:
        out["targets"].append(
            {
                "label": t.label,
                "case": t.case,
                "ratio": f"{t.numerator} / {t.denominator}",
                "measured": t.measured,
                "limit": t.limit,
                "passed": t.passed,
                "verdict": t.verdict,
            }
        )
    out["passed"] = all(t.passed for t in checks)
    return out


def environment() -> dict[str, Any]:
    """Where a benchmark ran: versions and machine, for its JSON."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchdevice": torchdevice.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer, shorter rounds (~5 s instead of ~20 s)"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target fails")
    parser.add_argument("--rounds", type=int, help="rounds per case (default 21 quick, 61 full)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (21 if args.quick else 61)

    torch.set_num_threads(1)
    if torchdevice.is_enabled():  # ACTIVATE_TORCH_DEVICE=1 in the environment
        torchdevice.disable()
    request, _ = _redirect_request()
    landed = sanity_check(request)
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"torchdevice {torchdevice.__version__}, {torch.get_num_threads()} thread(s), "
        f"{os.cpu_count()} CPU(s); torch.zeros(device={request!r}) under torchdevice -> {landed}"
    )
    print(f"{rounds} interleaved rounds per case{' (quick)' if args.quick else ''}\n")

    started = time.perf_counter()
    cases = build_cases(args.quick)
    gc.collect()
    gc.disable()
    try:
        for case in cases:
            measure(case, rounds)
    finally:
        gc.enable()
    elapsed = time.perf_counter() - started

    by_key = {c.key: c for c in cases}
    checks = targets()
    for t in checks:
        t.measured = ratio(by_key[t.case], t.numerator, t.denominator)[1]

    print(markdown(cases, checks))
    print(f"\nmeasured in {elapsed:.1f} s")
    for t in checks:
        if t.limit is not None:
            print(f"{t.verdict}: {t.label}: {t.measured:.3f}")

    if args.json:
        meta = {
            **environment(),
            "torch_threads": torch.get_num_threads(),
            "rounds": rounds,
            "quick": args.quick,
            "redirect": {"request": request, "landed": landed},
            "seconds": elapsed,
            "argv": sys.argv[1:],
        }
        args.json.write_text(json.dumps(to_json(cases, checks, meta), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.check and not all(t.passed for t in checks):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

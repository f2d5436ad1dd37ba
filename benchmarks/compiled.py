"""Inductor-compiled model: native vs a do-nothing function mode vs torchdevice, one run.

Usage::

    python benchmarks/compiled.py [--quick] [--rounds N] [--json PATH] [--check]
        [--device {auto,cpu,cuda}] [--mode {default,reduce-overhead}] [--size {small,large}]

An MLP with ReLU under ``torch.no_grad()``, compiled with ``torch.compile`` (inductor,
``--mode``, default: inductor's default mode) once per variant, outside the timing.
``--size small`` (the default): 6 x ``Linear(512, 512)``, batch 64; ``--size large``:
6 x ``Linear(4096, 4096)``, batch 512 (about 100 GFLOP a forward: a few ms on an H100 in
float32, meant for a GPU; on a CPU it takes seconds per forward).

``--device`` picks the host's side (``auto``: ``cuda`` when ``torch.cuda.is_available()``):

* on ``cpu`` (a CPU-only host): native and the do-nothing mode run the model written for the
  CPU (``device="cpu"``); torchdevice runs the CUDA-first model (``device="cuda"``), whose
  request lands on the CPU;
* on ``cuda``: all three run the CUDA-first model on the GPU, torchdevice's redirect is
  cuda -> cuda, so its ratio is torchdevice's overhead alone. Every timed loop ends with
  ``torch.cuda.synchronize()`` (and the untimed warm-up before the timer starts with one),
  so the host's clock measures the GPU's work.

The variants:

* native: the model and input made on the native device, compiled and run with no mode;
* do-nothing mode: the same, compiled and run inside a :class:`overhead.Noop` mode;
* torchdevice: the CUDA-first model (``device="cuda"``) made, compiled and run under
  ``torchdevice.enable()``.

Timing reuses ``overhead.py``'s method: rounds of interleaved blocks in rotated order, each
block switching its variant on, timing ``N`` forwards and switching it off; the ratio is the
median of the per-round ratios, with the 25th-75th percentiles and a 95 % confidence
interval of that median (distribution-free, from the order statistics), which says whether a
1 % difference stands out of the noise. After warm-up ``torch._dynamo.config.error_on_recompile``
is set, and the number of compiled graphs is checked again at the end: a recompile during
timing (a variant's guards failing on another variant's mode stack) fails the run.

It also counts, with ``sys.setprofile``, how often each variant's mode is entered per forward
of the compiled model: the calls the code inductor generated makes at run time (extern kernels
such as ``torch.addmm``) go through the function-mode stack like any eager call.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch._dynamo
from overhead import (
    Case,
    Noop,
    Variant,
    _quantiles,
    add_device_option,
    measure,
    no_sync,
    pick_device,
    ratio,
    synchronizer,
)
from torch import nn
from torch._dynamo.utils import counters

import torchdevice
from torchdevice.redirecting.mode import DeviceMode

#: Compiled models must cost no more than 1 % over native (issue 12) ...
COMPILED_LIMIT = 1.01
#: ... and no more than a do-nothing mode; 1 % of tolerance for timing noise.
VS_NOOP_LIMIT = 1.01
LAYERS = 6
#: ``--size``: (width, batch) of the MLP.
SIZES = {"small": (512, 64), "large": (4096, 512)}
WIDTH, BATCH = SIZES["small"]


def mlp(device: str, width: int = WIDTH) -> nn.Module:
    """The model: ``LAYERS`` x Linear(width, width), ReLU between them, same weights each call."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for index in range(LAYERS):
        layers.append(nn.Linear(width, width, device=device))
        if index < LAYERS - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _forward_loop(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    sync: Callable[[], None] = no_sync,
) -> Any:
    """``n`` forwards, then ``sync`` (``torch.cuda.synchronize`` on CUDA: the block's work done)."""

    def run(n: int) -> None:
        with torch.no_grad():
            for _ in range(n):
                model(x)
        sync()

    return run


def _compiled(
    device: str, width: int = WIDTH, batch: int = BATCH, mode: str | None = None
) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
    """Build, compile and run once (the compile) in whatever mode is current."""
    model = mlp(device, width)
    x = torch.randn(batch, width, device=device)
    compiled = torch.compile(model) if mode is None else torch.compile(model, mode=mode)
    with torch.no_grad():
        compiled(x)
    return compiled, x


Forward = Callable[[], object]


def build_variants(
    device: str = "cpu", size: str = "small", mode: str | None = None
) -> tuple[list[Variant], dict[str, tuple[float, str]], dict[str, Forward]]:
    """The three variants, each compiled inside its own mode; compile seconds and device.

    ``device`` is the native side's device (``cpu`` or ``cuda``); torchdevice always runs
    the CUDA-first model. Also one bare forward per variant (the model on its input), for
    counting mode entries.
    """
    width, batch = SIZES[size]
    sync = synchronizer(device)
    info: dict[str, tuple[float, str]] = {}

    started = time.perf_counter()
    native, x = _compiled(device, width, batch, mode)
    info["native"] = (time.perf_counter() - started, str(x.device))

    noop = Noop()
    started = time.perf_counter()
    with noop:
        noop_model, noop_x = _compiled(device, width, batch, mode)
    info["Noop mode"] = (time.perf_counter() - started, str(noop_x.device))

    torchdevice.enable()
    try:
        started = time.perf_counter()
        td_model, td_x = _compiled("cuda", width, batch, mode)
        info["torchdevice"] = (time.perf_counter() - started, str(td_x.device))
    finally:
        torchdevice.disable()

    variants = [
        Variant("native", _forward_loop(native, x, sync)),
        Variant(
            "Noop mode",
            _forward_loop(noop_model, noop_x, sync),
            noop.__enter__,
            lambda: noop.__exit__(None, None, None),
        ),
        Variant(
            "torchdevice",
            _forward_loop(td_model, td_x, sync),
            torchdevice.enable,
            torchdevice.disable,
        ),
    ]
    forwards: dict[str, Forward] = {
        "native": lambda: native(x),
        "Noop mode": lambda: noop_model(noop_x),
        "torchdevice": lambda: td_model(td_x),
    }
    return variants, info, forwards


def mode_entries(variant: Variant, forward: Forward, forwards: int) -> dict[str, float]:
    """Mode entries per forward, by torch function, seen with ``sys.setprofile``."""
    codes = {Noop.__torch_function__.__code__, DeviceMode.__torch_function__.__code__}
    seen: collections.Counter[str] = collections.Counter()

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code in codes:
            func = frame.f_locals.get("func", frame.f_locals.get("f"))
            seen[getattr(func, "__name__", repr(func))] += 1

    variant.enter()
    try:
        with torch.no_grad():
            forward()  # the first call after a switch may re-check guards
            sys.setprofile(profile)
            try:
                for _ in range(forwards):
                    forward()
            finally:
                sys.setprofile(None)
    finally:
        variant.exit()
    return {name: count / forwards for name, count in sorted(seen.items())}


def median_ci(values: list[float]) -> tuple[float, float]:
    """95 % confidence interval of the median from order statistics (no distribution assumed)."""
    ordered = sorted(values)
    n = len(ordered)
    half = 1.96 * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half) - 1)
    return ordered[low], ordered[high]


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 (one report, written out)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--rounds", type=int, help="rounds (default 31 quick, 101 full)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target fails")
    add_device_option(parser)
    parser.add_argument(
        "--mode",
        choices=["default", "reduce-overhead"],
        default="default",
        help="torch.compile mode (reduce-overhead: CUDA graphs on a GPU)",
    )
    parser.add_argument("--size", choices=list(SIZES), default="small", help="model size")
    args = parser.parse_args(argv)
    rounds = args.rounds or (31 if args.quick else 101)
    device = pick_device(args.device)
    width, batch = SIZES[args.size]
    mode = None if args.mode == "default" else args.mode

    torch.set_num_threads(1)
    if torchdevice.is_enabled():  # ACTIVATE_TORCH_DEVICE=1 in the environment
        torchdevice.disable()
    started = time.perf_counter()
    variants, info, forwards = build_variants(device, args.size, mode)
    graphs = counters["stats"]["unique_graphs"]
    case = Case("compiled", "compiled MLP", variants, 40.0 if args.quick else 100.0)
    entries = {v.name: mode_entries(v, forwards[v.name], 20) for v in variants}

    torch._dynamo.config.error_on_recompile = True
    gc.collect()
    gc.disable()
    try:
        measure(case, rounds)
    finally:
        gc.enable()
        torch._dynamo.config.error_on_recompile = False
    recompiled = counters["stats"]["unique_graphs"] - graphs
    elapsed = time.perf_counter() - started

    gpu = f", {torch.cuda.get_device_name()}" if device == "cuda" else ""
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, torchdevice "
        f"{torchdevice.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPU(s)"
        f"{gpu}"
    )
    print(f"device {device}, mode {args.mode}, size {args.size}")
    print(
        f"inductor, {LAYERS} x Linear({width}, {width}) + ReLU, batch {batch}, no_grad; "
        f"{rounds} rounds of {case.calls} forwards per block; graphs compiled during timing: "
        f"{recompiled}\n"
    )
    lines = [
        "| variant | input on | compile s | ms/forward (median, p25-p75) | ratio vs native "
        "(median, p25-p75) | 95 % CI of the median | mode entries per forward |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    results: dict[str, Any] = {}
    for index, v in enumerate(variants):
        lo, mid, hi = (s / 1e6 for s in _quantiles(v.samples))
        entry: dict[str, Any] = {
            "compile_s": info[v.name][0],
            "device": info[v.name][1],
            "ms_per_forward": {"median": mid, "p25": lo, "p75": hi},
            "mode_entries_per_forward": entries[v.name],
        }
        if index:
            r_lo, r_mid, r_hi = ratio(case, v.name)
            per_round = [a / b for a, b in zip(v.samples, variants[0].samples, strict=True)]
            ci_lo, ci_hi = median_ci(per_round)
            entry["ratio_vs_native"] = {
                "median": r_mid,
                "p25": r_lo,
                "p75": r_hi,
                "ci95": [ci_lo, ci_hi],
            }
            rel, ci = f"{r_mid:.3f} ({r_lo:.3f}-{r_hi:.3f})", f"{ci_lo:.3f}-{ci_hi:.3f}"
        else:
            rel, ci = "1 (baseline)", "-"
        calls = ", ".join(f"{k} {n:g}" for k, n in entries[v.name].items()) or "0"
        lines.append(
            f"| {v.name} | {info[v.name][1]} | {info[v.name][0]:.1f} | {mid:.3f} "
            f"({lo:.3f}-{hi:.3f}) | {rel} | {ci} | {calls} |"
        )
        results[v.name] = entry
    vs_noop = ratio(case, "torchdevice", "Noop mode")
    checks = [
        (
            f"compiled: torchdevice / native <= {COMPILED_LIMIT}",
            ratio(case, "torchdevice")[1],
            COMPILED_LIMIT,
        ),
        (f"compiled: torchdevice / Noop mode <= {VS_NOOP_LIMIT}", vs_noop[1], VS_NOOP_LIMIT),
    ]
    lines += ["", "| target | measured | limit | result |", "|---|---:|---:|---|"]
    passed = recompiled == 0
    for label, measured, limit in checks:
        ok = measured <= limit
        passed = passed and ok
        lines.append(f"| {label} | {measured:.3f} | {limit:.2f} | {'PASS' if ok else 'FAIL'} |")
    print("\n".join(lines))
    print(f"\nmeasured in {elapsed:.1f} s (compiles included)")
    for label, measured, limit in checks:
        print(f"{'PASS' if measured <= limit else 'FAIL'}: {label}: {measured:.3f}")
    if recompiled:
        print(f"FAIL: {recompiled} graph(s) compiled during timing")

    if args.json:
        out = {
            "meta": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "torchdevice": torchdevice.__version__,
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "device": device,
                "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
                "mode": args.mode,
                "size": args.size,
                "width": width,
                "batch": batch,
                "rounds": rounds,
                "forwards_per_block": case.calls,
                "quick": args.quick,
                "seconds": elapsed,
            },
            "variants": results,
            "recompiled_during_timing": recompiled,
            "targets": [
                {"label": label, "measured": m, "limit": lim, "passed": m <= lim}
                for label, m, lim in checks
            ],
            "passed": passed,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 1 if args.check and not passed else 0


if __name__ == "__main__":
    sys.exit(main())

"""What users run, redirected vs native: one ratio per workload, measured in the same run.

Usage::

    python benchmarks/workloads.py [--quick] [--rounds N] [--only NAME ...] [--json PATH] [--check]
        [--device {auto,cpu,cuda}]

Every ratio is redirected / native (time per unit, or peak memory): above 1, torchdevice costs.
The redirected side is the CUDA-first code (``device="cuda"``, ``.cuda()``,
``torch.autocast("cuda")``, NCCL) under torchdevice on this host. The native side depends on
the host (``--device``; ``auto``: ``cuda`` when ``torch.cuda.is_available()``):

* ``cpu``: the same code written for the CPU (``device="cpu"``, ``torch.autocast("cpu")``,
  gloo), without torchdevice;
* ``cuda``: the same CUDA-first code, run natively on the GPU. torchdevice leaves CUDA
  requests on a CUDA host where they are, so the ratio is its overhead alone. Timed blocks
  end with ``torch.cuda.synchronize()``; the memory workload adds the peak GPU memory
  (``torch.cuda.max_memory_allocated``) of both sides; the DDP step needs two GPUs (NCCL
  puts one rank on each) and is skipped, with the reason printed, on fewer.

Both tiers are measured side by side (docs/tiers.md): the function mode (the default,
``redirected``) and the entry-points tier (``enable(intercept="entry-points")``, ``entry``),
each against native in the same rounds.

* In-process workloads (training loop eager, ``generate``, DataLoader, the redirected
  factory) run rounds of four blocks in rotated order: native, native under a do-nothing
  function mode (the floor any mode pays), redirected by the mode (the block switches
  ``torchdevice.enable()`` on and ``disable()`` off around its units) and redirected by the
  entry-points tier. Each block runs one untimed unit after its switch, then times its
  units (see ``alternate``). The ratio is the median of the per-round ratios (the blocks of
  a round ran within seconds of each other), with the 25th-75th percentiles.
* The DDP step runs fresh processes, native, native under a do-nothing mode, mode and
  entry-points tier in rotated order, and pairs them the same way; the compiled loop,
  native, mode and entry-points tier in rotated order; peak memory, native and mode.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from _gpt import trainer
from overhead import Noop, add_device_option, environment, no_sync, pick_device, synchronizer
from torch.utils.data import DataLoader, Dataset

import torchdevice
from torchdevice import activation

HERE = Path(__file__).resolve().parent


#: torchdevice's own part of a workload: redirected / the same code under a do-nothing
#: function mode (the floor any mode pays, which PyTorch sets), per round (issue 21).
OWN_LIMIT = 1.01

#: The entry-points tier's targets, entry / native per workload (issue 27). The factory's
#: is relative: cheaper than the mode's redirected factory in the same run.
ENTRY_LIMITS = {
    "training loop, eager": 1.03,
    "training loop, compiled": 1.03,
    "HF generate": 1.03,
    "DataLoader": 1.03,
    "DDP step, 2 ranks": 1.05,
}
#: The sides of an in-process workload, in :func:`alternate`'s order.
SIDES = ("native", "do-nothing mode", "mode", "entry-points")
#: Environment variable that puts a child in the entry-points tier.
ENTRY_ENV = {"TORCHDEVICE_INTERCEPT": "entry-points"}


def cpu_seconds() -> float:
    """CPU time of this process (every thread) and of its children that have ended
    (DataLoader workers are joined at the end of each epoch): what a block costs, less
    sensitive than wall time to the other jobs of a shared machine (``--clock cpu``)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


#: How the in-process workloads' blocks are timed (``--clock``): wall time by default.
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def enable_entry_points() -> None:
    """Switch the entry-points tier on (the redirected side's other variant)."""
    torchdevice.enable(intercept="entry-points")


@dataclass
class Result:
    """One workload: per-round values of both sides and the ratio's target."""

    name: str
    unit: str  # what the rates count ("steps/s", "tokens/s", "MiB")
    limit: float
    rate: bool = True  # True: values are seconds per unit (rates shown); False: plain values
    native: list[float] = field(default_factory=list)
    redirected: list[float] = field(default_factory=list)
    noop: list[float] = field(default_factory=list)  # native code under a do-nothing mode
    entry: list[float] = field(default_factory=list)  # redirected, entry-points tier
    note: str = ""
    #: Limit of redirected / do-nothing mode; None where that is no floor (the factory's
    #: floor is a mode that passes ``device=`` on: overhead.py's target).
    own_limit: float | None = OWN_LIMIT
    #: The entry-points tier must beat the mode's ratio in the same run (the factory).
    entry_beats_mode: bool = False
    #: Per side, the median of what the block's first unit took more than its timed units
    #: (seconds per block unit; see :func:`alternate`).
    first_unit: dict[str, float] = field(default_factory=dict)

    def per_unit(self, units: float) -> None:
        """Turn each side's seconds per block unit into seconds per ``units`` of work."""
        for side in (self.native, self.redirected, self.noop, self.entry):
            side[:] = [s / units for s in side]

    def ratios(self) -> list[float]:
        return [r / n for r, n in zip(self.redirected, self.native, strict=True)]

    def summary(self) -> dict[str, Any]:
        ratios = self.ratios()
        q = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 2
        ratio = statistics.median(ratios)

        def shown(values: list[float]) -> float:
            value = statistics.median(values)
            return 1 / value if self.rate else value

        noop = own = None
        if self.noop:
            noop = statistics.median(x / n for x, n in zip(self.noop, self.native, strict=True))
            own = statistics.median(r / x for r, x in zip(self.redirected, self.noop, strict=True))
        own_limit = self.own_limit if own is not None and self.rate else None
        own_passed = own_limit is None or own <= own_limit
        entry = entry_limit = None
        entry_q: list[float] = []
        if self.entry:
            entry_ratios = [e / n for e, n in zip(self.entry, self.native, strict=True)]
            entry = statistics.median(entry_ratios)
            entry_q = (
                statistics.quantiles(entry_ratios, n=4, method="inclusive")
                if len(entry_ratios) > 1
                else entry_ratios * 2
            )
            entry_limit = ratio if self.entry_beats_mode else ENTRY_LIMITS.get(self.name)
        entry_passed = None
        if entry is not None and entry_limit is not None:
            entry_passed = entry < entry_limit if self.entry_beats_mode else entry <= entry_limit
        return {
            "unit": self.unit,
            "noop_ratio": noop,
            # torchdevice's own part: redirected over the same code under a do-nothing mode
            "own_ratio": own,
            "own_limit": own_limit,
            "native": shown(self.native),
            "redirected": shown(self.redirected),
            "ratio": ratio,
            "p25": q[0],
            "p75": q[-1],
            "rounds": len(ratios),
            "limit": self.limit,
            "passed": ratio <= self.limit and own_passed,
            # the entry-points tier: redirected through the wrappers, no mode / native
            "entry": None if not self.entry else shown(self.entry),
            "entry_ratio": entry,
            "entry_p25": entry_q[0] if entry_q else None,
            "entry_p75": entry_q[-1] if entry_q else None,
            "entry_limit": entry_limit,
            "entry_limit_is_mode": self.entry_beats_mode,
            "entry_passed": entry_passed,
            # ms the untimed first unit after the switch took more than a timed one
            "first_unit_extra_ms": {side: 1e3 * s for side, s in self.first_unit.items()},
            "note": self.note,
        }


class Skipped(Exception):
    """A workload this host cannot run; the message says why."""


def alternate(
    result: Result,
    native: Callable[[int], None],
    redirected: Callable[[int], None],
    units: int,
    rounds: int,
    sync: Callable[[], None] = no_sync,
) -> Result:
    """Rounds of four blocks, order rotated each round: seconds per unit of each side.

    The sides: the native code, the same code under a do-nothing function mode (what any
    Python mode costs: the floor under torchdevice's ratio), the CUDA-first code redirected
    by the function mode, and the same redirected by the entry-points tier.
    ``sync`` runs before the timer starts and before it stops.

    Each block runs one unit after its switch (``enable()``, a mode's ``__enter__``)
    before the ``units`` it times. Why: the unit that follows a switch runs slower on
    every side, the native block after the previous block's ``disable()`` included
    (``enable()`` and ``disable()`` swap the facades into ``sys.modules`` and patch
    classes and modules, and the interpreter and torch refill what that invalidated): a
    one-off that a program enabling once pays once, not per unit of its work. Timed
    with the block, it put a toggle's cost into every ratio, by more than the margins
    checked on short blocks (a ``generate`` block of 4 calls: about 1.5 ms on 76 ms). What
    the first unit took more than a timed one is kept per side
    (:attr:`Result.first_unit`), and shown below the table.
    """
    noop = Noop()
    # Each side: its timed samples, what its first units took more, its code, its switch.
    firsts: dict[str, list[float]] = {side: [] for side in SIDES}
    sides: list[
        tuple[
            list[float],
            list[float],
            Callable[[int], None],
            Callable[[], object],
            Callable[[], object],
        ]
    ] = [
        (result.native, firsts["native"], native, lambda: None, lambda: None),
        (
            result.noop,
            firsts["do-nothing mode"],
            native,
            noop.__enter__,
            lambda: noop.__exit__(None, None, None),
        ),
        (result.redirected, firsts["mode"], redirected, torchdevice.enable, torchdevice.disable),
        (
            result.entry,
            firsts["entry-points"],
            redirected,
            enable_entry_points,
            torchdevice.disable,
        ),
    ]

    def block(
        run: Callable[[int], None], enter: Callable[[], object], leave: Callable[[], object], n: int
    ) -> tuple[float, float]:
        """The first unit after the switch, then seconds per unit of the next ``n``."""
        enter()
        try:
            sync()
            started = CLOCK[0]()
            run(1)
            sync()
            switched = CLOCK[0]()
            run(n)
            sync()
            return switched - started, (CLOCK[0]() - switched) / n
        finally:
            leave()

    for _, _, run, enter, leave in sides:  # warm-up: first calls, compiles, allocator
        block(run, enter, leave, 1)
    gc.collect()
    for r in range(rounds):
        shift = r % len(sides)
        for samples, extras, run, enter, leave in sides[shift:] + sides[:shift]:
            first, per_unit = block(run, enter, leave, units)
            samples.append(per_unit)
            extras.append(first - per_unit)
    result.first_unit = {side: statistics.median(extra) for side, extra in firsts.items()}
    return result


# -- training loop ----------------------------------------------------------------------
def training(quick: bool, rounds: int, device: str) -> list[Result]:
    """Steps/s of the tiny GPT: AdamW, autocast (bfloat16), 2 micro-batches per step."""
    native_step = trainer(device)
    torchdevice.enable()
    try:
        redirected_step = trainer("cuda")
    finally:
        torchdevice.disable()
    counter = [0, 0]

    def loop(step: Callable[[int], float], side: int) -> Callable[[int], None]:
        def run(n: int) -> None:
            for _ in range(n):
                step(counter[side])
                counter[side] += 1

        return run

    result = Result("training loop, eager", "steps/s", 1.02)
    units = 5 if quick else 10
    alternate(
        result, loop(native_step, 0), loop(redirected_step, 1), units, rounds, synchronizer(device)
    )
    return [result]


# -- generate -----------------------------------------------------------------------------
def generate(quick: bool, rounds: int, device: str) -> list[Result]:
    """Tokens/s of Hugging Face ``generate`` (greedy, KV cache) on a 2-layer GPT-2 from config."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415 (slow import)
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    hf_logging.set_verbosity_error()
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=128)
    new_tokens = 32

    def build(device: str, side: str) -> Callable[[int], None]:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config).eval().to(device)
        prompt = torch.randint(0, 512, (1, 8), device=device)

        def run(n: int) -> None:
            with torch.no_grad():
                for _ in range(n):
                    out = model.generate(
                        prompt,
                        max_new_tokens=new_tokens,
                        min_new_tokens=new_tokens,
                        do_sample=False,
                        pad_token_id=0,
                    )
            runtime = activation.current_runtime()
            tier = "native" if runtime is None else runtime.settings.intercept
            outputs[f"{side} {tier}"] = out

        return run

    outputs: dict[str, torch.Tensor] = {}
    native = build(device, "native")
    torchdevice.enable()
    try:
        redirected = build("cuda", "redirected")
    finally:
        torchdevice.disable()
    result = alternate(
        Result("HF generate", "tokens/s", 1.02),
        native,
        redirected,
        2 if quick else 4,
        rounds,
        synchronizer(device),
    )
    reference = outputs["native native"].cpu()
    same = all(
        torch.equal(reference, outputs[f"redirected {tier}"].cpu())
        for tier in ("mode", "entry-points")
    )
    if device == "cpu" and not same:
        raise AssertionError("redirected generate produced other tokens than native")
    if device == "cuda":
        # Under torchdevice on a CUDA host the model's device-less factories land on the GPU
        # and draw its weights from the CUDA generator: the tokens may differ; say whether.
        result.note = f"tokens equal to native: {same}"
    result.per_unit(new_tokens)
    return [result]


# -- redirected factory ---------------------------------------------------------------------
def factory(quick: bool, rounds: int, device: str) -> list[Result]:
    """Calls/s of a redirected ``torch.zeros(4, device="cuda")`` against native ``zeros(4)``.

    ``overhead.py``'s factory case, measured here beside the workloads so that both tiers'
    ratios come from one run (an MPS request on a CUDA host, as there). The entry-points
    tier's target is to cost less than the mode's.
    """
    request = "mps" if device == "cuda" else "cuda"
    calls = 2_000 if quick else 5_000

    def native(n: int) -> None:
        zeros = torch.zeros
        for _ in range(n * calls):
            zeros(4)

    def redirected(n: int) -> None:
        zeros = torch.zeros  # read inside the block: the tier's wrapper while it is on
        for _ in range(n * calls):
            zeros(4, device=request)

    result = Result("redirected factory", "calls/s", 1e9, own_limit=None, entry_beats_mode=True)
    alternate(result, native, redirected, 10, rounds)
    result.per_unit(calls)
    result.note = (
        f'zeros(4, device="{request}") / native zeros(4); no target for the mode (overhead.py '
        "has its own); the entry-points tier must be cheaper than the mode"
    )
    return [result]


# -- DataLoader ---------------------------------------------------------------------------
class Images(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic 3x32x32 images, made and normalised in the worker, one per index."""

    def __len__(self) -> int:
        return 512

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, 32, 32, generator=generator)
        return (image - 0.5) / 0.25, index % 10


def dataloader(quick: bool, rounds: int, device: str) -> list[Result]:
    """Batches/s over whole epochs (worker start-up included): 2 workers, pin_memory=True."""

    def epochs(device: str) -> Callable[[int], None]:
        def run(n: int) -> None:
            loader = DataLoader(Images(), batch_size=32, num_workers=2, pin_memory=True)
            for _ in range(n):
                for batch, labels in loader:
                    if device == "cuda":
                        images = batch.cuda(non_blocking=True)
                        targets = labels.cuda(non_blocking=True)
                    else:
                        images, targets = batch.to(device), labels.to(device)
                    images.sum() + targets.sum()

        return run

    batches = len(Images()) // 32
    result = alternate(
        Result("DataLoader", "batches/s", 1.02),
        epochs(device),
        epochs("cuda"),
        1,
        rounds,
        synchronizer(device),
    )
    result.per_unit(batches)
    result.note = f"start method {torch.multiprocessing.get_start_method()}"
    return [result]


# -- fresh processes: DDP and peak memory ---------------------------------------------------
def _environment(redirected: bool, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
        and not k.startswith("TORCHDEVICE_")
    }
    if redirected:
        # Enabled as a user enables a script, every setting at its default: no
        # TORCHDEVICE_LOG_LEVEL (redirects log at INFO, which nothing shows unless the
        # script configures logging), so nothing is validated and pydantic stays unloaded.
        env["ACTIVATE_TORCH_DEVICE"] = "1"
        env.update(extra or {})
    return env


def _child(
    command: list[str], redirected: bool, timeout: float, extra: dict[str, str] | None = None
) -> str:
    done = subprocess.run(
        command,
        env=_environment(redirected, extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return done.stdout


def ddp_skip_reason(device: str, gpus: int) -> str | None:
    """Why the DDP step cannot run natively here, or None: NCCL needs one GPU per rank."""
    if device == "cuda" and gpus < 2:
        return (
            f"DDP step skipped: {gpus} CUDA device(s); NCCL cannot put 2 ranks on one GPU, "
            "and a native 2-rank NCCL run is the baseline on a CUDA host"
        )
    return None


def ddp(quick: bool, rounds: int, device: str) -> list[Result]:
    """Steps/s of a 2-rank DDP step: the NCCL script redirected vs the script native there.

    Native on a CPU-only host: the script written for gloo; on a CUDA host (two GPUs or
    more): the same NCCL script without torchdevice.
    """
    reason = ddp_skip_reason(device, torch.cuda.device_count() if device == "cuda" else 0)
    if reason is not None:
        raise Skipped(reason)
    steps = 100 if quick else 300
    # The do-nothing mode's side (``_null_mode.py`` pushes one in each rank, as torchdevice
    # pushes its own) shows the floor any function mode pays here; no own-part target is
    # set on it (issue 21's are for the in-process workloads).
    result = Result("DDP step, 2 ranks", "steps/s", 1.05, own_limit=None)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rank0.json"

        def launch(
            side: str, redirected: bool, extra: dict[str, str] | None, null_mode: bool
        ) -> float:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node=2",
                *([str(HERE / "_null_mode.py")] if null_mode else []),
                str(HERE / "_ddp_step.py"),
                "--written-for",
                "cuda" if redirected else device,
                str(out),
                str(steps),
            ]
            out.unlink(missing_ok=True)
            try:
                _child(command, redirected, 300, extra)
            except RuntimeError:
                # A rank that aborts at exit after rank 0 wrote its timing (gloo's worker
                # threads against interpreter finalization: the native script does it too,
                # benchmarks/exit_aborts.py) still timed its steps; counted in the note.
                if not out.exists():
                    raise
                aborted[side] = aborted.get(side, 0) + 1
            key = "cpu_steps_per_s" if CLOCK[0] is cpu_seconds else "steps_per_s"
            return 1 / json.loads(out.read_text())[key]

        sides: list[tuple[list[float], str, bool, dict[str, str] | None, bool]] = [
            (result.native, "native", False, None, False),
            (result.noop, "do-nothing mode", False, None, True),
            (result.redirected, "mode", True, None, False),
            (result.entry, "entry-points tier", True, ENTRY_ENV, False),
        ]
        aborted: dict[str, int] = {}
        for r in range(rounds):
            shift = r % len(sides)
            for samples, side, redirected, extra, null_mode in sides[shift:] + sides[:shift]:
                samples.append(launch(side, redirected, extra, null_mode))
        if aborted:
            result.note = (
                "launches with a rank aborted at exit after rank 0's timing: "
                + ", ".join(f"{side} {count}" for side, count in aborted.items())
            )
    return [result]


def _training_children(
    results: list[tuple[Result, str]],
    rounds: int,
    args: list[str],
    device: str,
    tiers: bool = False,
) -> list[Result]:
    """Fresh ``_gpt.py`` children, alternately native and redirected (by the environment);
    with ``tiers``, redirected by each tier in turn (the mode, then the entry-points tier),
    the order rotated per round.

    Each ``(result, key)`` collects the children's ``report[key]``: ``peak_kb`` (in MiB),
    ``peak_gpu_mib``, or a rate (stored as seconds per unit).
    """
    landed = "cuda:0" if device == "cuda" else "cpu"  # where both sides' tensors must live
    sides: list[tuple[str, dict[str, str] | None]] = [("native", None), ("mode", None)]
    if tiers:
        sides.append(("entry-points", ENTRY_ENV))
    for r in range(rounds):
        shift = r % len(sides)
        for side, extra in sides[shift:] + sides[:shift]:
            redirected = side != "native"
            written_for = "cuda" if redirected else device
            command = [sys.executable, str(HERE / "_gpt.py"), "--device", written_for, *args]
            report = json.loads(_child(command, redirected, 300, extra).splitlines()[-1])
            if report["redirected"] != redirected or report["device"] != landed:
                raise AssertionError(
                    f"training child: expected redirected={redirected} on {landed}: {report}"
                )
            for result, key in results:
                value = report[key]
                value = value / 1024 if key == "peak_kb" else value
                value = 1 / value if result.rate else value
                samples = {
                    "native": result.native,
                    "mode": result.redirected,
                    "entry-points": result.entry,
                }[side]
                samples.append(value)
    return [result for result, _ in results]


def memory(quick: bool, rounds: int, device: str) -> list[Result]:
    """Peak RSS (``VmHWM``) of a fresh child running the eager training loop.

    On a CUDA host also its peak GPU memory (``torch.cuda.max_memory_allocated``).
    """
    results = [(Result("peak memory, training loop", "MiB", 1.02, rate=False), "peak_kb")]
    if device == "cuda":
        gpu = Result("peak GPU memory, training loop", "MiB", 1.02, rate=False)
        gpu.note = "torch.cuda.max_memory_allocated"
        results.append((gpu, "peak_gpu_mib"))
    return _training_children(results, rounds, ["--steps", "10" if quick else "30"], device)


def compiled_training(quick: bool, rounds: int, device: str) -> list[Result]:
    """Steps/s of the compiled training loop, in fresh children (compile and warm-up untimed):
    native, the mode and the entry-points tier, in rotated order.

    Not alternated in one process: every ``torchdevice.enable()`` makes a new runtime, and a
    graph that traced a redirected factory (``torch.arange(..., device=idx.device)``) guards
    on its identity, so each enable/disable cycle would recompile (see the README).
    """
    result = Result("training loop, compiled", "steps/s", 1.02)
    args = ["--compiled", "--warmup", "3", "--steps", "20" if quick else "60"]
    return _training_children([(result, "steps_per_s")], rounds, args, device, tiers=True)


WORKLOADS: dict[str, Callable[[bool, int | None, str], list[Result]]] = {
    "train-eager": lambda q, r, d: training(q, r or (6 if q else 21), d),
    "train-compiled": lambda q, r, d: compiled_training(q, r or (1 if q else 3), d),
    "generate": lambda q, r, d: generate(q, r or (6 if q else 21), d),
    "dataloader": lambda q, r, d: dataloader(q, r or (6 if q else 15), d),
    "factory": lambda q, r, d: factory(q, r or (11 if q else 31), d),
    "ddp": lambda q, r, d: ddp(q, r or (1 if q else 3), d),
    "memory": lambda q, r, d: memory(q, r or (1 if q else 3), d),
}


def markdown(summaries: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| workload | native | mode: redirected / native (p25-p75) | do-nothing mode / native "
        "| mode / do-nothing mode (target) | mode target | mode result "
        "| entry-points / native (p25-p75) | entry target | entry result | rounds |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---|---:|",
    ]
    for name, s in summaries.items():
        noop = "-" if s["noop_ratio"] is None else f"{s['noop_ratio']:.3f}"
        own = "-" if s["own_ratio"] is None else f"{s['own_ratio']:.3f}"
        if s["own_limit"] is not None:
            own += f" (<= {s['own_limit']:.2f})"
        mode_limit = "-" if s["limit"] >= 1e8 else f"<= {s['limit']:.2f}"
        entry = entry_limit = entry_result = "-"
        if s.get("entry_ratio") is not None:
            entry = f"{s['entry_ratio']:.3f} ({s['entry_p25']:.3f}-{s['entry_p75']:.3f})"
        if s.get("entry_limit") is not None:
            entry_limit = (
                f"< mode ({s['entry_limit']:.3f})"
                if s["entry_limit_is_mode"]
                else f"<= {s['entry_limit']:.2f}"
            )
            entry_result = "PASS" if s["entry_passed"] else "FAIL"
        lines.append(
            f"| {name} | {s['native']:.4g} {s['unit']} | "
            f"{s['ratio']:.3f} ({s['p25']:.3f}-{s['p75']:.3f}) | {noop} | {own} | "
            f"{mode_limit} | {'PASS' if s['passed'] else 'FAIL'} | "
            f"{entry} | {entry_limit} | {entry_result} | {s['rounds']} |"
        )
    firsts = {name: s["first_unit_extra_ms"] for name, s in summaries.items()}
    firsts = {name: extra for name, extra in firsts.items() if extra}
    if firsts:
        lines += [
            "",
            "The untimed first unit after each block's switch, ms more than a timed unit "
            "(median; see `alternate`):",
            "",
            "| workload | native | do-nothing mode | mode | entry-points |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, extra in firsts.items():
            cells = " | ".join(f"{extra[side]:+.2f}" for side in SIDES)
            lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def _print_header(quick: bool, device: str) -> None:
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, torchdevice "
        f"{torchdevice.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPU(s), "
        f"{platform.machine()}{' (quick)' if quick else ''}; native side on {device}"
        f"{f' ({torch.cuda.get_device_name()})' if device == 'cuda' else ''}",
        flush=True,
    )


def _load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{value:.2f}" for value in load)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and steps")
    parser.add_argument("--rounds", type=int, help="rounds per workload (default: per workload)")
    parser.add_argument("--only", nargs="+", choices=list(WORKLOADS), help="run only these")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target fails")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="time the in-process blocks by wall time (default) or by CPU time of the process "
        "and its ended children (DataLoader workers), and the DDP step by rank 0's CPU time: "
        "steadier on a loaded machine; the other fresh-process workloads use wall time",
    )
    add_device_option(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    CLOCK[0] = cpu_seconds if args.clock == "cpu" else time.perf_counter

    torch.set_num_threads(1)
    if torchdevice.is_enabled():  # ACTIVATE_TORCH_DEVICE=1 in the environment
        torchdevice.disable()
    _print_header(args.quick, device)
    summaries: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    errors: dict[str, str] = {}
    started, loads = time.perf_counter(), [os.getloadavg()]  # the machine may be shared
    print(f"load average at start: {_load(loads[0])}", flush=True)
    for key in args.only or list(WORKLOADS):
        begun = time.perf_counter()
        try:
            results = WORKLOADS[key](args.quick, args.rounds, device)
        except Skipped as skip:
            skipped[key] = str(skip)
            print(f"{key}: {skip}", flush=True)
            continue
        except Exception as error:  # one workload failing must not lose the others' numbers
            errors[key] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
            print(f"{key}: FAILED: ...{errors[key][-500:]}", flush=True)
            continue
        for result in results:
            summaries[result.name] = result.summary() | {"seconds": time.perf_counter() - begun}
            s = summaries[result.name]
            entry = "" if s["entry_ratio"] is None else f", entry-points {s['entry_ratio']:.3f}"
            print(f"{result.name}: mode {s['ratio']:.3f}{entry} ({s['seconds']:.0f} s)", flush=True)
        loads.append(os.getloadavg())
        print(f"load average after {key}: {_load(loads[-1])}", flush=True)
    elapsed = time.perf_counter() - started
    print()
    print(markdown(summaries))
    for name, summary in summaries.items():
        if summary["note"]:
            print(f"\n{name}: {summary['note']}")
    for key, reason in skipped.items():
        print(f"\nskipped {key}: {reason}")
    for key, message in errors.items():
        print(f"\nFAILED {key}: ...{message[-500:]}")
    print(
        f"\nmeasured in {elapsed:.0f} s; load average (1, 5, 15 min) at start and after each "
        "workload: " + "; ".join(_load(load) for load in loads)
    )
    passed = (
        all(s["passed"] and s["entry_passed"] is not False for s in summaries.values())
        and not errors
    )
    if args.json:
        meta = {
            **environment(),
            "device": device,
            "quick": args.quick,
            "seconds": elapsed,
            "load_average": loads,
            "clock": args.clock,
        }
        out = {
            "meta": meta,
            "workloads": summaries,
            "skipped": skipped,
            "errors": errors,
            "passed": passed,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 1 if errors or (args.check and not passed) else 0


if __name__ == "__main__":
    sys.exit(main())

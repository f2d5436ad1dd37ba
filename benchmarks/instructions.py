"""Instructions per unit of work, native and redirected by each tier: load-independent.

Usage::

    python benchmarks/instructions.py [--only generate train-eager factory ...] [--units N]
        [--json PATH]

``workloads.py`` compares wall-clock time in rotated rounds, which a shared, loaded machine
blurs by more than the margins it checks (a few per cent). This counts what the CPU executes
instead, with callgrind (``valgrind --tool=callgrind``): each workload and side runs in a
child process under valgrind, builds its model, warms up once, and then runs ``N`` units of
work looped by ``itertools.starmap``, the only function collected
(``--toggle-collect=starmap_next``). A forked child (a DataLoader worker) would start with a
copy of its parent's counters, which its file would count again; the parent dumps, and so
zeroes, them as it forks (``--dump-before=PyOS_BeforeFork``), and every file is summed.
Instrumentation is switched on just before
(``callgrind_control -i on``), so the imports run at valgrind's uninstrumented speed.

The sides are ``workloads.py``'s: native code, native code under a do-nothing function mode,
CUDA-first code redirected by the function mode and by the entry-points tier. The table
gives instructions per unit and each side's ratio to native; instruction counts are the
same on an idle and a loaded machine (time per instruction is not, so they are a proxy:
cache misses and the like are not in them).

Workloads: ``generate`` (per new token of the 2-layer GPT-2 of ``workloads.py``),
``train-eager`` (per step of ``_gpt.py``'s tiny GPT), ``dataloader`` (per batch of
``workloads.py``'s epoch, 2 forked workers and the pin-memory thread included: the workers run
inside the collected loop, so their instructions are in files of their own, summed here),
``factory`` (per ``torch.zeros(4, device="cuda")``, native ``zeros(4)``), ``ddp-step`` (per
step of ``_ddp_step.py``'s training step in one rank: the NCCL script on gloo, native the gloo
script; one rank, so what is counted is the step's own work and its closing all-reduce, not
the wait for a peer), ``all-reduce`` (per ``dist.all_reduce`` of a scalar in that rank) and
``compiled`` (per forward of ``compiled.py``'s inductor-compiled MLP, compiled inside the
side's mode or tier before the count: the forward's own work, its guards and the mode
entries of the code inductor generated).
"""

from __future__ import annotations

import argparse
import collections
import functools
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES = ("native", "do-nothing mode", "mode", "entry-points")
WORKLOADS = (
    "generate",
    "train-eager",
    "dataloader",
    "factory",
    "ddp-step",
    "all-reduce",
    "compiled",
)
#: Units of work per measured loop, per workload (more for the factory: one unit is tiny).
UNITS = {
    "generate": 2,
    "train-eager": 3,
    "dataloader": 2,
    "factory": 500,
    "ddp-step": 20,
    "all-reduce": 50,
    "compiled": 20,
}


def _build(workload: str, side: str) -> tuple[Callable[[], None], int]:
    """The unit of work of ``workload`` for ``side`` (built as that side builds it), and how
    many units of the table it counts (tokens for ``generate``)."""
    import torch  # noqa: PLC0415 - in the child only

    import torchdevice  # noqa: PLC0415

    torch.set_num_threads(1)
    redirected = side in ("mode", "entry-points")
    device = "cuda" if redirected else "cpu"
    if side == "entry-points":
        torchdevice.enable(intercept="entry-points")
    elif side == "mode":
        torchdevice.enable()
    elif side == "do-nothing mode":
        sys.path.insert(0, str(HERE))
        from overhead import Noop  # noqa: PLC0415

        Noop().__enter__()
    if workload == "generate":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415
        from transformers.utils import logging as hf_logging  # noqa: PLC0415

        hf_logging.set_verbosity_error()
        config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=128)
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config).eval().to(device)
        prompt = torch.randint(0, 512, (1, 8), device=device)

        def generate() -> None:
            with torch.no_grad():
                model.generate(
                    prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0
                )

        return generate, 32
    if workload == "train-eager":
        sys.path.insert(0, str(HERE))
        from _gpt import trainer  # noqa: PLC0415

        step = trainer(device)
        counter = itertools.count()
        return lambda: step(next(counter)) and None, 1
    if workload == "dataloader":
        sys.path.insert(0, str(HERE))
        from torch.utils.data import DataLoader  # noqa: PLC0415
        from workloads import Images  # noqa: PLC0415

        def epoch() -> None:
            loader = DataLoader(Images(), batch_size=32, num_workers=2, pin_memory=True)
            for batch, labels in loader:
                if redirected:
                    images, targets = batch.cuda(non_blocking=True), labels.cuda(non_blocking=True)
                else:
                    images, targets = batch.to("cpu"), labels.to("cpu")
                images.sum() + targets.sum()

        return epoch, len(Images()) // 32
    if workload == "compiled":
        return _compiled_forward(device), 1
    if workload in ("ddp-step", "all-reduce"):
        return _one_rank(workload, redirected), 1
    if workload == "factory":
        zeros = torch.zeros
        if redirected:
            return functools.partial(zeros, 4, device="cuda"), 1
        return functools.partial(zeros, 4), 1
    raise ValueError(workload)


def _compiled_forward(device: str) -> Callable[[], None]:
    """A forward of ``compiled.py``'s MLP, compiled inside the side's mode or tier."""
    import torch  # noqa: PLC0415

    sys.path.insert(0, str(HERE))
    from compiled import _compiled  # noqa: PLC0415

    model, x = _compiled(device)

    def forward() -> None:
        with torch.no_grad():
            model(x)

    return forward


def _one_rank(workload: str, redirected: bool) -> Callable[[], None]:
    """A world of one rank, as ``_ddp_step.py`` writes it: for NCCL when redirected."""
    import socket  # noqa: PLC0415

    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 1))
    if redirected:
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(0)
        device = "cuda"
        ddp = DistributedDataParallel(model.cuda(), device_ids=[0], output_device=0)
    else:
        dist.init_process_group(backend="gloo")
        device = "cpu"
        ddp = DistributedDataParallel(model)
    if workload == "all-reduce":
        scalar = torch.zeros((), device=device)
        return lambda: dist.all_reduce(scalar)
    sys.path.insert(0, str(HERE))
    from _ddp_step import BATCH, MICRO, WIDTH, training_step  # noqa: PLC0415

    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(MICRO, BATCH, WIDTH, generator=generator).to(device)
    y = torch.randn(MICRO, BATCH, 1, generator=generator).to(device)
    return training_step(ddp, optimizer, x, y, device)


def child(workload: str, side: str, units: int) -> None:
    """Build, warm up, switch instrumentation on, run ``units`` units under starmap."""
    run, per = _build(workload, side)
    run()
    run()
    switch_on = ["callgrind_control", "-i", "on", str(os.getpid())]
    subprocess.run(switch_on, check=True, capture_output=True)
    # Results dropped as they come (a list would keep them all, and the garbage collector's
    # passes over them would be counted).
    collections.deque(itertools.starmap(run, itertools.repeat((), units)), maxlen=0)
    print(json.dumps({"per": per}))


def measure(workload: str, side: str, units: int) -> float:
    """Instructions per unit of work of ``workload`` on ``side`` (one valgrind child)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"  # .<pid> per process: forked workers have theirs
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
            and not k.startswith("TORCHDEVICE_")
        }
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                "--toggle-collect=starmap_next",
                # A forked child starts with a copy of its parent's counters: dumping (and
                # so zeroing) them as the parent forks counts each instruction once.
                "--dump-before=PyOS_BeforeFork",
                f"--callgrind-out-file={out}.%p",
                sys.executable,
                __file__,
                "--child",
                workload,
                side,
                str(units),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"{workload}/{side} failed:\n{done.stderr[-3000:]}")
        per = json.loads(done.stdout.strip().splitlines()[-1])["per"]
        total = 0
        for part in Path(tmp).glob("callgrind.out.*"):
            found = re.search(r"^(?:summary|totals):\s*(\d+)", part.read_text(), re.MULTILINE)
            if found is None:
                raise RuntimeError(f"no instruction total in {part}")
            total += int(found.group(1))
        return total / units / per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=WORKLOADS, help="run only these")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--units", type=int, help="units per loop (default: per workload)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, side, units = args.child
        child(workload, side, int(units))
        return 0
    import torch  # noqa: PLC0415

    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, callgrind; "
        f"load average {os.getloadavg()[0]:.2f} (instruction counts do not depend on it)",
        flush=True,
    )
    results: dict[str, dict[str, float]] = {}
    for workload in args.only or WORKLOADS:
        units = args.units or UNITS[workload]
        results[workload] = {}
        for side in args.sides:
            started = time.perf_counter()
            results[workload][side] = measure(workload, side, units)
            print(
                f"{workload} / {side}: {results[workload][side]:,.0f} instructions per unit "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    print()
    print("| workload | " + " | ".join(args.sides) + " |")
    print("|---|" + "---:|" * len(args.sides))
    for workload, counts in results.items():
        native = counts.get("native")
        cells = []
        for side in args.sides:
            value = counts[side]
            ratio = "" if native is None else f" ({value / native:.3f})"
            cells.append(f"{value:,.0f}{ratio}")
        print(f"| {workload} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

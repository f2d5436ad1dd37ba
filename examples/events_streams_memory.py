"""A CUDA-first script that times with events, overlaps with streams and watches memory.

Written the way CUDA users write it: nothing here knows about torchdevice. It sizes its
batch from ``get_device_properties(0).total_memory``, prepares batches on a side stream,
times steps with CUDA events, trains with ``torch.autocast("cuda")`` and a ``GradScaler``,
and reports memory statistics. It checks its own results and exits non-zero if one is
wrong. Natively it needs an NVIDIA GPU; anywhere else::

    python -m torchdevice examples/events_streams_memory.py
"""

import argparse
import sys
import time

import torch
from torch import nn

if not torch.cuda.is_available():
    sys.exit("This script requires a CUDA GPU.")

MIB = 2**20
failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def batch_size_for(total_memory: int, features: int) -> int:
    """Use at most 1/1000 of device memory per batch, between 32 and 1024 rows."""
    return max(32, min(1024, total_memory // 1000 // (features * 4)))


def time_a_sleep() -> None:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    time.sleep(0.050)
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    print(f"a 50 ms host sleep between two events: {elapsed:.1f} ms")
    check(45.0 <= elapsed <= 150.0, "event timing reads a 50 ms region as ~50 ms")


def watch_memory() -> None:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    buffer = torch.zeros(64 * MIB // 4, device="cuda")
    during = torch.cuda.memory_allocated()
    del buffer
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    peak = torch.cuda.max_memory_allocated()
    print(
        f"allocated {before / MIB:.1f} MiB -> {during / MIB:.1f} MiB with a 64 MiB buffer -> "
        f"{after / MIB:.1f} MiB after freeing it (peak {peak / MIB:.1f} MiB)"
    )
    check(during - before >= 64 * MIB, "memory_allocated grows by the 64 MiB buffer")
    check(during - after >= 63 * MIB, "memory_allocated falls when it is freed")
    check(peak - before >= 64 * MIB, "max_memory_allocated keeps the peak")
    check(torch.cuda.memory_reserved() >= after, "memory_reserved >= memory_allocated")
    free, total = torch.cuda.mem_get_info()
    check(0 < free <= total, "mem_get_info gives (free, total)")


def train(steps: int, batch: int, features: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 1)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cuda")
    weights = torch.randn(features, 1, device="cuda") / features**0.5
    side = torch.cuda.Stream()

    def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.cuda.stream(side):  # prepare the next batch on a side stream
            x = torch.randn(batch, features, device="cuda")
            y = x @ weights
        torch.cuda.current_stream().wait_stream(side)
        return x, y

    losses, step_ms = [], []
    dtypes = set()
    x, y = make_batch()
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda"):
            out = model(x)
            dtypes.add(out.dtype)
            loss = nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        next_batch = make_batch()
        end.record()
        end.synchronize()
        losses.append(loss.item())
        step_ms.append(start.elapsed_time(end))
        x, y = next_batch
    torch.cuda.synchronize()
    print(
        f"{steps} steps of batch {batch}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
        f"median step {sorted(step_ms)[len(step_ms) // 2]:.2f} ms, autocast dtypes {dtypes}"
    )
    check(losses[-1] < 0.5 * losses[0], "training under autocast + GradScaler lowers the loss")
    check(dtypes <= {torch.float16, torch.bfloat16}, "autocast really runs in low precision")
    check(all(ms > 0 for ms in step_ms), "every step has a positive event time")
    check(side.query() and torch.cuda.current_stream().query(), "streams have finished")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--features", type=int, default=64)
    args = parser.parse_args()

    props = torch.cuda.get_device_properties(0)
    batch = batch_size_for(props.total_memory, args.features)
    print(
        f"device 0: {torch.cuda.get_device_name(0)}, {props.total_memory / 2**30:.1f} GiB, "
        f"{props.multi_processor_count} multiprocessors, capability "
        f"{torch.cuda.get_device_capability(0)}, bf16 {torch.cuda.is_bf16_supported()}"
    )
    check(props.total_memory > 0, "get_device_properties(0).total_memory is set")
    check(32 <= batch <= 1024, f"batch size {batch} sized from total_memory")

    time_a_sleep()
    watch_memory()
    train(args.steps, batch, args.features)
    print(torch.cuda.memory_summary(abbreviated=True))
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

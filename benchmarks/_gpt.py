"""A small GPT-style training loop, written once for a device string: what users run.

Imported by ``workloads.py`` (eager and compiled steps/s), and run as a script for the peak
memory workload, in a fresh child per measurement::

    python benchmarks/_gpt.py --device cuda --steps 30   # CUDA-first (ACTIVATE_TORCH_DEVICE=1)
    python benchmarks/_gpt.py --device cpu --steps 30    # the same code written for the CPU
    python benchmarks/_gpt.py --device cuda --compiled   # torch.compile'd, steps/s after warm-up

It prints one JSON line: ``{"peak_kb": ..., "loss": ..., "device": ...}`` (with
``peak_gpu_mib``, ``torch.cuda.max_memory_allocated`` in MiB, where the tensors are on a GPU,
else null; the timed steps then end with ``torch.cuda.synchronize()``). It imports nothing of
torchdevice: the CUDA-first child is redirected through the environment, as a user's script.

With ``device="cuda"`` the code is the CUDA-first version (``.cuda()``, ``device="cuda"``,
``torch.autocast("cuda")``); with ``device="cpu"`` it is the one written for the CPU.
Autocast uses bfloat16 on both, so both sides compute the same thing.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256
SEQ = 32
BATCH = 8
WIDTH = 64
HEADS = 4
LAYERS = 2
ACCUM = 2  # micro-batches per optimizer step (gradient accumulation)
BATCHES = 16  # distinct micro-batches, cycled


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token and position embeddings, ``LAYERS`` blocks, a language-model head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        # A factory in the forward, with the input's device, as real models write it.
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def trainer(device: str, compiled: bool = False) -> Callable[[int], float]:
    """Build the model, optimizer and data for ``device``; return ``step(i) -> loss``.

    Data is made on the CPU, as a data loader gives it, and moved per micro-batch.
    """
    torch.manual_seed(0)
    model = TinyGPT().cuda() if device == "cuda" else TinyGPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    forward: Callable[[torch.Tensor], torch.Tensor] = torch.compile(model) if compiled else model
    generator = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (BATCHES, BATCH, SEQ + 1), generator=generator)

    def step(i: int) -> float:
        total = 0.0
        for micro in range(ACCUM):
            batch = data[(i * ACCUM + micro) % BATCHES]
            if device == "cuda":
                batch = batch.cuda(non_blocking=True)
            else:
                batch = batch.to(device, non_blocking=True)
            x, y = batch[:, :-1], batch[:, 1:]
            with torch.autocast(device, dtype=torch.bfloat16):
                logits = forward(x)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), y.reshape(-1)) / ACCUM
            loss.backward()
            total += loss.item()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description="train the tiny GPT; print peak RSS")
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--compiled", action="store_true", help="torch.compile the model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # Where the code's tensors really live (the CPU for a redirected child on a CPU host).
    landed = torch.zeros(1, device=args.device).device
    on_gpu = landed.type == "cuda"
    step = trainer(args.device, args.compiled)
    loss = 0.0
    for i in range(args.warmup):
        step(i)
    if on_gpu:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    if on_gpu:
        torch.cuda.synchronize()
    steps_per_s = args.steps / (time.perf_counter() - started)
    module = sys.modules.get("torchdevice")  # imported by the .pth when redirected
    redirected = module is not None and bool(module.is_enabled())
    gpu_mib = torch.cuda.max_memory_allocated() / 2**20 if on_gpu else None
    report = {"peak_kb": peak_kb(), "peak_gpu_mib": gpu_mib, "steps_per_s": steps_per_s}
    print(json.dumps(report | {"loss": loss, "device": str(landed), "redirected": redirected}))


def peak_kb() -> int:
    """This process's peak resident set size in KiB.

    Linux's ``VmHWM`` starts afresh at ``exec``; ``ru_maxrss`` does not (it keeps the peak of
    the parent that forked the child, here the benchmark's, larger than the child's own).
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS


if __name__ == "__main__":
    main()

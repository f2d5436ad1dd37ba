"""A tiny GPT trained in the style of karpathy/llm.c's ``train_gpt2.py``.

The device is detected as llm.c does (CUDA, else MPS, else CPU; ``--device`` overrides);
weights are initialised from a CPU ``torch.Generator`` through ``nn.init``; samples are drawn
with a ``torch.Generator(device=device)``; AdamW is fused on CUDA; under torchrun it trains
with DDP on NCCL (``torch.cuda.set_device(f"cuda:{local_rank}")``). Prints JSON facts last
(rank 0).
"""

import argparse
import json
import math
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.c_proj.LLMC_RESIDUAL_SCALE_FLAG = 1
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"))
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.proj.LLMC_RESIDUAL_SCALE_FLAG = 1

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    def __init__(self, vocab_size=96, block_size=32, n_layer=2, n_head=2, n_embd=32):
        super().__init__()
        self.block_size, self.n_layer = block_size, n_layer
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.LLMC_SKIP_INIT = 1
        self.wte.weight = self.lm_head.weight
        # init all weights, use a torch rng object to be very careful
        self.init_rng = torch.Generator()
        self.init_rng.manual_seed(42)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            std = 0.02
            if hasattr(module, "LLMC_RESIDUAL_SCALE_FLAG"):
                std = 0.02 / math.sqrt(2 * self.n_layer)
            if not hasattr(module, "LLMC_SKIP_INIT"):
                torch.nn.init.normal_(module.weight, mean=0.0, std=std, generator=self.init_rng)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02, generator=self.init_rng)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, generator):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.block_size :])
            probs = F.softmax(logits[:, -1, :], dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


parser = argparse.ArgumentParser()
parser.add_argument("--device", type=str, default="")
parser.add_argument("--dtype", type=str, default="float32")
parser.add_argument("--num_iterations", type=int, default=6)
parser.add_argument("--fused", type=int, default=-1, help="fused AdamW (default: on CUDA)")
args = parser.parse_args()

ddp = int(os.environ.get("RANK", "-1")) != -1
if ddp:
    # use of DDP atm demands CUDA, we set the device appropriately according to rank
    assert torch.cuda.is_available(), "for now i think we need CUDA for DDP"
    dist.init_process_group(backend="nccl")
    ddp_rank, ddp_local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{ddp_local_rank}"
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
else:
    ddp_rank, ddp_world_size, master_process = 0, 1, True
    if args.device:
        device = args.device
    else:
        device = "cpu"
        if torch.cuda.is_available():
            device = "cuda"
        elif hasattr(torch.backends, "mps") and torch.backends.mps.is_available():
            device = "mps"
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
ctx = (
    torch.amp.autocast(device_type=device_type, dtype=ptdtype)
    if device_type == "cuda"
    else nullcontext()
)

torch.manual_seed(42)
if torch.cuda.is_available():
    torch.cuda.manual_seed(42)

model = GPT()
model.train()
model.to(device)
raw_model = model
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
    raw_model = model.module

data_rng = torch.Generator().manual_seed(7)
tokens = torch.randint(0, 96, (ddp_world_size * 8 * 4, 17), generator=data_rng)
use_fused = device_type == "cuda" if args.fused < 0 else bool(args.fused)
optimizer = torch.optim.AdamW(
    raw_model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0, fused=use_fused
)
losses = []
for step in range(args.num_iterations):
    batch = tokens[(step % 4) * 8 * ddp_world_size :][ddp_rank * 8 : (ddp_rank + 1) * 8]
    x, y = batch[:, :-1].contiguous().to(device), batch[:, 1:].contiguous().to(device)
    with ctx:
        _, loss = model(x, y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "mps":
        torch.mps.synchronize()
    elif device_type == "cuda":
        torch.cuda.synchronize()
    losses.append(loss.item())

model.eval()
sample_rng = torch.Generator(device=device)
sample_rng.manual_seed(42)
start = torch.tensor([[0]], dtype=torch.long, device=device)
sample = raw_model.generate(start, 16, sample_rng)[0].tolist()
peak = torch.cuda.max_memory_allocated() if device_type == "cuda" else 0
if ddp:
    dist.destroy_process_group()
if master_process:
    print(
        json.dumps(
            {"losses": losses, "sample": sample, "fused": use_fused, "peak_memory": peak > 0}
        )
    )

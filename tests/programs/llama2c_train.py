"""Training in the style of karpathy/llama2.c's ``train.py``, written for CUDA: configurator
overrides (``--dtype=float32``), ``device_type = "cuda" if "cuda" in device else "cpu"``,
``torch.amp.autocast(device_type=device_type, dtype=ptdtype)``, a GradScaler that is on for
float16 only (``torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))``: disabled for
float32 and bfloat16), ``scaler.unscale_`` before gradient clipping, AdamW fused on CUDA,
batches pinned and moved with ``non_blocking=True``, DDP under torchrun, ``--compile=True``.
``--device=cpu`` runs the same code on the CPU (``--fused=1``: AdamW fused there too).
Prints JSON facts.
"""

import json
import math
import os
import sys
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

# -- the configuration, and configurator.py's --key=value overrides -----------------------
batch_size = 4
max_seq_len = 16
vocab_size = 64
dim = 32
n_layers = 2
n_heads = 4
gradient_accumulation_steps = 2
learning_rate = 5e-3
max_iters = 6
weight_decay = 1e-1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
device = "cuda"
dtype = "bfloat16"
compile = False
fused = -1  # AdamW fused: -1 = on CUDA, as llama2.c decides
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=")
    globals()[key] = type(globals()[key])(val == "True" if val in ("True", "False") else val)


# -- model.py, its shape ---------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * self.weight


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = dim // n_heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        q, k, v = self.wqkv(self.attention_norm(x)).split(dim, dim=-1)
        q, k, v = (t.view(bsz, seqlen, n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.wo(out.transpose(1, 2).contiguous().view(bsz, seqlen, dim))
        return h + self.w2(F.silu(self.w1(self.ffn_norm(h))))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(Block() for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        self.tok_embeddings.weight = self.output.weight
        self.apply(self._init_weights)
        self.last_loss = None

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, tokens, targets):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        logits = self.output(self.norm(h))
        self.last_loss = F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
        )
        return logits

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": nodecay, "weight_decay": 0.0},
        ]
        use_fused = device_type == "cuda" if fused < 0 else bool(fused)
        extra_args = dict(fused=True) if use_fused else dict()
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra_args)


# -- train.py ---------------------------------------------------------------------------------
ddp = int(os.environ.get("RANK", "-1")) != -1
if ddp:
    init_process_group(backend="nccl")
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    if "cuda" in device:
        device = f"cuda:{ddp_local_rank}"
        torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
else:
    master_process = True
    seed_offset = 0
torch.manual_seed(1337 + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = (
    nullcontext()
    if device_type == "cpu"
    else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
)


def iter_batches(seed):
    generator = torch.Generator().manual_seed(seed)
    while True:
        chunk = torch.randint(0, vocab_size, (batch_size, max_seq_len + 1), generator=generator)
        x, y = chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()  # as collated
        if device_type == "cuda":
            x = x.pin_memory().to(device, non_blocking=True)
            y = y.pin_memory().to(device, non_blocking=True)
        else:
            x, y = x.to(device), y.to(device)
        yield x, y


model = Transformer()
model.to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
if compile:
    model = torch.compile(model)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == "cuda" else None)
raw_model = model.module if ddp else model

train_batch_iter = iter_batches(seed_offset)
X, Y = next(train_batch_iter)
losses = []
for _ in range(max_iters):
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with ctx:
            logits = model(X, Y)
            loss = raw_model.last_loss / gradient_accumulation_steps
        X, Y = next(train_batch_iter)
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item() * gradient_accumulation_steps)

if master_process:
    print(
        json.dumps(
            {
                "losses": losses,
                "finite": all(math.isfinite(loss) for loss in losses),
                "scaler": scaler.is_enabled(),
                "device": str(raw_model.output.weight.device),
            }
        )
    )
if ddp:
    destroy_process_group()

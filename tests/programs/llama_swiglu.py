"""A tiny Llama trained in the style of karpathy/llama2.c's ``train.py``.

``device = "cuda"`` by default (``--device`` overrides); RMSNorm, rotary embeddings, SDPA with
``is_causal=True`` and a SwiGLU feed-forward (``F.silu(w1(x)) * w3(x)``); AdamW is fused when
``"cuda" in device``, as llama2.c's ``configure_optimizers`` does (``--fused 1`` takes that
branch on the CPU, for a reference). Trains a few steps on random tokens and prints JSON facts
last: the losses and every weight's sum, so a drift in any gradient shows.
"""

import argparse
import json

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end, device=freqs.device), freqs).float()
    return torch.cos(freqs), torch.sin(freqs)


def apply_rotary_emb(x, cos, sin):
    xr, xi = x.float().reshape((*x.shape[:-1], -1, 2)).unbind(-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1).flatten(3)
    return out.type_as(x)


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)
        self.w3 = nn.Linear(dim, 4 * dim, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.attention_norm(x)
        shape = (B, T, self.n_heads, self.head_dim)
        q, k, v = (w(h).view(shape) for w in (self.wq, self.wk, self.wv))
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).contiguous().view(B, T, C))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self, vocab_size=64, dim=32, n_layers=2, n_heads=2, max_seq_len=16):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(Block(dim, n_heads) for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        self.tok_embeddings.weight = self.output.weight
        cos, sin = precompute_freqs(dim // n_heads, max_seq_len)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)

    def forward(self, tokens, targets):
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[: tokens.shape[1]], self.freqs_sin[: tokens.shape[1]]
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


parser = argparse.ArgumentParser()
parser.add_argument("--device", type=str, default="cuda")
parser.add_argument("--fused", type=int, default=-1, help="fused AdamW (default: on CUDA)")
parser.add_argument("--max_iters", type=int, default=4)
args = parser.parse_args()

torch.manual_seed(1337)
device_type = "cuda" if "cuda" in args.device else "cpu"
model = Transformer()
model.to(args.device)
use_fused = device_type == "cuda" if args.fused < 0 else bool(args.fused)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.1, fused=use_fused)
losses = []
for _ in range(args.max_iters):
    chunks = torch.randint(0, 64, (4, 17)).unbind()  # PretokDataset's chunks, collated
    x = torch.stack([chunk[:-1] for chunk in chunks]).to(args.device, non_blocking=True)
    y = torch.stack([chunk[1:] for chunk in chunks]).to(args.device, non_blocking=True)
    loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
sums = {name: p.detach().sum().item() for name, p in model.named_parameters()}
print(json.dumps({"losses": losses, "sums": sums, "fused": use_fused}))

"""Text completion in the style of Meta's Llama 2 reference (``example_text_completion.py``
under ``torchrun --nproc_per_node 1``), written for CUDA: ``init_process_group("nccl")``,
``torch.cuda.set_device(local_rank)``, ``torch.set_default_tensor_type(torch.cuda.HalfTensor)``
before the model is built, fairscale-style model-parallel layers (one rank) whose weights come
from the legacy constructor ``torch.Tensor(out, in)`` and are filled from a master weight
with ``torch.cat(..., out=weight)``, a KV cache moved with ``.cuda()``, rotary embeddings in
complex64, top-p sampling with ``torch.multinomial``. ``--device cpu`` runs the same code on
the CPU (``torch.HalfTensor``, gloo). Prints JSON facts.
"""

import argparse
import json
import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--max-gen-len", type=int, default=8)
args = parser.parse_args()
device = args.device


# -- fairscale.nn.model_parallel.layers, as they are on one rank ------------------------
def _initialize_affine_weight(weight, out_features, in_features, init_method):
    master_weight = torch.empty(out_features, in_features, dtype=weight.dtype, requires_grad=False)
    init_method(master_weight)
    weight_list = torch.split(master_weight, out_features, dim=0)
    with torch.no_grad():
        torch.cat(weight_list, dim=0, out=weight)


class ColumnParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=False, init_method=nn.init.xavier_normal_):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        _initialize_affine_weight(self.weight, out_features, in_features, init_method)

    def forward(self, x):
        return F.linear(x, self.weight)


RowParallelLinear = ColumnParallelLinear


class ParallelEmbedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, init_method=nn.init.xavier_normal_):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(num_embeddings, embedding_dim))
        _initialize_affine_weight(self.weight, num_embeddings, embedding_dim, init_method)

    def forward(self, x):
        return F.embedding(x, self.weight)


# -- llama/model.py -------------------------------------------------------------------------
@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 96
    multiple_of: int = 32
    norm_eps: float = 1e-5
    max_batch_size: int = 2
    max_seq_len: int = 32


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.n_heads = params.n_heads
        self.head_dim = params.dim // params.n_heads
        self.wq = ColumnParallelLinear(params.dim, params.n_heads * self.head_dim)
        self.wk = ColumnParallelLinear(params.dim, params.n_heads * self.head_dim)
        self.wv = ColumnParallelLinear(params.dim, params.n_heads * self.head_dim)
        self.wo = RowParallelLinear(params.n_heads * self.head_dim, params.dim)
        shape = (params.max_batch_size, params.max_seq_len, self.n_heads, self.head_dim)
        self.cache_k = torch.zeros(shape)
        self.cache_v = torch.zeros(shape)
        if device == "cuda":
            self.cache_k = self.cache_k.cuda()
            self.cache_v = self.cache_v.cuda()

    def forward(self, x, start_pos, freqs_cis, mask):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        self.cache_k = self.cache_k.to(xq)
        self.cache_v = self.cache_v.to(xq)
        self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, : start_pos + seqlen].transpose(1, 2)
        values = self.cache_v[:bsz, : start_pos + seqlen].transpose(1, 2)
        xq = xq.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, multiple_of):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = ColumnParallelLinear(dim, hidden_dim)
        self.w2 = RowParallelLinear(hidden_dim, dim)
        self.w3 = ColumnParallelLinear(dim, hidden_dim)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.attention = Attention(params)
        self.feed_forward = FeedForward(params.dim, 4 * params.dim, params.multiple_of)
        self.attention_norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.ffn_norm = RMSNorm(params.dim, eps=params.norm_eps)

    def forward(self, x, start_pos, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = params
        self.tok_embeddings = ParallelEmbedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(params) for _ in range(params.n_layers))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = ColumnParallelLinear(params.dim, params.vocab_size)
        self.freqs_cis = precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len * 2)

    @torch.inference_mode()
    def forward(self, tokens, start_pos):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        self.freqs_cis = self.freqs_cis.to(h.device)
        freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack(
                [torch.zeros((seqlen, start_pos), device=tokens.device), mask]
            ).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        h = self.norm(h)
        return self.output(h).float()


# -- llama/generation.py --------------------------------------------------------------------
def sample_top_p(probs, p):
    probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    mask = probs_sum - probs_sort > p
    probs_sort[mask] = 0.0
    probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
    next_token = torch.multinomial(probs_sort, num_samples=1)
    return torch.gather(probs_idx, -1, next_token)


def build(seed=1):
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    torch.manual_seed(seed)  # seed must be the same in all processes
    if device == "cuda":
        torch.set_default_tensor_type(torch.cuda.HalfTensor)
    else:
        torch.set_default_tensor_type(torch.HalfTensor)
    return Transformer(ModelArgs())


@torch.inference_mode()
def generate(model, prompt_tokens, max_gen_len, temperature=0.6, top_p=0.9, eos_id=2):
    params = model.params
    bsz = len(prompt_tokens)
    min_prompt_len = min(len(t) for t in prompt_tokens)
    max_prompt_len = max(len(t) for t in prompt_tokens)
    total_len = min(params.max_seq_len, max_gen_len + max_prompt_len)
    pad_id = -1
    tokens = torch.full((bsz, total_len), pad_id, dtype=torch.long, device=device)
    for k, t in enumerate(prompt_tokens):
        tokens[k, : len(t)] = torch.tensor(t, dtype=torch.long, device=device)
    prev_pos = 0
    eos_reached = torch.tensor([False] * bsz, device=device)
    input_text_mask = tokens != pad_id
    first_logits = None
    for cur_pos in range(min_prompt_len, total_len):
        logits = model.forward(tokens[:, prev_pos:cur_pos], prev_pos)
        if first_logits is None:
            first_logits = logits[:, -1].sum().item()
        probs = torch.softmax(logits[:, -1] / temperature, dim=-1)
        next_token = sample_top_p(probs, top_p).reshape(-1)
        next_token = torch.where(input_text_mask[:, cur_pos], tokens[:, cur_pos], next_token)
        tokens[:, cur_pos] = next_token
        eos_reached |= (~input_text_mask[:, cur_pos]) & (next_token == eos_id)
        prev_pos = cur_pos
        if all(eos_reached):
            break
    return tokens.tolist(), first_logits


def encode(text):  # the tokenizer's shape: BOS, then one id per character
    return [1] + [3 + ord(c) % 93 for c in text]


model = build()
prompts = ["I believe the meaning", "Simply put, "]
completions, first_logits = generate(model, [encode(p) for p in prompts], args.max_gen_len)
weight = model.layers[0].attention.wq.weight
print(
    json.dumps(
        {
            "completions": completions,
            "first_logits": first_logits,
            "default_dtype": str(torch.get_default_dtype()),
            "weight": [str(weight.dtype), str(weight.device)],
            "cache": str(model.layers[0].attention.cache_k.device),
        }
    )
)
torch.distributed.destroy_process_group()

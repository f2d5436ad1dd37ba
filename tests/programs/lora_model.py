"""The model of ``lora.py`` and ``lora_mps.py``: a tiny language model with a LoRA adapter
on one layer, as PEFT's ``get_peft_model`` builds it."""

import math

import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base, r=4, alpha=8, dropout=0.0):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling, self.dropout = alpha / r, nn.Dropout(dropout)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scaling


class TinyLM(nn.Module):
    def __init__(self, vocab=50, width=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.attn = nn.Linear(width, width)
        self.ln = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        h = self.ln(h + torch.tanh(self.attn(h)))
        return self.out(h)


def build():
    """The model with its adapter; only the adapter trains."""
    torch.manual_seed(0)
    model = TinyLM()
    model.attn = LoRALinear(model.attn)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model

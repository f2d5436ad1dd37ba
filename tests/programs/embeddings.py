"""Sentence embeddings in the style of sentence-transformers: a BERT encoder with mean
pooling, ``encode`` under ``torch.inference_mode()`` on ``"cuda"``, then one contrastive
training epoch (in-batch negatives) and ``encode`` again. The encoder is built from a config
(no download). Prints JSON facts last.

Usage: embeddings.py [--device DEVICE]
"""

import argparse
import json

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = parser.parse_args()
device = torch.device(args.device)

torch.manual_seed(0)
config = BertConfig(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
)
encoder = BertModel(config).to(device)
data = torch.Generator().manual_seed(2)
anchors = torch.randint(1, 100, (8, 10), generator=data)
positives = torch.randint(1, 100, (8, 10), generator=data)


def mean_pool(output, mask):
    mask = mask.unsqueeze(-1).to(output.dtype)
    return (output * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def encode(ids):
    encoder.eval()
    with torch.inference_mode():
        ids = ids.to(device)
        mask = torch.ones_like(ids)
        out = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return F.normalize(mean_pool(out, mask), dim=-1)


before = encode(anchors)
encoder.train()
opt = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
losses = []
for start in range(0, 8, 4):
    a, p = anchors[start : start + 4].to(device), positives[start : start + 4].to(device)
    ea = mean_pool(encoder(input_ids=a).last_hidden_state, torch.ones_like(a))
    ep = mean_pool(encoder(input_ids=p).last_hidden_state, torch.ones_like(p))
    scores = F.normalize(ea, dim=-1) @ F.normalize(ep, dim=-1).T * 20.0
    loss = F.cross_entropy(scores, torch.arange(len(a), device=device))
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
after = encode(anchors)
print(
    json.dumps(
        {
            "before": before.cpu().flatten().tolist(),
            "after": after.cpu().flatten().tolist(),
            "losses": losses,
            "device": str(before.device),
            "inference": before.is_inference(),
        }
    )
)

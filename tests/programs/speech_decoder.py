"""A tiny speech-to-text model used the way openai/whisper is.

``load_model(path, device="cuda")`` reads a checkpoint saved as whisper's (``dims`` and
``model_state_dict``) with ``torch.load(map_location=device)``; the model keeps a sparse
buffer (``alignment_heads``); the log-mel spectrogram comes from ``torch.from_numpy`` audio
with ``torch.hann_window(N_FFT).to(audio.device)`` and ``torch.stft``; decoding is greedy,
in float16 on a GPU with ``--fp16``, as whisper decodes. Prints the JSON facts last.

Usage: speech_decoder.py CHECKPOINT [--device DEVICE] [--fp16] [--save]
"""

import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

N_FFT, HOP_LENGTH, N_MELS, SAMPLE_RATE = 400, 160, 16, 16000


class Dims:
    def __init__(self, n_mels=N_MELS, n_state=32, n_head=2, n_layer=2, n_vocab=64, n_ctx=24):
        self.n_mels, self.n_state, self.n_head = n_mels, n_state, n_head
        self.n_layer, self.n_vocab, self.n_ctx = n_layer, n_vocab, n_ctx


class Attention(nn.Module):
    def __init__(self, n_state, n_head):
        super().__init__()
        self.n_head = n_head
        self.query, self.key = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state, bias=False)
        self.value, self.out = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state)

    def forward(self, x, xa=None, causal=False):
        src = x if xa is None else xa
        q, k, v = self.query(x), self.key(src), self.value(src)
        split = lambda t: t.view(*t.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)  # noqa: E731
        y = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=causal)
        return self.out(y.permute(0, 2, 1, 3).flatten(start_dim=2))


class Whisperish(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims
        self.conv1 = nn.Conv1d(dims.n_mels, dims.n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.n_state, dims.n_state, kernel_size=3, stride=2, padding=1)
        self.enc = Attention(dims.n_state, dims.n_head)
        self.token_embedding = nn.Embedding(dims.n_vocab, dims.n_state)
        self.dec_self = Attention(dims.n_state, dims.n_head)
        self.dec_cross = Attention(dims.n_state, dims.n_head)
        self.ln = nn.LayerNorm(dims.n_state)
        self.head = nn.Linear(dims.n_state, dims.n_vocab)
        # whisper: use the last half of the decoder layers for time alignment by default
        all_heads = torch.zeros(dims.n_layer, dims.n_head, dtype=torch.bool)
        all_heads[dims.n_layer // 2 :] = True
        self.register_buffer("alignment_heads", all_heads.to_sparse(), persistent=False)

    @property
    def device(self):
        return next(self.parameters()).device

    def embed_audio(self, mel):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        return x + self.enc(x)

    def logits(self, tokens, features):
        x = self.token_embedding(tokens)
        x = x + self.dec_self(x, causal=True)
        x = self.ln(x + self.dec_cross(x, features))
        return self.head(x)


def load_model(path, device=None):
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    with open(path, "rb") as fp:
        checkpoint = torch.load(fp, map_location=device)
    model = Whisperish(Dims(**checkpoint["dims"]))
    model.load_state_dict(checkpoint["model_state_dict"])
    return model.to(device)


def log_mel_spectrogram(audio, device=None):
    if not torch.is_tensor(audio):
        audio = torch.from_numpy(audio)
    if device is not None:
        audio = audio.to(device)
    window = torch.hann_window(N_FFT).to(audio.device)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    rng = np.random.default_rng(3)
    filters = torch.from_numpy(np.abs(rng.standard_normal((N_MELS, N_FFT // 2 + 1)))).to(
        audio.device
    )
    mel_spec = filters.float() @ magnitudes
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def transcribe(model, audio, fp16):
    dtype = torch.float16 if fp16 else torch.float32
    if model.device == torch.device("cpu") and fp16:
        print("FP16 is not supported on CPU; using FP32 instead")
        dtype = torch.float32
    if dtype == torch.float16:
        model = model.half()
    mel = log_mel_spectrogram(audio).to(model.device)
    features = model.embed_audio(mel[None].to(dtype))
    tokens = torch.tensor([[1]], device=model.device)
    with torch.no_grad():
        for _ in range(model.dims.n_ctx - 1):
            next_token = model.logits(tokens, features)[:, -1].argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=-1)
    return tokens[0].tolist(), str(features.dtype), features.float().sum().item()


parser = argparse.ArgumentParser()
parser.add_argument("checkpoint")
parser.add_argument("--device", default=None)
parser.add_argument("--fp16", action="store_true")
args = parser.parse_args()
if not os.path.exists(args.checkpoint):  # whisper's released checkpoints: made on the CPU
    torch.manual_seed(0)
    dims = Dims()
    torch.save(
        {"dims": vars(dims), "model_state_dict": Whisperish(dims).state_dict()}, args.checkpoint
    )
model = load_model(args.checkpoint, args.device)
audio = (np.random.default_rng(0).standard_normal(SAMPLE_RATE) * 0.1).astype(np.float32)
tokens, dtype, checksum = transcribe(model, audio, args.fp16)
heads = model.alignment_heads
print(
    json.dumps(
        {
            "tokens": tokens,
            "dtype": dtype,
            "features": checksum,
            "device": str(model.device),
            "heads": [
                str(heads.device),
                heads.layout == torch.sparse_coo,
                heads.to_dense().tolist(),
            ],
        }
    )
)

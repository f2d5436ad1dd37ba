"""A denoising diffusion sampler used the way diffusers pipelines are.

``pipe.to("cuda")``, ``torch.Generator("cuda").manual_seed(0)``, latents drawn with
``torch.randn(shape, generator=generator, device=device)``, a DDPM noise schedule computed
in float64 with NumPy and moved with ``torch.from_numpy(...).to(device)``, a small UNet-like
denoiser with self-attention through ``F.scaled_dot_product_attention``. Prints the JSON
facts last.

Usage: diffusion.py [--device DEVICE] [--schedule-dtype float32]  (the schedule's tensors)
"""

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Denoiser(nn.Module):
    def __init__(self, channels=3, width=16):
        super().__init__()
        self.inp = nn.Conv2d(channels, width, 3, padding=1)
        self.time = nn.Linear(1, width)
        self.norm = nn.GroupNorm(4, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.mid = nn.Conv2d(width, width, 3, padding=1)
        self.out = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x, t):
        h = F.silu(self.inp(x)) + self.time(t.view(1, 1).to(x.dtype))[:, :, None, None]
        b, c, hh, ww = h.shape
        seq = self.norm(h).flatten(2).transpose(1, 2)
        q, k, v = self.qkv(seq).chunk(3, dim=-1)
        attn = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        h = h + attn.transpose(1, 2).reshape(b, c, hh, ww)
        return self.out(F.silu(self.mid(h)))


class Pipeline:
    def __init__(self, unet, num_train_timesteps=100, schedule_dtype=None):
        self.unet = unet
        self.schedule_dtype = schedule_dtype
        betas = np.linspace(1e-4, 0.02, num_train_timesteps, dtype=np.float64)
        self.alphas_cumprod_np = np.cumprod(1.0 - betas, axis=0)
        self.betas_np = betas
        self.device = torch.device("cpu")

    def to(self, device):
        self.device = torch.device(device)
        self.unet.to(self.device)
        return self

    @torch.no_grad()
    def __call__(self, generator, num_inference_steps=8, size=8):
        shape = (1, 3, size, size)
        latents = torch.randn(shape, generator=generator, device=self.device)
        alphas_cumprod = torch.from_numpy(self.alphas_cumprod_np).to(
            self.device, self.schedule_dtype
        )
        betas = torch.from_numpy(self.betas_np).to(self.device, self.schedule_dtype)
        timesteps = (
            np.linspace(len(self.betas_np) - 1, 0, num_inference_steps).round().astype(np.int64)
        )
        for t in timesteps:
            eps = self.unet(
                latents, torch.tensor(float(t) / len(self.betas_np), device=self.device)
            )
            alpha_bar, beta = alphas_cumprod[t], betas[t]
            mean = (latents - beta / (1 - alpha_bar).sqrt() * eps) / (1 - beta).sqrt()
            noise = torch.randn(shape, generator=generator, device=self.device)
            latents = (mean + (beta.sqrt() * noise if t > 0 else 0)).to(torch.float32)
        image = (latents / 2 + 0.5).clamp(0, 1)
        return image.cpu().permute(0, 2, 3, 1).float().numpy()


parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--schedule-dtype", default=None)
args = parser.parse_args()
torch.manual_seed(0)
dtype = None if args.schedule_dtype is None else getattr(torch, args.schedule_dtype)
pipe = Pipeline(Denoiser(), schedule_dtype=dtype).to(args.device)
generator = torch.Generator(args.device).manual_seed(0)
image = pipe(generator=generator)
print(json.dumps({"image": image.flatten().tolist(), "generator": str(generator.device)}))

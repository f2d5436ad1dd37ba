"""A NeRF training loop in the style of nerf-pytorch's ``run_nerf.py``, written for CUDA:
``torch.set_default_tensor_type('torch.cuda.FloatTensor')`` by name at the top, so every
device-less factory and the legacy constructor (``torch.Tensor([1e10])`` in
``raw2outputs``, ``torch.Tensor([10.])`` in ``mse2psnr``) makes CUDA tensors; positional
encoding, stratified sampling with ``torch.rand``, volume rendering with ``torch.cumprod``,
Adam (torch's step counters stay on the CPU, as on a GPU). ``--device cpu`` sets
``'torch.FloatTensor'`` instead. Prints JSON facts.
"""

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--iters", type=int, default=5)
args = parser.parse_args()

if args.device == "cuda":
    torch.set_default_tensor_type("torch.cuda.FloatTensor")
else:
    torch.set_default_tensor_type("torch.FloatTensor")
device = torch.device(args.device)
np.random.seed(0)
torch.manual_seed(0)

img2mse = lambda x, y: torch.mean((x - y) ** 2)  # noqa: E731 - as nerf-pytorch writes them
mse2psnr = lambda x: -10.0 * torch.log(x) / torch.log(torch.Tensor([10.0]))  # noqa: E731


class Embedder:
    def __init__(self, multires):
        self.freq_bands = 2.0 ** torch.linspace(0.0, multires - 1, steps=multires)

    def __call__(self, x):
        out = [x]
        for freq in self.freq_bands:
            out += [torch.sin(x * freq), torch.cos(x * freq)]
        return torch.cat(out, -1)


class NeRF(nn.Module):
    def __init__(self, input_ch, W=32):
        super().__init__()
        self.pts_linears = nn.ModuleList([nn.Linear(input_ch, W), nn.Linear(W, W)])
        self.output_linear = nn.Linear(W, 4)

    def forward(self, x):
        h = x
        for layer in self.pts_linears:
            h = F.relu(layer(h))
        return self.output_linear(h)


def get_rays(H, W, focal, c2w):
    i, j = torch.meshgrid(torch.linspace(0, W - 1, W), torch.linspace(0, H - 1, H), indexing="ij")
    i, j = i.t(), j.t()
    dirs = torch.stack([(i - W * 0.5) / focal, -(j - H * 0.5) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., np.newaxis, :] * c2w[:3, :3], -1)
    rays_o = c2w[:3, -1].expand(rays_d.shape)
    return rays_o, rays_d


def raw2outputs(raw, z_vals, rays_d):
    raw2alpha = lambda raw, dists: 1.0 - torch.exp(-F.relu(raw) * dists)  # noqa: E731
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.Tensor([1e10]).expand(dists[..., :1].shape)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    alpha = raw2alpha(raw[..., 3], dists)
    weights = (
        alpha
        * torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1)), 1.0 - alpha + 1e-10], -1), -1)[
            :, :-1
        ]
    )
    return torch.sum(weights[..., None] * rgb, -2)


def render_rays(model, embed, rays_o, rays_d, N_samples=16, near=2.0, far=6.0):
    t_vals = torch.linspace(0.0, 1.0, steps=N_samples)
    z_vals = near * (1.0 - t_vals) + far * t_vals
    z_vals = z_vals.expand([rays_o.shape[0], N_samples])
    mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    upper = torch.cat([mids, z_vals[..., -1:]], -1)
    lower = torch.cat([z_vals[..., :1], mids], -1)
    t_rand = torch.rand(z_vals.shape)
    z_vals = lower + (upper - lower) * t_rand
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    raw = model(embed(pts))
    return raw2outputs(raw, z_vals, rays_d)


H = W = 8
focal = 10.0
pose = torch.Tensor(np.eye(4)[:3, :4].astype(np.float32))
pose[2, 3] = 4.0
target = torch.Tensor(np.random.rand(H, W, 3).astype(np.float32)).to(device)
embed = Embedder(4)
model = NeRF(3 + 3 * 2 * 4).to(device)
optimizer = torch.optim.Adam(params=list(model.parameters()), lr=5e-3, betas=(0.9, 0.999))

psnrs = []
for _ in range(args.iters):
    rays_o, rays_d = get_rays(H, W, focal, pose)
    rgb = render_rays(model, embed, rays_o.reshape(-1, 3), rays_d.reshape(-1, 3))
    loss = img2mse(rgb, target.reshape(-1, 3))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    psnrs.append(mse2psnr(loss.detach()).item())

step = optimizer.state[model.output_linear.weight]["step"]
print(
    json.dumps(
        {
            "psnrs": psnrs,
            "step": [str(step.device), step.item()],
            "pose": str(pose.device),
            "weight": str(model.output_linear.weight.device),
        }
    )
)

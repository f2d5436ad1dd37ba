"""A self-distillation training loop in the style of facebookresearch/dino's ``main_dino.py``.

A student and an EMA teacher on the GPU (``--device cuda``), NumPy cosine schedules for the
learning rate and weight decay written into the optimizer's param groups each step, and
DINO's ``MetricLogger``, whose ``SmoothedValue`` takes the median of its window with
``torch.tensor(list(self.deque))``: the window holds the schedule's NumPy float64 entries.
Random data stands in for ImageNet crops. Prints the JSON facts last.
"""

import argparse
import json
import math
from collections import deque

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser("DINO")
parser.add_argument("--device", default="cuda")
parser.add_argument("--epochs", default=2, type=int)
parser.add_argument("--seed", default=0, type=int)


def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0):
    warmup_schedule = np.array([])
    warmup_iters = warmup_epochs * niter_per_ep
    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    schedule = final_value + 0.5 * (base_value - final_value) * (
        1 + np.cos(np.pi * iters / len(iters))
    )
    schedule = np.concatenate((warmup_schedule, schedule))
    assert len(schedule) == epochs * niter_per_ep
    return schedule


class SmoothedValue:
    """Track a series of values and provide access to smoothed values over a window."""

    def __init__(self, window_size=20):
        self.deque = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.deque.append(value)
        self.count += n
        self.total += value * n

    @property
    def median(self):
        d = torch.tensor(list(self.deque))
        return d.median().item()

    @property
    def avg(self):
        d = torch.tensor(list(self.deque), dtype=torch.float32)
        return d.mean().item()

    @property
    def global_avg(self):
        return self.total / self.count


class Head(nn.Module):
    def __init__(self, in_dim=32, out_dim=16):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_dim, 64), nn.GELU(), nn.Linear(64, out_dim))

    def forward(self, x):
        return self.mlp(x)


def dino_loss(student_out, teacher_out, center, student_temp=0.1, teacher_temp=0.04):
    teacher = F.softmax((teacher_out - center) / teacher_temp, dim=-1)
    return torch.sum(-teacher * F.log_softmax(student_out / student_temp, dim=-1), dim=-1).mean()


def main():
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    data = torch.randn(64, 32)
    niter = 8

    student, teacher = Head(), Head()
    student, teacher = student.to(args.device), teacher.to(args.device)
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad = False
    center = torch.zeros(1, 16, device=args.device)
    optimizer = torch.optim.AdamW(student.parameters())
    lr_schedule = cosine_scheduler(5e-4 * 8 / 256, 1e-6, args.epochs, niter)
    wd_schedule = cosine_scheduler(0.04, 0.4, args.epochs, niter)
    momentum_schedule = cosine_scheduler(0.996, 1, args.epochs, niter)

    meters = {"loss": SmoothedValue(), "lr": SmoothedValue(), "wd": SmoothedValue()}
    losses, lr_medians = [], []
    for epoch in range(args.epochs):
        for step in range(niter):
            it = niter * epoch + step
            for i, param_group in enumerate(optimizer.param_groups):
                param_group["lr"] = lr_schedule[it]
                if i == 0:
                    param_group["weight_decay"] = wd_schedule[it]
            images = data[step * 8 : (step + 1) * 8].to(args.device, non_blocking=True)
            student_out = student(images + 0.1 * torch.randn_like(images))
            teacher_out = teacher(images)
            loss = dino_loss(student_out, teacher_out, center)
            if not math.isfinite(loss.item()):
                raise SystemExit(f"Loss is {loss.item()}, stopping training")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                m = momentum_schedule[it]
                for param_q, param_k in zip(
                    student.parameters(), teacher.parameters(), strict=True
                ):
                    param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
                center = center * 0.9 + teacher_out.mean(dim=0, keepdim=True) * 0.1
            meters["loss"].update(loss.item())
            meters["lr"].update(optimizer.param_groups[0]["lr"])
            meters["wd"].update(optimizer.param_groups[0]["weight_decay"])
            losses.append(loss.item())
            lr_medians.append(meters["lr"].median)
    facts = {
        "losses": losses,
        "lr_medians": lr_medians,
        "loss_median": meters["loss"].median,
        "wd_avg": meters["wd"].avg,
        "lr_global_avg": meters["lr"].global_avg,
        "device": str(center.device),
    }
    print(json.dumps(facts))


if __name__ == "__main__":
    main()

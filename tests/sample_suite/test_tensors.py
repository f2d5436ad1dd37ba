"""Device-agnostic tests: they pass natively and redirected."""

import torch
from torch import nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_add():
    x = torch.ones(3, device=DEVICE) + 1
    assert x.sum().item() == 6


def test_matmul():
    a = torch.eye(4, device=DEVICE)
    b = torch.arange(16.0, device=DEVICE).reshape(4, 4)
    assert torch.equal(a @ b, b)


def test_training_step():
    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4, device=DEVICE), torch.randn(8, 1, device=DEVICE)
    before = nn.functional.mse_loss(model(x), y)
    before.backward()
    optimizer.step()
    after = nn.functional.mse_loss(model(x), y)
    assert after.item() < before.item()

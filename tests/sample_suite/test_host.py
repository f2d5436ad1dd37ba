"""Tests that notice where tensors really are."""

import pytest
import torch

import torchdevice


def test_device_matches_request():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.arange(3, device=device)
    assert x.device.type == device  # natively true; redirected 'cuda' lands elsewhere


@pytest.mark.torchdevice_native
def test_native_even_under_torchdevice():
    assert not torchdevice.is_enabled()
    assert torch.ones(1).device.type == "cpu"

"""Every error torchdevice raises on purpose is a TorchDeviceError and the builtin torch uses."""

from __future__ import annotations

import pytest
import torch

import torchdevice
from torchdevice import (
    DeviceRequestError,
    DeviceRequestTypeError,
    SettingsError,
    TorchDeviceError,
    UnsupportedFeatureError,
)


def _bad_string() -> None:
    torch.zeros(1, device="cuda:abc")


def _bad_type() -> None:
    torch.Generator(device=1.5)


def _bad_setting() -> None:
    torchdevice.disable()
    torchdevice.enable(log_level="LOUD")


def _cuda_only() -> None:
    torch.cuda.CUDAGraph()


@pytest.mark.parametrize(
    ("call", "error", "builtin"),
    [
        (_bad_string, DeviceRequestError, RuntimeError),
        (_bad_type, DeviceRequestTypeError, TypeError),
        (_bad_setting, SettingsError, ValueError),
        (_cuda_only, UnsupportedFeatureError, RuntimeError),
    ],
    ids=["malformed device", "wrong type", "bad setting", "CUDA-only feature"],
)
def test_each_error_is_caught_as_torchdevice_error_and_as_its_builtin(call, error, builtin):
    torchdevice.enable()
    with pytest.raises(TorchDeviceError) as caught:
        call()
    assert type(caught.value) is error
    assert isinstance(caught.value, builtin)

"""The places torch treats MPS by its name, made to treat the simulated device the same.

Why a module of its own: a few torch functions test ``t.is_mps`` or compare a device with
``mps:0`` instead of asking what the device can do (no float64): ``print`` of a tensor and
``GradScaler.unscale_``. A device gets MPS's branch there only by name, so on the simulated
device they would stop with the float64 ``TypeError`` where a Mac runs on. Each patch below
is process-wide and permanent, like the registration that installs it
(:mod:`torchdevice.simulated_mps.registration`), and touches only this device's tensors.
"""

from __future__ import annotations

from typing import cast

import torch

__all__ = ["print_like_mps", "unscale_like_mps"]


def print_like_mps(name: str) -> None:
    """Let ``print`` format this device's tensors in float32, as it does MPS tensors.

    ``torch._tensor_str.tensor_totype`` converts a tensor to float64 to format it, except on
    MPS (``t.is_mps``) and other devices without float64; a device only gets that exception
    by name. Process-wide and permanent, like the registration itself.
    """
    tensor_str = torch._tensor_str
    original = tensor_str.tensor_totype

    def tensor_totype(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == name:
            return t.to(dtype=torch.float)
        return cast("torch.Tensor", original(t))  # type: ignore[no-untyped-call]  # untyped in torch

    tensor_str.tensor_totype = tensor_totype


def unscale_like_mps(name: str) -> None:
    """Let ``GradScaler.unscale_`` take the inverse scale in float32 on this device, as it
    does on MPS.

    torch computes ``1 / scale`` in float64 except when the scale is on ``mps:0``
    (``self._scale.device != torch.device("mps:0")`` in ``torch/amp/grad_scaler.py``): MPS has
    no float64. A device gets that exception only by name, so fp16 training with a
    GradScaler would stop here with the float64 ``TypeError`` where a Mac trains. The method
    below is torch's, with the MPS branch for this device's scale; any other scale goes to
    torch's own. Process-wide and permanent, like the registration itself.
    """
    from torch.amp.grad_scaler import GradScaler, OptState  # noqa: PLC0415 - amp is lazy

    original = GradScaler.unscale_

    def unscale_(self: GradScaler, optimizer: torch.optim.Optimizer) -> None:
        # A disabled scaler has no ``_scale`` at all: torch's own method returns first.
        if not self._enabled:
            return original(self, optimizer)
        scale = self._scale
        if scale is None or scale.device.type != name:
            return original(self, optimizer)
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = scale.reciprocal()  # the branch torch takes for mps:0
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = OptState.UNSCALED
        return None

    unscale_.__doc__ = original.__doc__
    GradScaler.unscale_ = unscale_  # type: ignore[method-assign]

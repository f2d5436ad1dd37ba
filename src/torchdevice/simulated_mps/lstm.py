"""LSTM on the simulated device, as ATen runs it on an MPS tensor.

Why a module of its own: ATen sends ``lstm`` on an MPS tensor to MPS's own kernel,
``_lstm_mps``, whose autograd formula is ``lstm_mps_backward`` (RNN.cpp; derivatives.yaml);
the generic path would take ``_thnn_fused_lstm_cell`` for an out-of-tree device, which MPS does
not have, at every step. ``lstm.input`` on this device goes the MPS way
(:func:`lstm_as_on_mps`, registered at AutogradPrivateUse1 and PrivateUse1), and
:class:`LstmKernels` are MPS's pair: the CPU's ``lstm`` on CPU aliases, its inter-layer dropout
drawn from the device's generator as MPS draws it from its own. Their three extra outputs are
this device's own: the generator state the forward drew from (so the backward replays the same
masks, by running the CPU forward again under autograd), and two empty tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._pytree import tree_map

from torchdevice.simulated_mps.dispatch import below_python
from torchdevice.simulated_mps.kernels import Kernels

__all__ = ["LstmKernels", "lstm_as_on_mps"]


class LstmKernels:
    """``_lstm_mps`` and ``lstm_mps_backward`` for one registered device."""

    def __init__(self, kernels: Kernels) -> None:
        self.kernels = kernels

    def by_overload(self) -> dict[str, Callable[..., Any]]:
        """The two kernels, by overload name (as :meth:`Kernels.install` takes them)."""
        return {"aten::_lstm_mps": self.forward, "aten::lstm_mps_backward": self.backward}

    def forward(
        self,
        input: torch.Tensor,
        hx: list[torch.Tensor],
        params: list[torch.Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
    ) -> tuple[torch.Tensor, ...]:
        with below_python():
            self.kernels.check_devices(torch.ops.aten._lstm_mps.default, (input, hx, params), {})
            self.kernels.check_dtypes((input, hx, params), {})
            state = self.kernels.module.default_generator.get_state()
            memo: dict[int, torch.UntypedStorage] = {}
            host_input, host_hx, host_params = tree_map(
                lambda x: self.kernels.to_host(x, memo), (input, hx, params)
            )
            flags = (has_biases, num_layers, dropout, train, bidirectional, batch_first)
            with self.kernels.module._as_global_cpu_generator():
                output, hy, cy = torch.lstm(host_input, host_hx, host_params, *flags)
            empty = torch.empty(0, dtype=input.dtype)
            wrap = self.kernels.wrapper(memo)
            return (
                wrap(output),
                wrap(hy),
                wrap(cy),
                wrap(state),
                wrap(empty),
                wrap(empty),
            )

    def backward(
        self,
        grad_y: torch.Tensor | None,
        grad_hy: torch.Tensor | None,
        grad_cy: torch.Tensor | None,
        z_state: torch.Tensor,
        cell_state_fwd: torch.Tensor,
        input: torch.Tensor,
        layers_outputs: torch.Tensor,
        hx: list[torch.Tensor],
        params: list[torch.Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        with below_python():
            memo: dict[int, torch.UntypedStorage] = {}
            host = tree_map(
                lambda x: self.kernels.to_host(x, memo),
                (grad_y, grad_hy, grad_cy, input, hx, params),
            )
            grads_out, host_input, host_hx, host_params = host[:3], host[3], host[4], host[5]
            leaves = [t.detach().requires_grad_() for t in (host_input, *host_hx, *host_params)]
            flags = (has_biases, num_layers, dropout, train, bidirectional, batch_first)
            state = self.kernels.to_host(z_state, memo).clone()
            with _autograd_below_autograd(), self.kernels.module._global_cpu_generator_at(state):
                outputs = torch.lstm(leaves[0], leaves[1:3], leaves[3:], *flags)
            pairs = [(o, g) for o, g in zip(outputs, grads_out, strict=True) if g is not None]
            grads = torch.autograd.grad(
                [o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True
            )
            filled = [
                torch.zeros_like(leaf) if grad is None else grad
                for leaf, grad in zip(leaves, grads, strict=True)
            ]
            wrap = self.kernels.wrapper(memo)
            device = [wrap(grad) for grad in filled]
            return device[0], device[1:3], device[3:]


@contextmanager
def _autograd_below_autograd() -> Iterator[None]:
    """Autograd for CPU work inside a kernel, which runs below autograd (the dispatcher
    excludes the autograd keys for the thread while a backend kernel runs)."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for key in (torch._C.DispatchKey.AutogradCPU, torch._C.DispatchKey.ADInplaceOrView):
        excluded = excluded.remove(key)
    included = torch._C._dispatch_tls_local_include_set()
    with torch._C._ForceDispatchKeyGuard(included, excluded), torch.enable_grad():
        yield


def lstm_as_on_mps(
    input: torch.Tensor,
    hx: list[torch.Tensor],
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lstm`` on this device, as ATen runs it on an MPS tensor: ``_lstm_mps``, whose
    autograd formula is ``lstm_mps_backward`` (``at::native::lstm``'s ``is_mps()`` branch)."""
    output, hy, cy, *_ = torch.ops.aten._lstm_mps.default(
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
    )
    return output, hy, cy

"""The ``torch.cuda`` facade: CUDA-first code asks CUDA questions, the real device answers.

Installed as ``sys.modules["torch.cuda"]`` and ``torch.cuda`` when the host has no CUDA,
and put back exactly on disable. It answers what this module overrides from the runtime's
host and delegates every other attribute to the real ``torch.cuda`` module (so
``torch.cuda.amp`` and friends still import through it).

On a CUDA host the real module stays: CUDA code needs no facade there.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from torchdevice.runtime import Runtime

__all__ = ["CudaFacade", "install", "installed", "uninstall"]

_REAL_CUDA: types.ModuleType = sys.modules["torch.cuda"]


class CudaFacade(types.ModuleType):
    """A module object standing in for ``torch.cuda`` while redirecting.

    Only the answers that must reflect the policy are defined here; everything else is
    looked up on the real module at access time.
    """

    def __init__(self, get_runtime: Callable[[], Runtime | None]) -> None:
        super().__init__("torch.cuda", _REAL_CUDA.__doc__)
        self.__dict__.update(
            {
                "__file__": getattr(_REAL_CUDA, "__file__", None),
                "__path__": getattr(_REAL_CUDA, "__path__", []),
                "__package__": "torch.cuda",
                "__spec__": _REAL_CUDA.__spec__,
                "__torchdevice_real__": _REAL_CUDA,
            }
        )
        self._get_runtime = get_runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(_REAL_CUDA, name)

    def _runtime(self) -> Runtime:
        rt = self._get_runtime()
        if rt is None:  # pragma: no cover - uninstalled before any call can reach here
            raise RuntimeError("torchdevice's torch.cuda facade was used after disable()")
        return rt

    def is_available(self) -> bool:
        """True while redirecting: CUDA requests land on a real device (SPEC §3)."""
        return True

    def is_initialized(self) -> bool:
        """The redirect target is always ready."""
        return True

    def device_count(self) -> int:
        """How many devices CUDA indices can address: the MPS device or the CPU, one."""
        return self._runtime().host.device_count

    def current_device(self) -> int:
        """Always 0: every ``cuda:n`` lands on the host's single redirect target."""
        return 0

    def get_device_name(self, device: Any = None) -> str:
        """The real name of the device CUDA requests land on."""
        rt = self._runtime()
        if device is not None:
            rt.decide(device)  # a malformed request raises as torch would
        return rt.host.device_name(0)


    # -- RNG: the generator of the device CUDA tensors really land on ----------------
    # Implemented on the generator object, never through torch.manual_seed, which itself
    # calls torch.cuda.manual_seed_all (it would recurse).
    def _generator(self) -> torch.Generator:
        if self._runtime().host.kind == "mps":
            from torch.mps import _get_default_mps_generator  # noqa: PLC0415 - MPS only

            return _get_default_mps_generator()
        return torch.default_generator

    def manual_seed(self, seed: int) -> None:
        """Seed the real device's default generator."""
        self._generator().manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        """Seed every device: there is one."""
        self.manual_seed(seed)

    def seed(self) -> None:
        """Seed the real device's generator non-deterministically."""
        self._generator().seed()

    def seed_all(self) -> None:
        """Seed every device non-deterministically: there is one."""
        self.seed()

    def initial_seed(self) -> int:
        """The real device generator's initial seed."""
        return int(self._generator().initial_seed())

    def get_rng_state(self, device: Any = "cuda") -> torch.Tensor:
        """The real device generator's state (a CPU uint8 tensor, as CUDA's is)."""
        return self._generator().get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "cuda") -> None:
        """Restore the real device generator's state."""
        self._generator().set_state(new_state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        """One state per device: one device."""
        return [self.get_rng_state()]

    def set_rng_state_all(self, new_states: Any) -> None:
        """Restore the states of every device: the first is the only one."""
        self.set_rng_state(list(new_states)[0])


_facade: CudaFacade | None = None


def install(get_runtime: Callable[[], Runtime | None]) -> None:
    """Swap the facade into ``sys.modules`` and onto ``torch``."""
    global _facade
    if _facade is None:
        _facade = CudaFacade(get_runtime)
    sys.modules["torch.cuda"] = _facade
    torch.cuda = _facade  # type: ignore[assignment]


def uninstall() -> None:
    """Put the real ``torch.cuda`` back, the very same module object."""
    global _facade
    sys.modules["torch.cuda"] = _REAL_CUDA
    torch.cuda = _REAL_CUDA  # type: ignore[assignment]
    _facade = None


def installed() -> bool:
    """Whether ``torch.cuda`` is the facade now."""
    return sys.modules.get("torch.cuda") is not _REAL_CUDA

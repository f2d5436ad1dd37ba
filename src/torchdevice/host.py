"""What accelerator the machine really has.

The probe runs once, lazily (the first time a redirect needs it), because asking CUDA for
its device count initialises the driver. Tests and the simulated hosts of the policy table
inject a :class:`Host` instead of probing, so the MPS and multi-GPU CUDA paths are
exercised on machines that have neither.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["Host", "HostKind", "cpu_name", "probe_host"]

HostKind = Literal["cuda", "mps", "cpu"]


@dataclass(frozen=True)
class Host:
    """A machine as the policy sees it: its kind and, on CUDA hosts, its devices.

    Frozen and hashable so decisions can be cached per host.
    """

    kind: HostKind
    cuda_device_count: int = 0
    device_names: tuple[str, ...] = field(default=())
    #: The torch device type the accelerator's tensors use, when it is not ``kind``: a
    #: simulated MPS host (``torchdevice.testing``) keeps its tensors on ``simgpu``.
    device_type: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("cuda", "mps", "cpu"):
            raise ValueError(f"unknown host kind {self.kind!r}: expected 'cuda', 'mps' or 'cpu'")
        if self.kind == "cuda" and self.cuda_device_count < 1:
            raise ValueError("a CUDA host has at least one CUDA device")
        if self.kind != "cuda" and self.cuda_device_count != 0:
            raise ValueError(f"a {self.kind} host has no CUDA devices")

    @property
    def accelerator(self) -> Literal["cuda", "mps"] | None:
        """The device type redirected requests go to, ``None`` on a CPU-only host."""
        if self.kind == "cpu":
            return None
        return self.kind

    @property
    def device_count(self) -> int:
        """How many devices of the redirect target exist (the CPU and MPS count as one)."""
        return self.cuda_device_count if self.kind == "cuda" else 1

    def device_name(self, index: int = 0) -> str:
        """The real name of device ``index`` of the redirect target."""
        if 0 <= index < len(self.device_names):
            return self.device_names[index]
        return {"cuda": "CUDA device", "mps": "Apple MPS", "cpu": "CPU"}[self.kind]

    @classmethod
    def cpu(cls) -> Host:
        """A CPU-only host (for tests and for ``TORCHDEVICE_HOST=cpu``)."""
        return cls("cpu", 0, (cpu_name(),))

    @classmethod
    def mps(cls, name: str = "Apple M-series GPU (MPS)") -> Host:
        """An Apple Silicon host."""
        return cls("mps", 0, (name,))

    @classmethod
    def simulated(cls, device_type: str) -> Host:
        """An MPS host whose accelerator is the simulated backend ``device_type``.

        The policy treats it as MPS (one device, CUDA requests land on it, float64 narrows);
        tensors really live on ``device_type``, which really lacks some ops.
        """
        return cls("mps", 0, (f"simulated accelerator ({device_type})",), device_type)

    @classmethod
    def cuda(cls, count: int = 1, names: tuple[str, ...] = ()) -> Host:
        """A CUDA host with ``count`` devices."""
        return cls("cuda", count, names or tuple(f"CUDA device {i}" for i in range(count)))


def cpu_name() -> str:
    """The CPU's marketing name, for ``get_device_name()`` on a CPU-only host."""
    cpuinfo = Path("/proc/cpuinfo")
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


@functools.cache
def probe_host() -> Host:
    """Probe the real machine once: CUDA first, then MPS, else CPU-only.

    Must run before the ``torch.cuda`` facade is installed, and uses the real
    ``torch.cuda`` module object captured at import, so it never asks the facade.
    """
    import torch  # noqa: PLC0415 - imported lazily: probing is the first use of torch

    cuda = torch.cuda
    if cuda.is_available() and cuda.device_count() > 0:
        count = cuda.device_count()
        names = tuple(cuda.get_device_name(i) for i in range(count))
        return Host("cuda", count, names)
    if torch.backends.mps.is_available():
        return Host.mps(_mac_chip_name())
    return Host.cpu()


def _mac_chip_name() -> str:
    """The Apple chip's name ("Apple M2 Pro"), read from sysctl where it answers."""
    import subprocess  # noqa: PLC0415 - only on macOS

    try:
        out = subprocess.run(
            ["/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string"],
            capture_output=True,
            text=True,
            timeout=2,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "Apple Silicon GPU (MPS)"
    return out.stdout.strip() or "Apple Silicon GPU (MPS)"

"""What accelerator the machine really has.

The probe runs once, lazily (the first time a redirect needs it), because asking CUDA for
its device count initialises the driver. Tests and the simulated hosts of the policy table
inject a :class:`Host` instead of probing, so the MPS and multi-GPU CUDA paths are
exercised on machines that have neither.
"""

from __future__ import annotations

import functools
import platform
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Final, Literal, get_args, overload

from torchdevice import extra_backends

__all__ = [
    "HOST_CHOICES",
    "HOST_KINDS",
    "Host",
    "HostChoice",
    "HostChoices",
    "HostKind",
    "cpu_name",
    "forced_host",
    "probe_host",
]

HostKind = Literal["cpu", "mps", "cuda"]
#: What a user can force (``--host``, ``TORCHDEVICE_HOST``): a host kind, or the choice of an
#: extra backend that an installed distribution declares in the ``torchdevice.backends``
#: entry-point group (:mod:`torchdevice.extra_backends`). Those are known only at run time,
#: so the type is a string and :data:`HOST_CHOICES` the values.
HostChoice = str
#: The host kinds, as values (the one spelling is the type's).
HOST_KINDS: Final[tuple[HostKind, ...]] = get_args(HostKind)


class HostChoices(Sequence[str]):
    """Every host choice: the host kinds, then the extra backends' choices, sorted.

    Lazy: the installed distributions' entry points are read on the first question that
    is not about a host kind (``"cpu" in HOST_CHOICES`` reads nothing), so a command-line
    parser may take it as its ``choices`` (with a ``metavar``: argparse lists the choices
    of an option without one when the option is added).
    """

    def _values(self) -> tuple[str, ...]:
        return (*HOST_KINDS, *extra_backends.choices())

    def __contains__(self, value: object) -> bool:
        return value in HOST_KINDS or value in extra_backends.choices()

    def __iter__(self) -> Iterator[str]:
        return iter(self._values())

    def __len__(self) -> int:
        return len(self._values())

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._values()[index]

    def __repr__(self) -> str:
        return f"HostChoices{self._values()!r}"


#: The forcible host choices (:class:`HostChoices`).
HOST_CHOICES: Final = HostChoices()


def one_of(values: Sequence[str]) -> str:
    """``'a', 'b' or 'c'``: the accepted values, as an error message lists them."""
    quoted = [repr(value) for value in values]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


@dataclass(frozen=True)
class Host:
    """A machine as the policy sees it: its kind and, on CUDA hosts, its devices.

    Frozen and hashable so decisions can be cached per host.
    """

    kind: HostKind
    cuda_device_count: int = 0
    device_names: tuple[str, ...] = field(default=())
    #: The torch device type the accelerator's tensors use, when it is not ``kind``: the
    #: device type of an extra backend (:mod:`torchdevice.extra_backends`).
    device_type: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in HOST_KINDS:
            raise ValueError(f"unknown host kind {self.kind!r}: expected {one_of(HOST_KINDS)}")
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
        """An MPS host whose accelerator is the extra backend ``device_type``.

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

    It may run while a facade stands in for ``torch.cuda`` or ``torch.backends.mps``
    (the first probe can come from a second ``enable()``), so it asks the real modules.
    """
    import torch  # noqa: PLC0415, F401 - imported lazily: probing is the first use of torch

    cuda = _real_module("torch.cuda")
    if cuda.is_available() and cuda.device_count() > 0:
        count = cuda.device_count()
        names = tuple(cuda.get_device_name(i) for i in range(count))
        return Host("cuda", count, names)
    if _real_module("torch.backends.mps").is_available():
        return Host.mps(_mac_chip_name())
    return Host.cpu()


def forced_host(kind: HostChoice) -> Host:
    """The host to act as when ``kind`` is forced (``--host``, ``TORCHDEVICE_HOST``).

    Only a host the machine can be: every machine is a CPU host; an MPS or CUDA host
    needs that device, except that an MPS host runs on an extra backend standing for MPS
    when one has started (an extra backend registered directly, before any host was
    forced). A choice that is an extra backend's starts it (a device built from source
    builds on first use) and runs on it. Raises ``ValueError``, naming
    what the machine has and what to do, for any other. Extra backends are found through
    :mod:`torchdevice.extra_backends`, which they announce themselves to.
    """
    if kind == "cpu":
        return Host.cpu()
    if kind not in HOST_KINDS:
        return _extra_backend_host(kind)
    real = probe_host()
    if real.kind == kind:
        return real
    name = extra_backends.running(kind)
    if kind == "mps" and name is not None:
        return Host.simulated(name)
    device = {"mps": "an Apple GPU (MPS)", "cuda": "a CUDA GPU"}[kind]
    raise ValueError(
        f"host {kind!r} needs {device}, and this machine has none (it is a {real.kind} "
        f"host: {real.device_name()}); force only a host the machine can be ('cpu' always "
        "works), or leave it unset to use what the machine has"
    )


def _extra_backend_host(choice: str) -> Host:
    """The host of an extra backend's ``choice``, starting it in this process if need be.

    Its provider is imported lazily, by the registry: only a process that asks for this
    host loads it (and builds or loads its native half). A device already registered under
    another name is reused.
    """
    try:
        name = extra_backends.start(choice)
    except RuntimeError as error:  # no compiler, another PrivateUse1 backend...
        raise ValueError(f"host {choice!r} cannot start: {error}") from None
    return Host.simulated(name)


def _real_module(name: str) -> ModuleType:
    """The torch module ``name`` as torch made it, even while a facade stands in for it.

    A facade module (``torchdevice.facade.modules.FacadeModule``) keeps the module it
    stands for as ``__torchdevice_real__``.
    """
    module = sys.modules[name]
    real = module.__dict__.get("__torchdevice_real__")
    return real if isinstance(real, ModuleType) else module


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

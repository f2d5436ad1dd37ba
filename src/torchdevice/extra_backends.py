"""Accelerators torch does not ship, announced at run time: the one seam between the core
and a backend registered from outside it.

A backend registered with torch at run time (``torch.utils.rename_privateuse1_backend`` and
``torch._register_device_module``), such as the simulated MPS device of
:mod:`torchdevice.testing`, can stand in for a host kind. It announces itself here with an
:class:`ExtraBackend`: the host choice that asks for it (``"simulated-mps"``), the host kind
it stands for (``"mps"``), and how to start it and find its device type. The host probe
(:mod:`torchdevice.host`) asks this registry, and nothing in the core names the package that
provides a backend or calls into it: a host whose accelerator is an extra backend is a
:class:`~torchdevice.host.Host` with a ``device_type``, which the runtime and the facade
treat like any device type registered with torch.

A host choice can be made before its provider was imported (``TORCHDEVICE_HOST`` in a child
process): :data:`PROVIDERS` says which module announces it when imported. That table is
data; the provider's module registers itself (its ``announce()`` call), the core never
reaches into it.

This module imports nothing from torchdevice: :mod:`torchdevice.host` asks it, so a host kind
is a plain string here (one of ``host.HOST_KINDS``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["PROVIDERS", "ExtraBackend", "announce", "announced", "running", "start"]


@dataclass(frozen=True)
class ExtraBackend:
    """An accelerator registered with torch at run time, as the host probe needs to know it."""

    #: The host choice that asks for it (``host="simulated-mps"``, ``TORCHDEVICE_HOST``).
    choice: str
    #: The host kind whose policy it runs under (``"mps"``).
    stands_for: str
    #: Registers the device with torch in this process (idempotent) and returns its device
    #: type; raises ``RuntimeError`` when it cannot (no compiler, another backend...).
    start: Callable[[], str]
    #: The device type it is registered under in this process, ``None`` while not started.
    device_type: Callable[[], str | None]


#: Host choice -> the module that announces its backend when imported.
PROVIDERS: Final[dict[str, str]] = {"simulated-mps": "torchdevice.testing"}

_lock = threading.Lock()
_announced: dict[str, ExtraBackend] = {}


def announce(backend: ExtraBackend) -> None:
    """Make ``backend`` known to the host probe (the latest announcement of a choice wins)."""
    with _lock:
        _announced[backend.choice] = backend


def announced(choice: str) -> ExtraBackend | None:
    """The backend announced for ``choice``, importing its provider if need be."""
    with _lock:
        backend = _announced.get(choice)
    if backend is None and choice in PROVIDERS:
        importlib.import_module(PROVIDERS[choice])  # it announces itself when imported
        with _lock:
            backend = _announced.get(choice)
    return backend


def start(choice: str) -> str:
    """Start the backend of host choice ``choice``; its device type.

    Raises ``ValueError`` for a choice no backend announced, ``RuntimeError`` from the
    backend when it cannot start.
    """
    backend = announced(choice)
    if backend is None:
        raise ValueError(f"no backend is announced for host {choice!r}")
    return backend.start()


def running(kind: str) -> str | None:
    """The device type of a started backend that stands for host ``kind``, if any.

    Only backends already announced are asked: a provider nobody imported has started
    nothing in this process.
    """
    with _lock:
        backends = list(_announced.values())
    for backend in backends:
        if backend.stands_for == kind:
            device_type = backend.device_type()
            if device_type is not None:
                return device_type
    return None

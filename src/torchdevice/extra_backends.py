"""Accelerators torch does not ship, announced at run time: the one seam between the core
and a backend registered from outside it.

A backend registered with torch at run time (``torch.utils.rename_privateuse1_backend`` and
``torch._register_device_module``), such as the simulated MPS device torchdevice ships, can
stand in for a host kind. It announces itself here with an :class:`ExtraBackend`: the host
choice that asks for it, the host kind it stands for (``"mps"``), and how to start it and
find its device type. The host probe
(:mod:`torchdevice.host`) asks this registry, and nothing in the core names the package that
provides a backend or calls into it: a host whose accelerator is an extra backend is a
:class:`~torchdevice.host.Host` with a ``device_type``, which the runtime and the facade
treat like any device type registered with torch.

A host choice can be made before its provider was imported (``TORCHDEVICE_HOST`` in a child
process). A distribution declares its backends in the :data:`GROUP` entry-point group, one
entry point per host choice, naming a callable that returns the :class:`ExtraBackend` (torchdevice's
own ``pyproject.toml`` declares its simulated MPS device so)::

    [project.entry-points."torchdevice.backends"]
    simulated-npu = "my_backend.torchdevice_hook:extra_backend"

The group is read lazily, only when a choice nobody announced is asked for
(:func:`announced`) or the choices are listed (:func:`choices`): ``import torchdevice`` reads
no package metadata and imports no provider. What a choice is, is only what the group says:
the settings, the command lines (``--host``) and the hand-over to child processes
(``TORCHDEVICE_HOST``) take any declared choice, and the core spells none of them. A
provider may also announce itself when imported (:func:`announce`), which is how
:func:`running` finds a backend someone started directly.

This module imports nothing from torchdevice: :mod:`torchdevice.host` asks it, so a host kind
is a plain string here (one of ``host.HOST_KINDS``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # importlib.metadata costs milliseconds: read only when asked (see above)
    from importlib.metadata import EntryPoint

__all__ = ["GROUP", "ExtraBackend", "announce", "announced", "choices", "running", "start"]


@dataclass(frozen=True)
class ExtraBackend:
    """An accelerator registered with torch at run time, as the host probe needs to know it."""

    #: The host choice that asks for it (``host=``, ``--host``, ``TORCHDEVICE_HOST``): its
    #: entry point's name.
    choice: str
    #: The host kind whose policy it runs under (``"mps"``).
    stands_for: str
    #: Registers the device with torch in this process (idempotent) and returns its device
    #: type; raises ``RuntimeError`` when it cannot (no compiler, another backend...).
    start: Callable[[], str]
    #: The device type it is registered under in this process, ``None`` while not started.
    device_type: Callable[[], str | None]


#: The entry-point group a distribution declares its extra backends in: each entry is named
#: after its host choice and names a callable returning the :class:`ExtraBackend`.
GROUP: Final = "torchdevice.backends"

_lock = threading.Lock()
_announced: dict[str, ExtraBackend] = {}


def announce(backend: ExtraBackend) -> None:
    """Make ``backend`` known to the host probe (the latest announcement of a choice wins)."""
    with _lock:
        _announced[backend.choice] = backend


@functools.cache
def _declared() -> Mapping[str, EntryPoint]:
    """The entry points of :data:`GROUP` in the installed distributions, by host choice (the
    metadata is read once per process; no provider is imported)."""
    from importlib.metadata import entry_points  # noqa: PLC0415 - only when asked (see above)

    return {entry.name: entry for entry in entry_points(group=GROUP)}


def choices() -> tuple[str, ...]:
    """Every host choice an extra backend answers, sorted: those declared in :data:`GROUP`
    and those announced in this process."""
    with _lock:
        known = set(_announced)
    return tuple(sorted(known | set(_declared())))


def announced(choice: str) -> ExtraBackend | None:
    """The backend announced for ``choice``, loading its :data:`GROUP` entry point if need be.

    Raises ``TypeError`` when the entry point gives anything but an :class:`ExtraBackend` for
    ``choice``.
    """
    with _lock:
        backend = _announced.get(choice)
    if backend is not None:
        return backend
    declared = _declared().get(choice)
    if declared is None:
        return None
    backend = declared.load()()
    if not isinstance(backend, ExtraBackend) or backend.choice != choice:
        raise TypeError(
            f"the {GROUP!r} entry point {choice!r} ({declared.value}) must return an "
            f"ExtraBackend for host {choice!r}, and returned {backend!r}"
        )
    announce(backend)
    return backend


def start(choice: str) -> str:
    """Start the backend of host choice ``choice``; its device type.

    Raises ``ValueError`` for a choice no backend announced, ``RuntimeError`` from the
    backend when it cannot start.
    """
    backend = announced(choice)
    if backend is None:
        raise ValueError(
            f"no backend is announced for host {choice!r}: the installed distributions "
            f"declare {list(choices()) or 'none'} in the {GROUP!r} entry points (a source "
            "tree on PYTHONPATH declares none: install it, `pip install -e .`)"
        )
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

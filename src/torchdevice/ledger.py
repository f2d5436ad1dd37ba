"""The one record of everything torchdevice changes outside itself, and the one undo.

Every installer (the ``torch.load``/``torch.Generator`` wrappers, the autocast rewrite, the
``torch.cuda``/``torch.mps`` facades and their ``sys.modules`` entries, the fallback's
``warnings.showwarning``, the thread hooks, environment variables) makes its change
through this module, which notes what was there before. :func:`undo` puts things back
newest first, so two changes of the same attribute unwind to the value before the first;
``disable()`` calls it with no group and is then left with an empty ledger. Nothing else
undoes anything: a reconfiguration that drops one facade (the host changed) undoes that
facade's group here too.

Each change belongs to a *group* (a short name such as ``"cuda facade"``), which is what
installers ask about (:func:`has`) to stay idempotent. The test suite's pristine check
reads :func:`changes`: a change recorded and never undone shows up there. Each installer
also declares the :class:`Spot` objects it changes (``torchdevice.patches.INSTALL_ORDER``),
described as its changes are here, so the pristine check reads every one of them back.

This module imports nothing from torchdevice: every layer may record through it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "ABSENT",
    "Change",
    "Spot",
    "attr_spot",
    "changes",
    "env_spot",
    "has",
    "hook",
    "item_spot",
    "set_attr",
    "set_env",
    "set_item",
    "undo",
]


class _Absent:
    """What stood where nothing stood: an undo removes the name again."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Final[Any] = _Absent()


@dataclass(frozen=True, slots=True)
class Change:
    """One recorded change: its group, what it touched (for messages), and its undo."""

    group: str
    what: str
    undo: Callable[[], None]


@dataclass(frozen=True, slots=True)
class Spot:
    """A spot an installer changes: ``what`` as its :class:`Change` says, and ``read``,
    which returns what is there now (``None``: nothing outside torchdevice to read back,
    the ledger is the only record). ("Place" is the runtime's word for deciding where a
    device request goes: :meth:`torchdevice.runtime.Runtime.place`.)"""

    what: str
    read: Callable[[], object] | None


_lock = threading.RLock()
_changes: list[Change] = []


def _describe(owner: object) -> str:
    return str(getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None) or owner)


def attr_spot(owner: object, name: str) -> Spot:
    """The spot :func:`set_attr` changes: ``owner.name`` in the owner's own ``__dict__``."""

    def read() -> object:
        namespace = getattr(owner, "__dict__", None)
        return namespace.get(name, ABSENT) if namespace is not None else getattr(owner, name)

    return Spot(f"{_describe(owner)}.{name}", read)


def item_spot(mapping: MutableMapping[str, Any], key: str) -> Spot:
    """The spot :func:`set_item` changes: ``mapping[key]``."""
    return Spot(f"[{key!r}]", lambda: mapping.get(key, ABSENT))


def env_spot(name: str) -> Spot:
    """The spot :func:`set_env` changes: the environment variable ``name``."""
    return Spot(f"${name}", lambda: os.environ.get(name))


def set_attr(group: str, owner: object, name: str, value: Any) -> None:
    """Set ``owner.name = value``, remembering the value it had in its own ``__dict__``.

    An attribute that was inherited or absent is removed again on undo, so the owner ends
    exactly as it was (``vars(owner)`` unchanged).
    """
    namespace = getattr(owner, "__dict__", None)
    previous = namespace.get(name, ABSENT) if namespace is not None else getattr(owner, name)

    def restore() -> None:
        if previous is ABSENT:
            if name in vars(owner):
                delattr(owner, name)
        else:
            setattr(owner, name, previous)

    with _lock:
        setattr(owner, name, value)
        _changes.append(Change(group, f"{_describe(owner)}.{name}", restore))


def set_item(group: str, mapping: MutableMapping[str, Any], key: str, value: Any) -> None:
    """Set ``mapping[key] = value`` (``sys.modules`` entries), remembering what was there."""
    previous = mapping.get(key, ABSENT)

    def restore() -> None:
        if previous is ABSENT:
            mapping.pop(key, None)
        else:
            mapping[key] = previous

    with _lock:
        mapping[key] = value
        _changes.append(Change(group, f"[{key!r}]", restore))


def set_env(group: str, name: str, value: str) -> None:
    """Set the environment variable ``name`` (unset again on undo if it was unset)."""
    previous = os.environ.get(name)

    def restore() -> None:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous

    with _lock:
        os.environ[name] = value
        _changes.append(Change(group, f"${name}", restore))


def hook(group: str, what: str, undo: Callable[[], None]) -> None:
    """Record a change made by other means (a profile hook, a cache) and how to undo it."""
    with _lock:
        _changes.append(Change(group, what, undo))


def has(group: str) -> bool:
    """Whether a change of ``group`` is in place now."""
    with _lock:
        return any(change.group == group for change in _changes)


def changes() -> list[Change]:
    """The changes in place now, oldest first."""
    with _lock:
        return list(_changes)


def undo(group: str | None = None) -> None:
    """Undo the changes of ``group`` (all of them when ``None``), newest first.

    Each change leaves the ledger before its undo runs, so an undo that fails is not
    retried by the next call; the remaining changes are still undone and the first
    error is raised at the end.
    """
    with _lock:
        error: BaseException | None = None
        for index in range(len(_changes) - 1, -1, -1):
            change = _changes[index]
            if group is not None and change.group != group:
                continue
            del _changes[index]
            try:
                change.undo()
            except BaseException as exc:  # keep undoing; the first error is raised below
                error = error or exc
        if error is not None:
            raise error

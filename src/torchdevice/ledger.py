"""The one record of everything torchdevice changes outside itself, and the one undo.

Every installer (the ``torch.load``/``torch.Generator`` wrappers, the autocast rewrite, the
``torch.cuda``/``torch.mps`` facades and their ``sys.modules`` keys, the fallback's
``warnings.showwarning``, the thread hooks, environment variables) makes its change
through this module, which notes what was there before. :func:`undo` puts things back
newest first, so two changes of the same attribute unwind to the value before the first;
``disable()`` calls it with no group and leaves no change of an activation. Nothing else
undoes anything: a reconfiguration that drops one facade (the host changed) undoes that
facade's group here too.

Each change belongs to a *group* (a short name such as ``"cuda facade"``), which is what
installers ask about (:func:`has`) to stay idempotent. The test suite's pristine check
reads :func:`changes`: a change recorded and never undone shows up there. Each installer
also declares the :class:`Spot` objects it changes (``torchdevice.patches.INSTALL_ORDER``),
described as its changes are here, so the pristine check reads every one of them back.

Each change also has a *lifetime*: :data:`ACTIVATION` (the default) for what an
activation changes, undone by ``disable()``; a longer one for a tool that switches
redirection on and off inside its own run, such as the pytest plugin, whose variables for
child processes must outlive a ``torchdevice_native`` test's ``disable()`` and leave at the
end of the session (:func:`undo` with that lifetime). A partial undo (one group, one
lifetime) may take out a change that a newer one of the same spot covers; the spot then
keeps the newer value, and the newer change takes over what to put back: lifetimes and
groups unwind in any order to what stood there before the first change.

This module imports nothing from torchdevice: every layer may record through it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, Final

__all__ = [
    "ABSENT",
    "ACTIVATION",
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


#: The lifetime of an activation's changes: ``disable()`` undoes them.
ACTIVATION: Final = "activation"


@dataclass(frozen=True, slots=True)
class Change:
    """One recorded change: its group, what it touched (for messages), its lifetime, and
    ``put``, which puts ``before`` back.

    A change of a value (:func:`set_attr`, :func:`set_item`, :func:`set_env`) has a
    ``key`` naming the spot by identity and holds what stood there before; a
    :func:`hook` has neither (``put`` ignores its argument)."""

    group: str
    what: str
    lifetime: str
    put: Callable[[Any], None]
    before: Any = None
    key: Hashable | None = None

    def undo(self) -> None:
        """Put back what stood there before."""
        self.put(self.before)


@dataclass(frozen=True, slots=True)
class Spot:
    """A spot an installer changes: ``what`` as its :class:`Change` says, and ``read``,
    which returns what is there now (``None``: nothing outside torchdevice to read back,
    the ledger is the only record). ("Place" is the runtime's word for deciding where a
    device request goes: :meth:`torchdevice.redirecting.runtime.Runtime.place`.)"""

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


def set_attr(group: str, owner: object, name: str, value: Any, lifetime: str = ACTIVATION) -> None:
    """Set ``owner.name = value``, remembering the value it had in its own ``__dict__``.

    An attribute that was inherited or absent is removed again on undo, so the owner ends
    exactly as it was (``vars(owner)`` unchanged).
    """

    def put(previous: Any) -> None:
        if previous is ABSENT:
            if name in vars(owner):
                delattr(owner, name)
        else:
            setattr(owner, name, previous)

    with _lock:
        namespace = getattr(owner, "__dict__", None)
        before = namespace.get(name, ABSENT) if namespace is not None else getattr(owner, name)
        setattr(owner, name, value)
        what = f"{_describe(owner)}.{name}"
        _changes.append(Change(group, what, lifetime, put, before, ("attr", id(owner), name)))


def set_item(
    group: str, mapping: MutableMapping[str, Any], key: str, value: Any, lifetime: str = ACTIVATION
) -> None:
    """Set ``mapping[key] = value`` (``sys.modules`` keys), remembering what was there."""

    def put(previous: Any) -> None:
        if previous is ABSENT:
            mapping.pop(key, None)
        else:
            mapping[key] = previous

    with _lock:
        before = mapping.get(key, ABSENT)
        mapping[key] = value
        _changes.append(
            Change(group, f"[{key!r}]", lifetime, put, before, ("item", id(mapping), key))
        )


def set_env(group: str, name: str, value: str, lifetime: str = ACTIVATION) -> None:
    """Set the environment variable ``name`` (unset again on undo if it was unset)."""

    def put(previous: str | None) -> None:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous

    with _lock:
        before = os.environ.get(name)
        os.environ[name] = value
        _changes.append(Change(group, f"${name}", lifetime, put, before, ("env", name)))


def hook(group: str, what: str, undo: Callable[[], None], lifetime: str = ACTIVATION) -> None:
    """Record a change made by other means (a profile hook, a cache) and how to undo it."""
    with _lock:
        _changes.append(Change(group, what, lifetime, lambda _: undo()))


def has(group: str) -> bool:
    """Whether a change of ``group`` is in place now."""
    with _lock:
        return any(change.group == group for change in _changes)


def changes() -> list[Change]:
    """The changes in place now, oldest first."""
    with _lock:
        return list(_changes)


def undo(group: str | None = None, lifetime: str = ACTIVATION) -> None:
    """Undo the changes of ``lifetime`` (of ``group`` only, when given), newest first.

    A change that a newer one of the same spot still covers is not put back: the newer
    change takes over its ``before``, so the spot keeps the newer value until that change
    is undone in turn, and then returns to what stood there first.

    Each change leaves the ledger before its undo runs, so an undo that fails is not
    retried by the next call; the remaining changes are still undone and the first
    error is raised at the end.
    """
    with _lock:
        error: BaseException | None = None
        for index in range(len(_changes) - 1, -1, -1):
            change = _changes[index]
            if change.lifetime != lifetime or group not in (None, change.group):
                continue
            del _changes[index]
            cover = _cover(index, change.key)
            if cover is not None:  # the newer change now puts back what this one would
                _changes[cover] = replace(_changes[cover], before=change.before)
                continue
            try:
                change.undo()
            except BaseException as exc:  # keep undoing; the first error is raised below
                error = error or exc
        if error is not None:
            raise error


def _cover(start: int, key: Hashable | None) -> int | None:
    """The index of the oldest change from ``start`` on of the spot ``key``, if any."""
    if key is None:
        return None
    for index in range(start, len(_changes)):
        if _changes[index].key == key:
            return index
    return None

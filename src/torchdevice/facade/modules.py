"""Module objects that stand in for torch modules, and putting them in place exactly.

A :class:`FacadeModule` holds the functions a facade answers itself and looks every other
name up on the real module at access time, so submodules, constants and exceptions keep
working. :func:`install_module` swaps facades into ``sys.modules`` and onto their parent modules
through the :mod:`~torchdevice.ledger`, which puts back exactly what was there.

:func:`rebind_imported` repairs modules imported while a facade was in place: torch's
compiler builds tables of ``torch.cuda`` functions at import (``torch._dynamo``'s
constant-folding lists, its device interfaces), and a first ``torch.compile`` under the
facade would otherwise leave facade functions in them after ``disable()``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from torchdevice import ledger

__all__ = ["FacadeModule", "facade_objects", "install_module", "rebind_imported"]

_MISSING: Any = object()


class FacadeModule(types.ModuleType):
    """A module answering ``namespace`` itself and everything else from ``real``.

    ``dynamic`` names are computed on each access (values that depend on the activation);
    ``fallback`` builds the value of any other public name when there is no real module.
    """

    def __init__(
        self,
        name: str,
        real: types.ModuleType | None,
        namespace: Mapping[str, Any],
        dynamic: Mapping[str, Callable[[], Any]] | None = None,
        fallback: Callable[[str], Any] | None = None,
    ) -> None:
        super().__init__(name, real.__doc__ if real is not None else None)
        if real is not None:
            for attribute in ("__file__", "__path__", "__spec__", "__all__"):
                if attribute in real.__dict__:
                    self.__dict__[attribute] = real.__dict__[attribute]
        self.__dict__["__package__"] = (
            name if real is not None and hasattr(real, "__path__") else name.rpartition(".")[0]
        )
        self.__dict__["__torchdevice_real__"] = real
        self.__dict__["__torchdevice_dynamic__"] = dict(dynamic or {})
        self.__dict__["__torchdevice_fallback__"] = fallback
        self.__dict__.update(namespace)

    def __getattr__(self, name: str) -> Any:
        dynamic = self.__dict__["__torchdevice_dynamic__"]
        if name in dynamic:
            return dynamic[name]()
        real = self.__dict__["__torchdevice_real__"]
        if real is not None:
            return getattr(real, name)
        fallback = self.__dict__["__torchdevice_fallback__"]
        if fallback is not None and not name.startswith("__"):
            return fallback(name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


def facade_objects(module: FacadeModule) -> dict[int, Any]:
    """``id(facade object) -> real object`` for every name both modules define."""
    real = module.__dict__["__torchdevice_real__"]
    mapping: dict[int, Any] = {}
    if real is None:
        return mapping
    mapping[id(module)] = real
    for name, value in module.__dict__.items():
        if name.startswith("__"):
            continue
        original = real.__dict__.get(name, _MISSING)
        if original is not _MISSING and original is not value:
            mapping[id(value)] = original
    return mapping


def install_module(
    group: str,
    key: str,
    module: types.ModuleType,
    parent: types.ModuleType | None = None,
    attribute: str | None = None,
) -> None:
    """Make ``module`` ``sys.modules[key]`` (and ``parent.attribute``), in the ledger.

    The ledger puts back exactly what was there, "nothing" included, newest first.
    """
    if parent is not None and attribute is not None:
        ledger.set_attr(group, parent, attribute, module)
    ledger.set_item(group, sys.modules, key, module)


def _swap(value: Any, mapping: Mapping[int, Any]) -> Any:
    return mapping.get(id(value), value)


def _rebind_value(value: Any, mapping: Mapping[int, Any]) -> tuple[bool, Any]:
    """``(changed, new value)`` for one module-level value; containers fixed in place."""
    if id(value) in mapping:
        return True, mapping[id(value)]
    if isinstance(value, list):
        if any(id(item) in mapping for item in value):
            value[:] = [_swap(item, mapping) for item in value]
        return False, value
    if isinstance(value, dict):
        if any(id(k) in mapping or id(v) in mapping for k, v in value.items()):
            items = [(_swap(k, mapping), _swap(v, mapping)) for k, v in value.items()]
            value.clear()
            value.update(items)
        return False, value
    if isinstance(value, set):
        if any(id(item) in mapping for item in value):
            members = {_swap(item, mapping) for item in value}
            value.clear()
            value.update(members)
        return False, value
    if isinstance(value, (tuple, frozenset)) and any(id(item) in mapping for item in value):
        return True, type(value)(_swap(item, mapping) for item in value)
    return False, value


def _rebind_class(cls: type, mapping: Mapping[int, Any]) -> None:
    for name, value in list(cls.__dict__.items()):
        if isinstance(value, staticmethod) and id(value.__func__) in mapping:
            setattr(cls, name, staticmethod(mapping[id(value.__func__)]))
        elif id(value) in mapping:
            setattr(cls, name, mapping[id(value)])


def rebind_imported(module_names: Iterable[str], mapping: Mapping[int, Any]) -> None:
    """Replace facade objects captured at import by ``module_names`` with the real ones.

    Looks at each module's globals, the lists, dicts, sets and tuples among them, and the
    attributes of classes the module defines.
    """
    for module_name in module_names:
        module = sys.modules.get(module_name)
        if module is None or isinstance(module, FacadeModule):
            continue
        for name, value in list(vars(module).items()):
            if name.startswith("__"):
                continue
            replaced, new = _rebind_value(value, mapping)
            if replaced:
                setattr(module, name, new)
            if isinstance(value, type) and getattr(value, "__module__", None) == module_name:
                _rebind_class(value, mapping)

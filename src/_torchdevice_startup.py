"""Redirect every Python child of a redirected run: the hook behind ``torchdevice-activate.pth``.

torchdevice ships ``torchdevice-activate.pth`` at the root of ``site-packages`` (the way
coverage.py measures subprocesses). Its one line runs at every interpreter start::

    import os; 'ACTIVATE_TORCH_DEVICE' not in os.environ and ... or __import__(...).install()

so a process whose environment does not ask for torchdevice pays two dictionary lookups
and no import. When it does ask (``python -m torchdevice`` and ``torchdevice.enable()``
export ``ACTIVATE_TORCH_DEVICE=1`` for their children), this module is imported and puts a
finder on :data:`sys.meta_path` that waits for ``import torch``: right after torch finishes
importing, it imports :mod:`torchdevice`, which enables itself from the environment (and
reads the settings that travelled there: host, keep_cpu, fallback, log level...). A process
that never imports torch pays nothing more than this module.

It lives outside the :mod:`torchdevice` package on purpose: importing anything inside the
package runs ``torchdevice/__init__.py``, which enables at once (importing torch) when the
environment asks for it, and raises on an invalid ``ACTIVATE_TORCH_DEVICE`` — neither may
happen at interpreter start. An invalid value is left to that import: when the process
imports torch, it ends with one line naming the variable and what it accepts (status 2,
as a usage error), not a traceback through the import machinery; processes that never
import torch are unaffected.

This module imports nothing beyond :mod:`sys` and :mod:`os` (both loaded at start-up):
not even :mod:`typing`, which its annotations only name.
"""

import os
import sys

# Neither typing nor __future__ is loaded at start-up: annotations are strings, and mypy
# reads the name TYPE_CHECKING whatever defines it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import ModuleType
    from typing import Any

__all__ = ["FALSE_WORDS", "PTH_NAME", "TorchImportHook", "install", "requested"]

#: The name of the shipped ``.pth`` file (``src/torchdevice-activate.pth`` in the source).
PTH_NAME = "torchdevice-activate.pth"


#: The words that switch a boolean variable off: a copy of
#: :data:`torchdevice.environment.FALSE_WORDS` (this module may not import the package).
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


def requested(environ: "Mapping[str, str] | None" = None) -> bool:
    """Whether the environment may ask for torchdevice: the hook is worth installing.

    Looser than :func:`torchdevice.environment.activation_requested` on purpose: any value
    of ``ACTIVATE_TORCH_DEVICE`` or ``TORCH_ALLOW_REDIRECTS`` but an "off" one (``0``,
    ``false``, ``no``, ``off``, empty; any case) counts as asking, an invalid one included,
    so that the import of torchdevice after torch reports it (at interpreter start, an
    error would break every Python process).
    """
    environ = os.environ if environ is None else environ
    return any(
        environ.get(variable, "").strip().lower() not in FALSE_WORDS
        for variable in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
    )


class _ActivatingLoader:
    """torch's own loader, which imports torchdevice once torch's module has executed.

    Everything but :meth:`exec_module` is the wrapped loader's (resource readers,
    ``get_filename``...), and the module gets its real loader back afterwards, so nothing
    in torch can tell the difference.
    """

    def __init__(self, loader: "Any") -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> "Any":
        return getattr(self._loader, name)

    def create_module(self, spec: "Any") -> "ModuleType | None":
        create: Any = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: "ModuleType") -> None:
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if module.__spec__ is not None:
                module.__spec__.loader = self._loader
        # torch is complete here (only importlib's bookkeeping is left): enabling now
        # means the importing code's next line already runs redirected.
        _import_torchdevice()


def _import_torchdevice() -> None:
    """Import torchdevice, which enables itself; a bad activation variable ends the process
    with one line saying so (status 2) instead of a traceback through ``import torch``."""
    try:
        __import__("torchdevice")
    except Exception as error:
        if type(error).__name__ != "SettingsError":  # the package cannot be imported to check
            raise
        sys.stderr.write(f"torchdevice: error: {error}\n")
        raise SystemExit(2) from None


class TorchImportHook:
    """A :data:`sys.meta_path` finder that fires once, for the top-level ``torch`` import.

    It asks the finders after it for torch's spec and hands it back with an
    :class:`_ActivatingLoader`; then it leaves :data:`sys.meta_path`, so no other import
    ever goes through it.
    """

    def __init__(self) -> None:
        self._searching = False

    def find_spec(
        self,
        fullname: str,
        path: "Sequence[str] | None" = None,
        target: "ModuleType | None" = None,
    ) -> "Any":
        if fullname != "torch" or self._searching:
            return None
        self._searching = True
        try:
            spec = None
            for finder in sys.meta_path:
                find: Any = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._searching = False
        self.remove()
        if spec is None or spec.loader is None:
            return None  # torch is not installed: let the import fail as it would
        spec.loader = _ActivatingLoader(spec.loader)
        return spec

    def remove(self) -> None:
        """Leave :data:`sys.meta_path` (idempotent)."""
        while self in sys.meta_path:
            sys.meta_path.remove(self)


def install(environ: "Mapping[str, str] | None" = None) -> bool:
    """Arrange for torchdevice to enable itself when torch is imported; ``True`` if it will.

    Called by the ``.pth`` line when an activation variable is present. Nothing happens
    unless :func:`requested`; with torch already imported, torchdevice is imported now;
    otherwise one :class:`TorchImportHook` goes first on :data:`sys.meta_path` (never two).
    """
    if not requested(environ):
        return False
    if "torch" in sys.modules:
        _import_torchdevice()
        return True
    if not any(isinstance(finder, TorchImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, TorchImportHook())
    return True

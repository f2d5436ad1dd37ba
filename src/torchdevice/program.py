"""What the program is written for, CUDA or MPS, read from what the program itself says.

A CPU-only host stands for one accelerator, and the facades tell one story about it: a
CUDA machine (``torch.cuda`` available, no MPS) or an Apple one (MPS available). Which
one is the program's: a script written for CUDA must hear "no MPS" from every library
that asks, and a script written for MPS "yes", whichever library asks first. So the
answer is read once per activation from the program, never from the code that happens
to ask (transformers asks at import, from code that names no accelerator):

1. the ``written_for`` option (``TORCHDEVICE_WRITTEN_FOR``, ``--written-for``): the user
   says it;
2. else the program's own code: the script ``python -m torchdevice`` runs (or the module
   of ``-m``), the module that calls ``enable()``/``redirect()``, and for an activation
   from the environment or the pytest plugin, ``__main__`` (``python -c`` code included).

A program that names CUDA anywhere (``torch.cuda``, ``"cuda:0"``,
``is_cuda_available``, ``CUDAAccelerator``...) is CUDA code, as on a CUDA machine even
when it also considers MPS; one that names MPS and no CUDA is MPS code; one that names
neither (device-agnostic code asking ``torch.accelerator``) is CUDA code, the accelerator
a CPU-only host stands for. Reading a module is compiling its source once (cached per
file): only names and constants are looked at, nothing runs.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import io
import os
import sys
import types
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "WRITTEN_FOR",
    "Reading",
    "WrittenFor",
    "of_caller",
    "of_code",
    "of_file",
    "of_main",
    "of_module",
    "of_script",
]

WrittenFor = Literal["cuda", "mps"]
#: The values the ``written_for`` option takes.
WRITTEN_FOR: tuple[WrittenFor, ...] = ("cuda", "mps")

#: What a program that names no accelerator stands for on a CPU-only host.
_DEFAULT: WrittenFor = "cuda"

#: The frames :func:`of_caller` looks past: torchdevice's own, and the standard library's
#: ``contextlib`` (``with torchdevice.redirect():`` calls ``enable()`` from there).
_PASSED_MODULES = ("torchdevice", "contextlib")


@dataclass(frozen=True)
class Reading:
    """What the program is written for, and where that was read (for the start-up log)."""

    written_for: WrittenFor
    source: str


def _names_cuda(code: types.CodeType) -> bool:
    return any("cuda" in name.lower() for name in code.co_names) or any(
        isinstance(const, str) and (const == "cuda" or const.startswith("cuda:"))
        for const in code.co_consts
    )


def _is_mps_name(name: str) -> bool:
    """``mps``, ``is_torch_mps_available``, ``MPSAccelerator``; not ``dumps``."""
    return any(
        word == "mps" or (word.startswith("mps") and "MPS" in name)
        for word in name.lower().split("_")
    )


def _names_mps(code: types.CodeType) -> bool:
    return any(_is_mps_name(name) for name in code.co_names) or any(
        isinstance(const, str) and (const == "mps" or const.startswith("mps:"))
        for const in code.co_consts
    )


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and every code object nested in it (functions, classes, comprehensions)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_codes(const))
    return found


def of_code(code: types.CodeType, source: str) -> Reading:
    """What the program whose code is ``code`` (a module's, with everything nested in it)
    is written for; ``source`` says where it came from."""
    codes = _codes(code)
    if any(_names_cuda(c) for c in codes):
        return Reading("cuda", f"{source} names CUDA")
    if any(_names_mps(c) for c in codes):
        return Reading("mps", f"{source} names MPS and not CUDA")
    return Reading(_DEFAULT, f"{source} names no accelerator")


@functools.lru_cache(maxsize=64)
def _of_file(path: str, mtime: float) -> Reading | None:
    """Cached per path and modification time: ``enable()`` runs once per test in a suite."""
    try:
        with io.open_code(path) as handle:
            source = handle.read()
        code = compile(source, path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):  # not Python source (a zip app, a .pyc)
        return None
    return of_code(code, path)


def of_file(path: str) -> Reading | None:
    """The reading of the Python source file at ``path`` (``None``: no source there)."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return _of_file(os.path.abspath(path), mtime)


def of_script(path: str) -> Reading:
    """The reading of the script ``python -m torchdevice`` runs: a file, or a directory
    whose ``__main__.py`` runs (a zip application is not read: the default)."""
    found = of_file(os.path.join(path, "__main__.py") if os.path.isdir(path) else path)
    return found if found is not None else Reading(_DEFAULT, f"no Python source in {path}")


def _find(name: str) -> importlib.machinery.ModuleSpec | None:
    """Module ``name``'s spec, found on ``sys.path`` without importing its packages (their
    code runs redirected, after the reading)."""
    spec = None
    path: list[str] | None = None
    for part in name.split("."):
        spec = importlib.machinery.PathFinder.find_spec(part, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    if spec is not None and spec.submodule_search_locations is not None:  # runs __main__
        spec = importlib.machinery.PathFinder.find_spec("__main__", path)
    return spec


def of_module(name: str) -> Reading:
    """The reading of module ``name`` as ``python -m`` runs it (a package's ``__main__``).

    Found on ``sys.path`` without importing anything; a module only another finder knows
    (a zip import, a frozen module) is not read: the default.
    """
    spec = None
    with contextlib.suppress(ImportError, ValueError, OSError):
        spec = _find(name)
    found = None
    if spec is not None and spec.origin is not None and spec.has_location:
        found = of_file(spec.origin)
    return found if found is not None else Reading(_DEFAULT, f"no Python source for {name}")


def _command_code() -> Reading | None:
    """``python -c CODE``: the code is in ``sys.orig_argv``."""
    argv = getattr(sys, "orig_argv", [])
    if "-c" not in argv:
        return None
    at = argv.index("-c")
    if at + 1 >= len(argv):
        return None
    try:
        code = compile(argv[at + 1], "<string>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return of_code(code, "the -c command")


def of_main() -> Reading:
    """The reading of ``__main__``: the script (or ``-c`` code) the interpreter runs."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    found = of_file(path) if isinstance(path, str) else None
    if found is None:
        found = _command_code()
    return found if found is not None else Reading(_DEFAULT, "no program source to read")


def of_caller(frame: types.FrameType | None) -> Reading:
    """The reading of the module of ``frame``, or the first caller above it outside
    torchdevice and ``contextlib``: the module that called ``enable()``/``redirect()``.

    A frame with no source file to read (code given to ``exec``) is read alone, with
    what it calls in its body.
    """
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (isinstance(module, str) and module.split(".")[0] in _PASSED_MODULES):
            break
        frame = frame.f_back
    if frame is None:
        return of_main()
    found = of_file(frame.f_code.co_filename)
    if found is not None:
        return found
    name = frame.f_globals.get("__name__", "?")
    return of_code(frame.f_code, f"module {name}")

"""Build and load the C++ half of the simulated accelerator, on demand and cached.

Why on demand: the C++ pieces (``csrc/``: allocator, host allocator, generator, device guard,
hooks, the common kernel, autocast, the operators Python calls) are what let PyTorch allocate,
copy, serialise and pin on the simulated device, but only a user who asks for the simulated
host needs them. A plain ``pip install torchdevice`` (on a Mac, say) ships the sources and
never compiles them.

Every ``.cpp`` file of ``csrc/`` is compiled with ``torch.utils.cpp_extension`` (a C++
compiler and ``ninja`` needed) into one library, in a directory named after the fingerprint
of the sources, their header and torch, under PyTorch's extension cache
(``TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions``): the first build takes tens of
seconds; later processes load the cached library directly (no compiler, no ninja, no
``cpp_extension`` import), which matters for the many workers of a run. Concurrent builds
(xdist workers) wait on PyTorch's lock in that directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from importlib import resources
from pathlib import Path
from typing import Final

import torch

__all__ = ["NativeBuildError", "library_loaded", "load"]

#: The operator namespace ``csrc/operators.cpp`` registers
#: (``TORCH_LIBRARY(torchdevice_simulated, m)``).
NAMESPACE: Final = "torchdevice_simulated"

_lock = threading.Lock()
_loaded = False


class NativeBuildError(RuntimeError):
    """The C++ half of the simulated accelerator cannot be built on this machine."""


def library_loaded() -> bool:
    """Whether this process has loaded the C++ half."""
    return _loaded


def source_directory() -> Path:
    """The C++ sources shipped in the package (``csrc/``)."""
    return Path(str(resources.files("torchdevice.simulated_mps") / "csrc"))


def sources() -> list[Path]:
    """The ``.cpp`` files compiled together into the library, in a fixed order."""
    return sorted(source_directory().glob("*.cpp"))


def _fingerprint(directory: Path) -> str:
    """What the built library depends on: its sources and header, and the torch it compiles
    against."""
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.[ch]*")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(f"{torch.__version__} {sys.version_info[:2]} {sys.platform}".encode())
    return digest.hexdigest()[:12]


def _cache_root() -> Path:
    """PyTorch's extension cache: ``TORCH_EXTENSIONS_DIR``, else ``torch_extensions`` in the
    user's cache directory."""
    configured = os.environ.get("TORCH_EXTENSIONS_DIR")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "torch_extensions"


def _missing_tools() -> str | None:
    """The build tools this machine lacks, in words, or None when it has them all."""
    from torch.utils import cpp_extension  # noqa: PLC0415 - only when a build is asked for

    compiler = os.environ.get("CXX", "c++")
    missing = []
    if shutil.which(compiler) is None:
        missing.append(f"a C++ compiler ({compiler!r} is not on PATH; set CXX to another)")
    if not cpp_extension.is_ninja_available():
        missing.append("ninja (pip install ninja)")
    return " and ".join(missing) or None


def load(*, verbose: bool = False) -> None:
    """Build (once per source and torch version) and load the C++ half into this process.

    Loading registers the allocator, device guard, hooks and pinned-memory allocator for
    PyTorch's PrivateUse1 device, under whatever name it has or gets. Idempotent. Raises
    :class:`NativeBuildError`, in one line naming what is missing, when the machine cannot
    build it; nothing is registered then.
    """
    global _loaded
    with _lock:
        if _loaded:
            return
        directory_of_sources = source_directory()
        name = f"{NAMESPACE}_{_fingerprint(directory_of_sources)}"
        directory = _cache_root() / name
        built = directory / f"{name}.so"
        if built.exists() and not (directory / "lock").exists():  # no build under way
            torch.ops.load_library(str(built))  # type: ignore[no-untyped-call]  # untyped in torch
            _loaded = True
            return
        _build(sources(), name, directory, verbose=verbose)
        _loaded = True


#: Seconds of one core per C++ file (measured: 8 files, 74-90 s on 2 busy cores, GCC 12),
#: and for the link; with ``ninja``'s parallel jobs they divide by the cores there are.
_SECONDS_PER_FILE: Final = 18
_SECONDS_TO_LINK: Final = 8


def _cores() -> int:
    """The cores this process may run on (a container's share, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        return os.cpu_count() or 1


def _load() -> float | None:
    """The machine's one-minute load average (``None`` where there is none: Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def build_notice(paths: list[Path], directory: Path) -> str:
    """The one line said before the first build, which is otherwise silent for a minute or
    more: what is built, roughly how long it takes here, and where it is cached.

    The estimate is for cores this build has to itself; on a machine busier than it has
    cores (a shared CI runner, parallel jobs) the line says so, since the compile then
    takes a multiple of it (measured: 276 s at a load average of 17 on 2 cores).
    """
    cores = _cores()
    seconds = _SECONDS_PER_FILE * len(paths) / min(cores, len(paths)) + _SECONDS_TO_LINK
    low, high = round(seconds * 0.6 / 10) * 10 or 10, round(seconds * 1.5 / 10) * 10
    load = _load()
    busy = (
        f"; longer here, where the load average is {load:.0f}"
        if load is not None and load > cores
        else ""
    )
    return (
        f"torchdevice: building the simulated MPS device's C++ half ({len(paths)} files, once "
        f"per torch version; about {low}-{high} s on {cores} core(s){busy}) into {directory}"
    )


def _build(paths: list[Path], name: str, directory: Path, *, verbose: bool) -> None:
    """Compile ``paths`` into one library in ``directory`` and load it (``cpp_extension``
    skips the compile when another process finished it meanwhile)."""
    missing = _missing_tools()
    if missing is not None:
        raise NativeBuildError(
            f"the simulated accelerator is compiled from C++ on first use, and this machine "
            f"lacks {missing}"
        )
    from torch.utils import cpp_extension  # noqa: PLC0415 - only when a build is asked for

    directory.mkdir(parents=True, exist_ok=True)
    print(build_notice(paths, directory), file=sys.stderr, flush=True)
    try:
        cpp_extension.load(
            name=name,
            sources=[str(path) for path in paths],
            extra_cflags=["-O1"],  # the C++ half does bookkeeping, not arithmetic
            build_directory=str(directory),
            is_python_module=False,
            verbose=verbose,
        )
    except (OSError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise NativeBuildError(
            f"building the simulated accelerator's C++ half ({paths[0].parent}) failed: {first}"
        ) from error

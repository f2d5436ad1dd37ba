"""Whether torch is compiling, at the cost the per-call paths can pay.

``torch.compiler.is_compiling()`` is ``torch.jit.is_scripting() or`` a module flag, and
``is_scripting()`` is always False in Python code (TorchScript never runs torchdevice's
Python): three Python calls where one will do. Measured with callgrind on the redirected
factory and ``Tensor.to`` paths, that call was several hundred instructions of each
(benchmarks/README.md). The hot paths inline the same test as :func:`is_compiling`::

    if _is_tracing() or _compiler._is_compiling_flag: ...

``_is_tracing`` (``torch.compiler.is_dynamo_compiling``) is what dynamo folds to True while
it traces, so traced code never reads the flag (a read would put a guard on it); eager
code that runs while dynamo compiles or ``torch.export`` traces sees the flag, which torch
holds True for that time. ``tests/test_compiling.py`` checks both agree with torch's.
"""

from __future__ import annotations

import torch

__all__ = ["is_compiling", "is_tracing"]

#: True only in code dynamo traces.
is_tracing = torch.compiler.is_dynamo_compiling
_compiler = torch.compiler
if not hasattr(_compiler, "_is_compiling_flag"):  # pragma: no cover - a torch without it
    raise ImportError(
        "torchdevice needs torch.compiler._is_compiling_flag (torch >= 2.5): "
        f"torch {torch.__version__} has none"
    )


def is_compiling() -> bool:
    """``torch.compiler.is_compiling()``, one call cheaper (see the module docstring)."""
    return is_tracing() or _compiler._is_compiling_flag

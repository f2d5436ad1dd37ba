"""Run a script with a do-nothing ``TorchFunctionMode`` pushed at start-up (no torchdevice).

``torchrun ... _null_mode.py SCRIPT ARGS...``: the control of ``exit_aborts.py`` that tells
what a function mode left on the main thread's stack until exit costs by itself, whatever
torchdevice does inside its mode. The mode stays pushed, as torchdevice's does.
"""

from __future__ import annotations

import runpy
import sys
from typing import Any

from torch.overrides import TorchFunctionMode


class NullMode(TorchFunctionMode):
    """Calls every function unchanged."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        return func(*args, **(kwargs or {}))


NullMode().__enter__()
sys.argv[:] = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")

"""The environment for a child process that must start with torchdevice unconfigured.

Tests that run ``python -m torchdevice`` or a ported script in a child decide themselves
what switches torchdevice on; a ``TORCHDEVICE_*`` or activation variable of the shell that
runs the suite must not decide it for them.
"""

from __future__ import annotations

import os

#: The variables that switch torchdevice on besides the ``TORCHDEVICE_*`` settings.
ACTIVATION = ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without what switches torchdevice on or configures it, plus ``extra``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ACTIVATION and not name.startswith("TORCHDEVICE_")
    }
    return {**env, **extra}

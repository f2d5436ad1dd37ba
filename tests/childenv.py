"""The environment for a child process that must start with torchdevice unconfigured.

Tests that run ``python -m torchdevice`` or a ported script in a child decide themselves
what switches torchdevice on; a ``TORCHDEVICE_*`` or activation variable of the shell that
runs the suite must not decide it for them.
"""

from __future__ import annotations

import os
import sys

#: The variables that switch torchdevice on besides the ``TORCHDEVICE_*`` settings.
ACTIVATION = ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")

#: The tiers the real-program tests run in (conftest.py's ``tier`` fixture), the default
#: first: the function mode, and the entry-points tier (docs/tiers.md).
TIERS = ("mode", "entry-points")
#: The tier the children of the running test use; the ``tier`` fixture sets it.
TIER = ["mode"]


def tier_env() -> dict[str, str]:
    """The variable that puts a child in the running test's tier (none for the default)."""
    return {} if TIER[0] == "mode" else {"TORCHDEVICE_INTERCEPT": TIER[0]}


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without what switches torchdevice on or configures it, plus the
    running test's tier (:func:`tier_env`) and ``extra``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ACTIVATION and not name.startswith("TORCHDEVICE_")
    }
    return {**env, **tier_env(), **extra}


#: Execs its arguments with Ctrl-C's default action, which Python turns into
#: ``KeyboardInterrupt``. A non-interactive shell starts its background jobs with SIGINT
#: ignored (``.ci/run > ci.log &``), every process inherits that, and Python keeps an
#: ignored SIGINT ignored: a child of a suite run from one would never see the Ctrl-C a
#: test sends it, as a program run in the background of a script is meant not to.
_INTERRUPTIBLE = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def interruptible(command: list[str]) -> list[str]:
    """``command`` (starting with the Python to run), started with SIGINT's default action,
    as from a terminal, whatever the disposition the suite itself inherited."""
    return [sys.executable, "-c", _INTERRUPTIBLE, *command]

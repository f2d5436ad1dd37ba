"""The environment variables torchdevice reads, without importing pydantic.

``import torchdevice`` must stay cheap (the import-time budget is 50 ms on top of torch):
deciding whether to enable at import needs only these, so pydantic and the settings model
(:mod:`torchdevice.settings`) load on the first ``enable()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from torchdevice.errors import SettingsError

__all__ = ["ENV_VARS", "activation_requested"]

#: Environment variable -> settings field it fills (variables that only switch torchdevice
#: on at import are read by :func:`activation_requested`).
ENV_VARS: Mapping[str, str] = {
    "TORCHDEVICE_LOG_LEVEL": "log_level",
    "TORCHDEVICE_KEEP_CPU": "keep_cpu",
    "TORCHDEVICE_HOST": "host",
    "TORCHDEVICE_REPORT": "report_path",
    "TORCHDEVICE_FALLBACK": "fallback",
    "TORCHDEVICE_CUDA_AVAILABLE": "cuda_available",
}


def activation_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for redirection from import on.

    ``ACTIVATE_TORCH_DEVICE=1`` or ``TORCH_ALLOW_REDIRECTS=true`` (any case) enable it;
    ``ACTIVATE_TORCH_DEVICE`` set to anything but ``0``/``1``/empty is an error naming it,
    while ``TORCH_ALLOW_REDIRECTS`` with any other value simply leaves torchdevice off.
    """
    environ = os.environ if environ is None else environ
    activate = environ.get("ACTIVATE_TORCH_DEVICE", "").strip()
    if activate not in ("", "0", "1"):
        raise SettingsError(
            f"invalid ACTIVATE_TORCH_DEVICE={activate!r} from the environment: expected '1' "
            "to enable torchdevice at import, or '0'/unset to leave it off"
        )
    allow = environ.get("TORCH_ALLOW_REDIRECTS", "").strip().lower() == "true"
    return activate == "1" or allow

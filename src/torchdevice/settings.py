"""Settings: filled from arguments, then the environment, then defaults; pydantic validates.

Precedence is argument > environment > default. Every value given is validated where it
enters (a pydantic model, :mod:`torchdevice.settings_model`), and an invalid one raises
:class:`~torchdevice.errors.SettingsError` naming its source (``invalid
TORCHDEVICE_LOG_LEVEL='LOUD' from the environment``), as pytest-timeout does.

:class:`Settings` itself is a frozen dataclass: an activation with every setting at its
default validates nothing, so it never imports pydantic, whose import and model build
would add about 6 MiB to every redirected process (issue 12: peak memory).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict

from torchdevice.environment import ENV_VARS, activation_requested
from torchdevice.errors import SettingsError
from torchdevice.host import Host, HostChoice

__all__ = [
    "ENV_VARS", "LogLevel", "Options", "Settings", "activation_requested", "load_settings",
]  # fmt: skip

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class Options(TypedDict, total=False):
    """The keyword options of ``enable()``/``redirect()``: :class:`Settings`' fields.

    Typed so that an editor lists them; each overrides its environment variable, and a bad
    value raises :class:`~torchdevice.errors.SettingsError` listing what is accepted.
    """

    log_level: LogLevel | Literal["debug", "info", "warning", "error"] | None
    keep_cpu: bool
    cpu_override: bool
    host: Host | HostChoice | None
    report_path: str | os.PathLike[str] | None
    fallback: bool
    cuda_available: bool


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything an activation can be configured with (validated by
    :class:`~torchdevice.settings_model.SettingsModel`, which describes each field).

    ``host`` forces the host kind (``"cpu"``, ``"mps"``, ``"cuda"``, ``"simulated-mps"``) or
    takes a :class:`~torchdevice.host.Host`; ``None`` probes the real machine.
    """

    log_level: LogLevel | None = None
    """Level of the 'torchdevice' logger (redirects log at INFO); unset, the application's logging
    configuration decides, as for any library.
    """
    keep_cpu: bool = False
    """Explicit 'cpu' requests stay on the CPU."""
    cpu_override: bool = False
    """Start with the 'cpu:-1' override on."""
    host: Host | HostChoice | None = None
    """Use this host instead of the probed one; only a kind the machine has (the CPU always;
    'simulated-mps' wherever a C++ compiler is; tests inject other hosts as Host objects).
    """
    report_path: Path | None = None
    """Where the launcher writes the migration report (JSON if .json)."""
    fallback: bool = True
    """Rerun on the CPU the ops the accelerator cannot run."""
    cuda_available: bool = True
    """What the facades' availability queries answer while redirecting:
    torch.cuda.is_available()/device_count() off CUDA hosts, and
    torch.backends.mps.is_available()/is_built() and torch.mps.device_count() off MPS hosts.
    Libraries such as Accelerate pick multi-GPU paths and NCCL when CUDA answers true; set it
    false to make them take their CPU/MPS paths instead.
    """


#: The option names, in declaration order.
FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(Settings))


def load_settings(
    options: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Build :class:`Settings` from ``options`` (arguments) over ``environ`` over defaults."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for variable, name in ENV_VARS.items():
        raw = environ.get(variable)
        if raw is not None and raw != "":
            values[name] = raw
            sources[name] = f"{variable}={raw!r} from the environment"
    for name, value in (options or {}).items():
        if name not in FIELDS:
            known = ", ".join(sorted(FIELDS))
            raise TypeError(f"unknown torchdevice option {name!r}; known options: {known}")
        values[name] = value
        sources[name] = f"{name}={value!r} passed as an argument"
    if not values:  # every default: nothing to validate
        return Settings()
    from torchdevice.settings_model import validate  # noqa: PLC0415 - pydantic on demand

    try:
        return Settings(**validate(values))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        name, message = _first_error(exc)
        where = sources.get(name, f"{name}")
        raise SettingsError(f"invalid {where}: {message}") from None


def _first_error(exc: ValueError) -> tuple[str, str]:
    """The field and message of a validation error's first complaint."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        raise exc
    error = errors()[0]
    name = str(error["loc"][0]) if error["loc"] else "?"
    return name, str(error["msg"]).removeprefix("Value error, ")

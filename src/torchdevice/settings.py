"""Settings: one pydantic model, filled from arguments, then the environment, then defaults.

Precedence is argument > environment > default. Every value is validated where it enters,
and an invalid one raises :class:`~torchdevice.errors.SettingsError` naming its source
(``invalid TORCHDEVICE_LOG_LEVEL='LOUD' from the environment``), as pytest-timeout does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from torchdevice.environment import ENV_VARS, activation_requested
from torchdevice.errors import SettingsError
from torchdevice.host import Host, forced_host

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
    host: Host | Literal["cpu", "mps", "cuda"] | None
    report_path: str | os.PathLike[str] | None
    fallback: bool
    cuda_available: bool


class Settings(BaseModel):
    """Everything an activation can be configured with.

    ``host`` forces the host kind (``"cpu"``, ``"mps"``, ``"cuda"``) or takes a
    :class:`~torchdevice.host.Host`; ``None`` probes the real machine.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    log_level: LogLevel | None = Field(
        None,
        description="Level of the 'torchdevice' logger (redirects log at INFO); unset, the "
        "application's logging configuration decides, as for any library.",
    )
    keep_cpu: bool = Field(False, description="Explicit 'cpu' requests stay on the CPU.")
    cpu_override: bool = Field(False, description="Start with the 'cpu:-1' override on.")
    host: Host | Literal["cpu", "mps", "cuda"] | None = Field(
        None,
        description="Use this host instead of the probed one; only a kind the machine has "
        "(the CPU always; tests inject simulated hosts as Host objects).",
    )
    report_path: Path | None = Field(
        None, description="Where the launcher writes the migration report (JSON if .json)."
    )
    fallback: bool = Field(True, description="Rerun on the CPU the ops the accelerator cannot run.")
    cuda_available: bool = Field(
        True,
        description="What the facades' availability queries answer while redirecting: "
        "torch.cuda.is_available()/device_count() off CUDA hosts, and "
        "torch.backends.mps.is_available()/is_built() and torch.mps.device_count() off MPS "
        "hosts. Libraries such as Accelerate pick multi-GPU paths and NCCL when CUDA "
        "answers true; set it false to make them take their CPU/MPS paths instead.",
    )

    @field_validator("host")
    @classmethod
    def _machine_has_it(cls, value: object) -> object:
        """A forced host kind the machine cannot be is refused where it is given."""
        if value in ("cpu", "mps", "cuda"):
            forced_host(value)  # raises ValueError naming what the machine has
        return value

    @field_validator("host", mode="before")
    @classmethod
    def _a_known_kind(cls, value: object) -> object:
        """A host named by a string must be a host kind (the message lists them)."""
        if isinstance(value, str) and value not in ("cpu", "mps", "cuda"):
            raise ValueError("expected 'cpu', 'mps' or 'cuda'")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


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
        if name not in Settings.model_fields:
            known = ", ".join(sorted(Settings.model_fields))
            raise TypeError(f"unknown torchdevice option {name!r}; known options: {known}")
        values[name] = value
        sources[name] = f"{name}={value!r} passed as an argument"
    try:
        return Settings(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else "?"
        where = sources.get(name, f"{name}")
        message = str(error["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"invalid {where}: {message}") from None

"""The pydantic model that validates :class:`~torchdevice.settings.Settings`' values.

Imported only when an activation is given a value (an argument or an environment
variable): :func:`~torchdevice.settings.load_settings` builds the plain dataclass from the
validated fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from torchdevice.environment import BOOL_EXPECTED, FALSE_WORDS, TRUE_WORDS
from torchdevice.host import Host, HostChoice, forced_host
from torchdevice.settings import FIELDS, LogLevel

__all__ = ["SettingsModel", "validate"]

_CHOICES = get_args(HostChoice)


class SettingsModel(BaseModel):
    """:class:`~torchdevice.settings.Settings`' fields, with their validation."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    log_level: LogLevel | None = Field(
        None,
        description="Level of the 'torchdevice' logger (redirects log at INFO); unset, the "
        "application's logging configuration decides, as for any library.",
    )
    keep_cpu: bool = Field(False, description="Explicit 'cpu' requests stay on the CPU.")
    cpu_override: bool = Field(False, description="Start with the 'cpu:-1' override on.")
    host: Host | HostChoice | None = Field(
        None,
        description="Use this host instead of the probed one; only a kind the machine has "
        "(the CPU always; 'simulated-mps' wherever a C++ compiler is; tests inject other "
        "hosts as Host objects).",
    )
    report_path: Path | None = Field(
        None,
        description="Where the migration report is written when the process exits (JSON "
        "if .json), whichever way torchdevice was switched on.",
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
        if isinstance(value, str) and value in _CHOICES:
            forced_host(cast("HostChoice", value))  # raises ValueError naming what the machine has
        return value

    @field_validator("host", mode="before")
    @classmethod
    def _a_known_kind(cls, value: object) -> object:
        """A host named by a string must be a host kind (the message lists them)."""
        if isinstance(value, str) and value not in _CHOICES:
            raise ValueError("expected 'cpu', 'mps', 'cuda' or 'simulated-mps'")
        return value

    @field_validator("keep_cpu", "cpu_override", "fallback", "cuda_available", mode="before")
    @classmethod
    def _one_boolean_rule(cls, value: object) -> object:
        """A boolean given as text follows :func:`~torchdevice.environment.parse_bool`'s
        rule (pydantic's own also takes ``t``/``y``...: one rule for every variable)."""
        if isinstance(value, str):
            word = value.strip().lower()
            if word not in TRUE_WORDS and word not in FALSE_WORDS:
                raise ValueError(BOOL_EXPECTED)
            return word in TRUE_WORDS
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


def validate(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` validated and converted, every field filled (raises ``ValidationError``)."""
    model = SettingsModel(**values)
    return {name: getattr(model, name) for name in FIELDS}

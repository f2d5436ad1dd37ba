"""Settings: each declared once here; filled from arguments, then the environment, then
defaults; pydantic validates.

Every setting is one field of :class:`Settings`: its type, its default, its description
(the attribute docstring the API page shows), the environment variable that fills it and
the ``torchdevice run`` flag that sets it (:func:`setting`). What else names the settings
is derived from that field list: :data:`ENV_VARS`, the pydantic model that validates a
given value (:func:`_model`), the command line's flags (:mod:`torchdevice.tools.cli.run`) and
``help(enable)``. :class:`Options`, the keyword arguments' static type, is the one other
spelling (a type checker cannot derive it); ``tests/test_settings.py`` checks it, and the
table in ``docs/getting-started.md``, against the fields.

Precedence is argument > environment > default. Every value given is validated where it
enters, and an invalid one raises :class:`~torchdevice.errors.SettingsError` naming its
source (``invalid TORCHDEVICE_LOG_LEVEL='LOUD' from the environment``), as pytest-timeout
does. An activation with every setting at its default validates nothing, so it never
imports pydantic, whose import and model build would add about 6 MiB to every redirected
process (issue 12: peak memory).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args, get_type_hints

from torchdevice.environment import BOOL_EXPECTED, FALSE_WORDS, TRUE_WORDS, activation_requested
from torchdevice.errors import SettingsError
from torchdevice.host import HOST_CHOICES, Host, HostChoice, forced_host, one_of
from torchdevice.program import WrittenFor

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "ENV_VARS",
    "FIELDS",
    "Intercept",
    "LogLevel",
    "Options",
    "Settings",
    "activation_requested",
    "load_settings",
    "setting",
]

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
#: How device requests are seen (docs/tiers.md): a function mode, or wrappers on the
#: device-taking entry points.
Intercept = Literal["mode", "entry-points"]


def setting(
    *,
    env: str | None = None,
    flag: str | None = None,
    flag_help: str = "",
    values: Sequence[str] | None = None,
) -> Mapping[str, object]:
    """A :class:`Settings` field's metadata: the environment variable that fills it and the
    ``torchdevice run`` flag (with its ``--help`` text) that sets it, if any, and the values
    its flag accepts when its type cannot say (known only at run time: the host choices)."""
    return {"env": env, "flag": flag, "flag_help": flag_help, "values": values}


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
    written_for: WrittenFor | None
    intercept: Intercept


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything an activation can be configured with: one field per setting.

    ``host`` forces the host kind (``"cpu"``, ``"mps"``, ``"cuda"``, or an extra backend's
    choice: :data:`~torchdevice.host.HOST_CHOICES`) or takes a
    :class:`~torchdevice.host.Host`; ``None`` probes the real machine.
    """

    log_level: LogLevel | None = field(
        default=None,
        metadata=setting(
            env="TORCHDEVICE_LOG_LEVEL",
            flag="--log-level",
            flag_help="level of the 'torchdevice' logger (default: left to the application's "
            "logging configuration)",
        ),
    )
    """Level of the 'torchdevice' logger (redirects log at INFO); unset, the application's logging
    configuration decides, as for any library.
    """
    keep_cpu: bool = field(
        default=False,
        metadata=setting(
            env="TORCHDEVICE_KEEP_CPU",
            flag="--keep-cpu",
            flag_help="explicit 'cpu' requests stay on the CPU",
        ),
    )
    """Explicit 'cpu' requests stay on the CPU."""
    cpu_override: bool = field(default=False, metadata=setting())
    """Start with the 'cpu:-1' override on."""
    host: Host | HostChoice | None = field(
        default=None,
        metadata=setting(
            env="TORCHDEVICE_HOST",
            flag="--host",
            flag_help="force the host kind instead of probing: cpu, a device this machine has, "
            "or a backend an installed distribution declares (one of %(choices)s)",
            values=HOST_CHOICES,
        ),
    )
    """Use this host instead of the probed one; only a kind the machine has (the CPU always),
    or the host choice of an extra backend an installed distribution declares in the
    'torchdevice.backends' entry points (torchdevice's own: the simulated MPS host, wherever
    a C++ compiler is); tests inject other hosts as Host objects.
    """
    report_path: Path | None = field(default=None, metadata=setting(env="TORCHDEVICE_REPORT"))
    """Where the migration report is written when the process exits (JSON if .json,
    Markdown if .md, an HTML page if .html, else text), whichever way torchdevice was
    switched on; a path that cannot be written is refused at activation, as the tools
    refuse theirs."""
    fallback: bool = field(default=True, metadata=setting(env="TORCHDEVICE_FALLBACK"))
    """Rerun on the CPU the ops the accelerator cannot run."""
    cuda_available: bool = field(default=True, metadata=setting(env="TORCHDEVICE_CUDA_AVAILABLE"))
    """What the facades' availability queries answer while redirecting:
    torch.cuda.is_available()/device_count() off CUDA hosts, and
    torch.backends.mps.is_available()/is_built() and torch.mps.device_count() off MPS hosts.
    Libraries such as Accelerate pick multi-GPU paths and NCCL when CUDA answers true; set it
    false to make them take their CPU/MPS paths instead.
    """
    written_for: WrittenFor | None = field(
        default=None,
        metadata=setting(
            env="TORCHDEVICE_WRITTEN_FOR",
            flag="--written-for",
            flag_help="the accelerator the program is written for, cuda or mps (default: read "
            "from the script: one that names CUDA is CUDA code, one that names only MPS is MPS "
            "code)",
        ),
    )
    """The accelerator the program is written for, 'cuda' or 'mps': the story the facades tell
    off the machine it stands for (a CUDA machine has no MPS; MPS code finds MPS). Unset, it is
    read once per activation from the program itself: the script the launcher runs, the module
    that calls enable(), else __main__ (torchdevice.program), never from a library that asks.
    """
    intercept: Intercept = field(
        default="mode",
        metadata=setting(
            env="TORCHDEVICE_INTERCEPT",
            flag="--intercept",
            flag_help="how device requests are seen: mode (default: a function mode sees every "
            "torch call) or entry-points (wrappers on the functions that take a device; ops "
            "without one run native: docs/tiers.md)",
        ),
    )
    """How device requests are seen: 'mode' (a TorchFunctionMode sees every torch call, per
    thread: the default) or 'entry-points' (wrappers on the functions that take a device, no
    mode: every other op runs native, at native speed; docs/tiers.md says what differs and
    which to pick)."""


#: The option names, in declaration order.
FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(Settings))
#: Environment variable -> the setting it fills (variables that only switch torchdevice on
#: at import are read by :func:`~torchdevice.environment.activation_requested`).
ENV_VARS: Mapping[str, str] = {
    field.metadata["env"]: field.name
    for field in dataclasses.fields(Settings)
    if field.metadata["env"] is not None
}


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
    if not values:  # every default: nothing to validate, no pydantic
        return Settings()
    try:
        model = _model()(**values)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        name, message = _first_error(exc)
        where = sources.get(name, f"{name}")
        raise SettingsError(f"invalid {where}: {message}") from None
    return Settings(**{name: getattr(model, name) for name in FIELDS})


@functools.cache
def _model() -> type[BaseModel]:
    """The pydantic model validating :class:`Settings`' fields, built from them on the
    first value given (pydantic is imported here, on demand)."""
    from pydantic import ConfigDict, Field, create_model, field_validator  # noqa: PLC0415

    hints = get_type_hints(Settings)
    booleans = [name for name in FIELDS if hints[name] is bool]
    validators: dict[str, Callable[..., Any]] = {
        "_a_known_kind": field_validator("host", mode="before")(_a_known_kind),
        "_machine_has_it": field_validator("host")(_machine_has_it),
        "_writable": field_validator("report_path")(_writable),
        "_one_boolean_rule": field_validator(*booleans, mode="before")(_one_boolean_rule),
        "_upper": field_validator("log_level", mode="before")(_upper),
        "_lower": field_validator("written_for", mode="before")(_lower),
    }
    fields: dict[str, Any] = {
        spec.name: (hints[spec.name], Field(spec.default)) for spec in dataclasses.fields(Settings)
    }
    return create_model(
        "SettingsModel",
        __config__=ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True),
        __validators__=validators,
        **fields,
    )


def _a_known_kind(cls: type, value: object) -> object:
    """A host named by a string must be a host kind or an installed backend's choice (the
    message lists them)."""
    if isinstance(value, str) and value not in HOST_CHOICES:
        raise ValueError(f"expected {one_of(HOST_CHOICES)}")
    return value


def _machine_has_it(cls: type, value: object) -> object:
    """A forced host kind the machine cannot be is refused where it is given."""
    if isinstance(value, str) and value in HOST_CHOICES:
        forced_host(value)  # raises ValueError naming what the machine has
    return value


def _writable(cls: type, value: object) -> object:
    """A report path that cannot be written is refused at activation, not found out at exit
    when the run is over (the tools' one rule: :func:`torchdevice.reporting.file.unwritable`;
    missing parent folders are fine, the writer makes them)."""
    from torchdevice.reporting.file import unwritable  # noqa: PLC0415 - only for a path

    problem = None if value is None else unwritable(Path(str(value)))
    if problem:
        raise ValueError(f"cannot write the migration report there: {problem}")
    return value


def _one_boolean_rule(cls: type, value: object) -> object:
    """A boolean given as text follows :func:`~torchdevice.environment.parse_bool`'s rule
    (pydantic's own also takes ``t``/``y``...: one rule for every variable)."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word not in TRUE_WORDS and word not in FALSE_WORDS:
            raise ValueError(BOOL_EXPECTED)
        return word in TRUE_WORDS
    return value


def _upper(cls: type, value: object) -> object:
    return value.upper() if isinstance(value, str) else value


def _lower(cls: type, value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _first_error(exc: ValueError) -> tuple[str, str]:
    """The field and message of a validation error's first complaint."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        raise exc
    error = errors()[0]
    name = str(error["loc"][0]) if error["loc"] else "?"
    message = str(error["msg"]).removeprefix("Value error, ")
    # pydantic's own words ("Input should be 'mode' or 'entry-points'") in the words of
    # every other message here ("expected 'cpu', 'mps', ...").
    for pattern, replacement in _PYDANTIC_WORDS:
        message = pattern.sub(replacement, message)
    return name, message


#: pydantic's messages for a value of the wrong kind, and how this module says them.
_PYDANTIC_WORDS = (
    (re.compile(r"^Input should be a valid "), "expected a "),
    (re.compile(r"^Input should be "), "expected "),
    (re.compile(r"^Input is not a valid path.*"), "expected a path"),
)


def choices(name: str) -> Sequence[str] | None:
    """The values a setting's flag accepts, from its declaration or its type (``None``: a
    switch)."""
    declared = next(f for f in dataclasses.fields(Settings) if f.name == name).metadata["values"]
    if declared is not None:
        return declared  # type: ignore[no-any-return]
    hint = get_type_hints(Settings)[name]
    literal = [arg for arg in get_args(hint) if get_args(arg)] or [hint]
    values = tuple(value for arg in literal for value in get_args(arg) if isinstance(value, str))
    return values or None

"""The environment variables torchdevice reads, without importing pydantic.

``import torchdevice`` must stay cheap (the import-time budget is 50 ms on top of torch):
deciding whether to enable at import needs only the two variables that switch it on and
the one rule every boolean variable follows. The variables that fill settings are declared
with the settings (:data:`torchdevice.settings.ENV_VARS`), which load on the first
``enable()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from torchdevice.errors import SettingsError

__all__ = ["BOOL_EXPECTED", "FALSE_WORDS", "TRUE_WORDS", "activation_requested", "parse_bool"]


#: The one spelling of a boolean in every variable torchdevice reads (any case, spaces
#: stripped): ``ACTIVATE_TORCH_DEVICE``, ``TORCH_ALLOW_REDIRECTS`` and ``TORCHDEVICE_*``.
TRUE_WORDS: frozenset[str] = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS: frozenset[str] = frozenset({"0", "false", "no", "off"})
#: What an invalid boolean's message says is accepted.
BOOL_EXPECTED = (
    "expected a boolean: 1, true, yes or on to switch it on; 0, false, no or off (or unset) "
    "to leave it off (any case)"
)


def parse_bool(raw: str, where: str) -> bool:
    """``raw`` read as a boolean by the one rule every variable follows.

    ``1``/``true``/``yes``/``on`` are true and ``0``/``false``/``no``/``off`` are false, in
    any case and with surrounding spaces ignored (the words ``strtobool`` and pydantic
    agree on); anything else raises :class:`SettingsError` naming ``where`` the value came
    from, so that a typo never silently means "off". A variable set to the empty string
    counts as unset (its default) before this is asked.
    """
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise SettingsError(f"invalid {where}: {BOOL_EXPECTED}")


def activation_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for redirection from import on.

    ``ACTIVATE_TORCH_DEVICE`` and ``TORCH_ALLOW_REDIRECTS`` are booleans read by
    :func:`parse_bool`: either one true enables; an invalid value of either is a
    :class:`SettingsError` naming it.
    """
    environ = os.environ if environ is None else environ
    requested = False
    for variable in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"):
        raw = environ.get(variable, "")
        if raw.strip():  # empty is unset
            where = f"{variable}={raw!r} from the environment"
            requested = parse_bool(raw, where) or requested
    return requested

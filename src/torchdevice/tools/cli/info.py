"""``torchdevice info [--json]``: the host, the policy as it applies here, the settings and
where each came from, and versions.

:func:`info_dict` gathers it once; the text and the JSON are two renderings of that one
object (:func:`render`, ``json.dumps``), so they cannot tell different stories.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from torchdevice import __version__
from torchdevice.environment import activation_requested
from torchdevice.errors import SettingsError
from torchdevice.host import Host, forced_host, probe_host
from torchdevice.redirecting.policy import decide
from torchdevice.settings import ENV_VARS, FIELDS, load_settings
from torchdevice.tools.cli.summaries import COMMANDS

__all__ = ["TIERS", "effective_settings", "info_dict", "main", "policy_table", "render", "table"]

#: The requests the policy table shows, one row each.
_REQUESTS: tuple[object, ...] = (None, "cpu", "cpu:-1", "mps", "cuda", "cuda:1", 0)

#: What each tier (the ``intercept`` setting) sees, for ``torchdevice info``.
TIERS: Final[dict[str, str]] = {
    "mode": "a function mode sees every torch call, on every covered thread",
    "entry-points": "wrappers on the functions that take a device; every other op runs "
    "native, with no function mode",
}


def policy_table(host: Host) -> list[dict[str, Any]]:
    """The policy as it applies on ``host``: per request, the device, action and reason the
    policy decides, or the error it raises."""
    rows: list[dict[str, Any]] = []
    for request in _REQUESTS:
        try:
            decision = decide(request, host)
        except (RuntimeError, TypeError) as exc:
            rows.append({"request": request, "error": str(exc)})
        else:
            rows.append(
                {
                    "request": request,
                    "device": str(decision.device),
                    "action": decision.action,
                    "reason": decision.reason,
                }
            )
    return rows


def effective_settings(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each setting as an activation here would use it: name, value, and where it came from.

    The environment variables are validated as ``enable()`` validates them (raises
    :class:`~torchdevice.errors.SettingsError` naming the bad one).
    """
    environ = os.environ if environ is None else environ
    loaded = load_settings({}, environ)
    variables = {field: variable for variable, field in ENV_VARS.items()}
    rows = []
    for name in FIELDS:
        variable = variables.get(name)
        raw = environ.get(variable, "") if variable else ""
        value = getattr(loaded, name)
        rows.append(
            {
                "name": name,
                "value": str(value) if isinstance(value, (Path, Host)) else value,
                "variable": variable,
                "source": f"{variable} from the environment" if raw else "default",
            }
        )
    return rows


def info_dict(host: Host, settings: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``torchdevice info`` shows, as one object (``--json`` prints it as is)."""
    import torch  # noqa: PLC0415 - keeps `torchdevice --help` light

    return {
        "torchdevice": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "host": {
            "kind": host.kind,
            "device_count": host.device_count,
            "device_names": list(host.device_names),
        },
        "policy": policy_table(host),
        "settings": settings,
        "enabled_at_import": activation_requested(),
    }


def render(info: Mapping[str, Any]) -> str:
    """``info`` (an :func:`info_dict`) as the text ``torchdevice info`` prints."""
    host = info["host"]
    lines = [
        f"torchdevice {info['torchdevice']}  torch {info['torch']}  "
        f"Python {info['python']}  {info['platform']}",
        f"host: {host['kind']} ({host['device_count']} device(s): "
        f"{', '.join(host['device_names'])})",
        "",
        "policy on this host:",
    ]
    policy = [["request", "device", "action", "reason"]]
    for row in info["policy"]:
        label = "none" if row["request"] is None else repr(row["request"])
        if "error" in row:
            policy.append([label, "error", "", row["error"]])
        else:
            policy.append([label, row["device"], row["action"], row["reason"]])
    lines += table(policy)
    lines += ["", "settings (argument > environment > default; see docs/getting-started.md):"]
    lines += table(
        [
            [row["name"], str("unset" if row["value"] is None else row["value"]), row["source"]]
            for row in info["settings"]
        ]
    )
    lines.append(
        f"  enabled at import: {'yes' if info['enabled_at_import'] else 'no'} "
        "(ACTIVATE_TORCH_DEVICE, TORCH_ALLOW_REDIRECTS)"
    )
    intercept = next(row["value"] for row in info["settings"] if row["name"] == "intercept")
    lines.append(f"  tier: {intercept}: {TIERS[intercept]} (docs/tiers.md)")
    return "\n".join(lines)


def table(rows: list[list[str]], cap: int = 24) -> list[str]:
    """``rows`` as aligned columns, indented by two: each column as wide as its widest cell
    of at most ``cap`` characters; a longer cell (a report path) keeps its line, and the
    rest of its row continues on the next line, in its columns, so that the columns stay
    straight (the last column is never padded)."""
    widths = [
        max((len(row[i]) for row in rows if len(row[i]) <= cap), default=cap)
        for i in range(len(rows[0]) - 1)
    ]
    lines: list[str] = []
    for row in rows:
        line = "  "
        for width, cell in zip(widths, row[:-1], strict=False):
            if len(cell) > width:
                lines.append(line + cell)
                line = " " * (len(line) + width + 1)
            else:
                line += f"{cell:<{width}} "
        lines.append((line + row[-1]).rstrip())
    return lines


def main(argv: Sequence[str], prog: str) -> int:
    """Print what :func:`info_dict` gathers, as text or (``--json``) as JSON."""
    parser = argparse.ArgumentParser(prog=prog, description=COMMANDS["info"].capitalize() + ".")
    parser.add_argument("--json", action="store_true", help="print it as one JSON object")
    ns = parser.parse_args(list(argv))
    try:  # what an activation here would refuse, refused here too: one line, status 2
        rows = effective_settings()
    except SettingsError as exc:
        parser.exit(2, f"{prog}: error: {exc}\n")
    forced = next(row["value"] for row in rows if row["name"] == "host")
    host = forced_host(forced) if forced else probe_host()
    info = info_dict(host, rows)
    print(json.dumps(info, indent=2) if ns.json else render(info))
    return 0

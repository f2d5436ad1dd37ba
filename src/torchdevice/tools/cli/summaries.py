"""The subcommands and their one-line help: ``torchdevice --help`` lists them, and each
subcommand's own ``--help`` opens on its line."""

from __future__ import annotations

from typing import Final

__all__ = ["COMMANDS"]

COMMANDS: Final[dict[str, str]] = {
    "run": "run a script (or -m MODULE) redirected, then print the migration report "
    "(the default: `torchdevice SCRIPT` is `torchdevice run SCRIPT`)",
    "info": "show the host, the policy as it applies here, and versions",
    "compare": "run a test suite natively and redirected and report the difference",
    "port": "write a patch that makes your files device-agnostic, from a migration report "
    "(or by running the script redirected)",
    "combine": "merge JSON migration reports made by separate runs into one",
    "report": "show a JSON migration report as text, a Markdown table or an HTML page",
}

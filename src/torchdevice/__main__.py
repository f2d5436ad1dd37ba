"""``python -m torchdevice SCRIPT [ARGS...]``: run a script redirected."""

from __future__ import annotations

import sys

from torchdevice.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m torchdevice"))

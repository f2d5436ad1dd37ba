"""docs/index.md's file map and the package agree (issue 30): every module is in the table,
once, and every row names a module that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "torchdevice"
INDEX = ROOT / "docs" / "index.md"


def _mapped() -> list[str]:
    text = INDEX.read_text(encoding="utf-8")
    section = text.split("## File map", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \| .+ \|$", section, flags=re.MULTILINE)


def test_the_file_map_lists_every_module_once():
    mapped = _mapped()
    sources = sorted(
        str(path.relative_to(PACKAGE))
        for pattern in ("*.py", "*.cpp")
        for path in PACKAGE.rglob(pattern)
    )
    assert len(mapped) == len(set(mapped)), "a module is listed twice"
    assert sorted(mapped) == sources

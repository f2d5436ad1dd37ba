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


#: "About 400 lines": a module this long needs its sentence in docs/index.md.
LONG = 420


def _said_long() -> set[str]:
    text = INDEX.read_text(encoding="utf-8")
    section = text.split("### Modules over 400 lines", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+)`:", section, flags=re.MULTILINE))


def test_every_long_module_says_why_it_is_one_idea():
    """Issue 30: no module over ~400 lines without a sentence in docs/index.md saying why
    it is one idea, and no sentence left for a module that is no longer long (C++ too)."""
    long = {
        str(path.relative_to(PACKAGE))
        for pattern in ("*.py", "*.cpp")
        for path in PACKAGE.rglob(pattern)
        if len(path.read_text(encoding="utf-8").splitlines()) > LONG
    }
    said = _said_long()
    assert long - said == set(), "long modules without their sentence"
    assert {name for name in said - long if (PACKAGE / name).exists()} == set(), (
        "sentences for modules that are no longer long"
    )
    assert {name for name in said if not (PACKAGE / name).exists()} == set(), "gone modules"

"""The commands the docs show run, as shown, and print what the docs say they print.

Every ``bash``/``console``/``sh``/``shell`` code block of ``README.md`` and ``docs/*.md`` is
a test case. A block is run unless the line right before its fence marks it otherwise:

``<!-- doc-test: skip: REASON -->``
    not run here (a GPU, the network, a placeholder script such as ``train.py``); the
    reason shows as the skip reason, so every block not run says why.
``<!-- doc-test: status: N -->``
    the block's last command ends with status ``N`` (the others with 0).
``<!-- doc-test: output not checked: REASON -->``
    the console block's output is an illustration (another host, another project).
``<!-- doc-test: file: NAME -->``
    on a block of any language: not a command, but a file the page's commands use; it is
    written to ``NAME`` in the page's working directory first.

``bash`` blocks: each line that is not a comment is a command (``# ...`` after it is a
comment). ``console`` blocks: ``$ `` lines are commands and the lines after them their
output: each output line that does not contain ``...`` must match a line the command
printed, with the docs' sample host name (``AMD EPYC``) and temporary paths (``/tmp/``)
standing for any. ``pip install`` is not run (the test runs in the environment already
installed): a ``pip install ... &&`` line runs what follows the ``&&``.

Each page runs in its own directory holding copies of ``examples/`` and
``tests/sample_suite/`` (``git apply`` in the port guide edits the copy), with the
interpreter running the tests first on ``PATH`` (``python``, ``pytest``, ``torchdevice``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(
    r"(?:^<!-- doc-test: (?P<directive>.*?) -->\n)?^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```\s*$",
    re.MULTILINE | re.DOTALL,
)
_SHELLS = {"bash", "console", "sh", "shell"}


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    lang: str
    body: str
    directive: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def value(self, key: str) -> str | None:
        """The text after ``key:`` in the block's directive, if it has that key."""
        prefix = f"{key}:"
        return self.directive[len(prefix) :].strip() if self.directive.startswith(prefix) else None


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    return [
        Block(
            page,
            text.count("\n", 0, match.start("lang")) + 1,
            match["lang"],
            match["body"],
            (match["directive"] or "").strip(),
        )
        for match in _FENCE.finditer(text)
    ]


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """``(command, expected output lines)`` of a shell block."""
    found: list[tuple[str, list[str]]] = []
    for raw in block.body.splitlines():
        if block.lang == "console":
            if raw.startswith("$ "):
                found.append((raw[2:], []))
            elif found and raw.strip():
                found[-1][1].append(raw)
        elif raw.strip() and not raw.lstrip().startswith("#"):
            found.append((raw, []))
    found = [(re.sub(r"^pip install .*? && ", "", command), out) for command, out in found]
    return [(command, out) for command, out in found if not command.startswith("pip install")]


SHELL_BLOCKS = [block for page in PAGES for block in blocks(page) if block.lang in _SHELLS]


def _environment() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
        and not name.startswith(("TORCHDEVICE_", "PYTEST_"))
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _workdir(page: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh directory for a page: the repository's examples and sample suite, and the
    page's ``file:`` blocks."""
    work = tmp_path_factory.mktemp(page.stem)
    shutil.copytree(ROOT / "examples", work / "examples")
    shutil.copytree(ROOT / "tests" / "sample_suite", work / "tests" / "sample_suite")
    for block in blocks(page):
        name = block.value("file")
        if name:
            (work / name).write_text(block.body, encoding="utf-8")
    return work


def _pattern(line: str) -> str:
    escaped = "".join(f"[{c}]" if c in "[]*?" else c for c in line.rstrip())
    return escaped.replace("AMD EPYC", "*").replace("/tmp/", "*/")


def test_every_shell_block_is_found() -> None:
    """The parser sees the blocks (a broken pattern must not make this module vacuous)."""
    assert len(SHELL_BLOCKS) >= 10
    assert any(block.lang == "console" for block in SHELL_BLOCKS)


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda block: block.id)
def test_the_commands_of_a_block_run(block: Block, tmp_path_factory: pytest.TempPathFactory):
    reason = block.value("skip")
    if reason is not None:
        pytest.skip(reason)
    work = _workdir(block.page, tmp_path_factory)
    expected_status = int(block.value("status") or 0)
    runs = commands(block)
    assert runs, f"{block.id}: no command in the block"
    for index, (command, expected) in enumerate(runs):
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=work,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        printed = (done.stdout + done.stderr).splitlines()
        status = expected_status if index == len(runs) - 1 else 0
        assert done.returncode == status, f"{command}\n{done.stdout}\n{done.stderr}"
        if block.value("output not checked") is not None:
            continue
        for line in expected:
            if "..." in line:
                continue
            assert any(fnmatch.fnmatchcase(out, _pattern(line)) for out in printed), (
                f"{block.id}: `{command}` did not print\n{line}\nbut:\n" + "\n".join(printed)
            )

"""One migration report for a run of several processes (issue 10, item 2).

The run is real: a root script (under ``python -m torchdevice``, or enabled in this test
process) starts child interpreters with ``ACTIVATE_TORCH_DEVICE=1`` that redirect at known
lines a known number of times; one ends normally, one raises, one is killed by SIGKILL.
The root's report must hold the sum per call site of every process that ended with its
``atexit`` handlers run, count those processes and their ranks, and leave nothing in the
temporary directory (``TMPDIR`` points each run at a folder of its own).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torchdevice
from torchdevice.host import probe_host
from torchdevice.redirecting.policy import decide
from torchdevice.reporting import parts as report_parts

pytestmark = pytest.mark.slow

#: Where a "cuda" request lands on this host ("cpu:0" on a CPU-only box).
LANDS = str(decide("cuda", probe_host()).device)
CHILD_CALL = 'torch.ones(1, device="cuda")'
ROOT_CALL = 'torch.zeros(1, device="cuda")'

# argv: how many redirected calls to make, then "ok", "raise" or "kill".
CHILD = f"""\
import os
import signal
import sys

import torch

import torchdevice  # ACTIVATE_TORCH_DEVICE=1: enabled here

times, ending = int(sys.argv[1]), sys.argv[2]
for _ in range(times):
    {CHILD_CALL}
if ending == "raise":
    raise RuntimeError("the child fails after redirecting")
if ending == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""

# Starts the children in parallel, waits for them, redirects once itself, prints its own
# (merged) report as JSON, and exits with status 3.
ROOT = f"""\
import os
import subprocess
import sys

import torch

import torchdevice

here = os.path.dirname(os.path.abspath(__file__))
child = os.path.join(here, "child.py")
runs = [
    # (how it is started, environment, calls, ending)
    (["-m", "torchdevice", child], {{"RANK": "0"}}, "2", "ok"),
    ([child], {{"RANK": "1"}}, "3", "raise"),
    ([child], {{}}, "5", "kill"),
]
processes = []
for start, extra, times, ending in runs:
    env = {{**os.environ, "ACTIVATE_TORCH_DEVICE": "1", **extra}}
    processes.append(subprocess.Popen([sys.executable, *start, times, ending], env=env))
try:
    codes = [process.wait(timeout=240) for process in processes]
finally:
    for process in processes:
        process.kill()
        process.wait()
print("CODES", codes)
{ROOT_CALL}
print("REPORT " + torchdevice.report().to_json().replace("\\n", " "))
sys.exit(3)
"""


def _env(tmpdir: Path) -> dict[str, str]:
    """This environment without torchdevice's variables, with ``TMPDIR`` set to ``tmpdir``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS", "RANK", "LOCAL_RANK"}
        and not name.startswith("TORCHDEVICE_")
    }
    env["TMPDIR"] = str(tmpdir)
    return env


def _python(*args: str | Path) -> list[str]:
    """The command line of ``python ARGS`` (the interpreter running the tests)."""
    command = [sys.executable]
    if sys.flags.dev_mode:  # CI runs the suite under -X dev: so do the children
        command += ["-X", "dev"]
    return command + [str(arg) for arg in args]


def _line_of(path: Path, code: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, start=1) if code in line)


def _write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def test_the_root_merges_every_surviving_process_and_leaves_no_file(tmp_path: Path) -> None:
    child = _write(tmp_path / "child.py", CHILD)
    root = _write(tmp_path / "root.py", ROOT)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = _env(tmpdir)
    completed = subprocess.run(
        _python("-m", "torchdevice", root),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"

    # The job ends as the script says; the children ended as they were told to.
    assert completed.returncode == 3, output
    assert "CODES [0, 1, -9]" in completed.stdout, output
    assert "RuntimeError: the child fails after redirecting" in completed.stderr, output

    # The JSON the root asked for: its own call, and the two children that ran atexit
    # (2 + 3 calls at one line); the killed child's 5 calls are lost with it, alone.
    json_line = next(line for line in completed.stdout.splitlines() if line.startswith("REPORT "))
    data = json.loads(json_line.removeprefix("REPORT "))
    rows = {
        (Path(e["file"]).name, e["line"], e["api"], e["requested"], e["decided"]): e["count"]
        for e in data["entries"]
    }
    child_line, root_line = _line_of(child, CHILD_CALL), _line_of(root, ROOT_CALL)
    assert rows == {
        ("child.py", child_line, "torch.ones", "cuda", LANDS): 5,
        ("root.py", root_line, "torch.zeros", "cuda", LANDS): 1,
    }, output
    assert (data["total_calls"], data["processes"], data["ranks"]) == (6, 3, [0, 1])

    # The text the launcher printed at exit: the same merge, printed once (the child that
    # ran under `python -m torchdevice` left the reporting to the root).
    assert completed.stderr.count("torchdevice migration report") == 1, output
    title = next(line for line in completed.stderr.splitlines() if "migration report" in line)
    assert title.endswith(
        "): 6 call(s) redirected at 2 call site(s) in 3 processes (ranks 0, 1)"
    ), output
    assert f"child.py:{child_line} in <module>(): torch.ones(cuda) -> {LANDS} x5" in (
        completed.stderr
    ), output

    # The parts' directory is gone, with the killed child's half-finished state.
    assert list(tmpdir.iterdir()) == [], output


def test_disable_in_the_root_keeps_the_parts_and_removes_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = _write(tmp_path / "child.py", CHILD)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmpdir))  # where the root makes its folder
    assert report_parts.ENV not in os.environ

    torchdevice.enable()
    assert report_parts.role() == "root"
    directory = Path(os.environ[report_parts.ENV])
    assert directory.parent == tmpdir
    assert not directory.exists()  # made by the first part writer (a SIGTERM leaves none)
    env = {**_env(tmpdir), "ACTIVATE_TORCH_DEVICE": "1", "LOCAL_RANK": "1"}
    env[report_parts.ENV] = os.environ[report_parts.ENV]  # inherited, as a child would
    completed = subprocess.run(
        _python(child, "4", "ok"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert directory.stat().st_mode & 0o077 == 0, "the folder is private to its user"
    torch.ones(1, device="cuda")
    merged = torchdevice.report()
    assert (merged.total, merged.processes, merged.ranks) == (5, 2, (1,))

    torchdevice.disable()
    assert report_parts.ENV not in os.environ
    assert list(tmpdir.iterdir()) == []
    after = torchdevice.report()  # the part was read before the folder went
    assert [(e.site.filename, e.count) for e in after.entries] == [
        (str(child), 4),
        (__file__, 1),
    ]
    assert after.processes == 2

    torchdevice.reset_report()
    assert (torchdevice.report().total, torchdevice.report().processes) == (0, 1)

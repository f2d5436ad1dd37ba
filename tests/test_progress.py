"""Progress where runs are long (issue 36 item 5): the simulated device's first C++ build
says what it builds and roughly how long it takes, once, before it starts; ``torchdevice
compare`` shows how long is left. Both in child processes, as a user sees them."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from childenv import clean_env
from torchdevice.simulated_mps import native

pytestmark = pytest.mark.slow

#: A build in a child whose compile step is a stand-in that says when it starts: what is
#: checked is what the user reads around the build, not the compiler (a real cold build
#: takes a minute or more; the docs give the one measured by hand).
_BUILD = """\
import sys
from torch.utils import cpp_extension
from torchdevice.simulated_mps import native

def compile_step(**kwargs):
    print("COMPILING " + kwargs["name"], file=sys.stderr, flush=True)

cpp_extension.load = compile_step
native.load()
native.load()  # built once per process: nothing more to say
print("LOADED", native.library_loaded())
"""


def test_the_first_build_says_what_it_builds_and_how_long_once(tmp_path: Path) -> None:
    cache = tmp_path / "extensions"
    done = subprocess.run(
        [sys.executable, "-c", _BUILD],
        env=clean_env(TORCH_EXTENSIONS_DIR=str(cache)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LOADED True"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    notice, compiling = lines
    assert compiling.startswith("COMPILING torchdevice_simulated_")  # after the notice
    files = len(native.sources())
    match = re.fullmatch(
        rf"torchdevice: building the simulated MPS device's C\+\+ half \({files} files, once "
        r"per torch version; about (\d+)-(\d+) s on (\d+) core\(s\)"
        r"(; longer here, where the load average is \d+)?\) into (.+)",
        notice,
    )
    assert match, notice
    low, high, cores = (int(match.group(i)) for i in (1, 2, 3))
    assert 0 < low < high <= 600
    assert cores == len(os.sched_getaffinity(0))
    assert Path(match.group(5)).parent == cache


@pytest.mark.parametrize(("cores", "low", "high"), [(1, 90, 230), (2, 50, 120), (64, 20, 40)])
def test_the_estimate_divides_by_the_cores(monkeypatch, tmp_path, cores, low, high) -> None:
    monkeypatch.setattr(native, "_cores", lambda: cores)
    monkeypatch.setattr(native, "_load", lambda: 0.5)
    sources = [tmp_path / f"{i}.cpp" for i in range(8)]
    notice = native.build_notice(sources, tmp_path)
    assert f"about {low}-{high} s on {cores} core(s)) into {tmp_path}" in notice


def test_a_busy_machine_is_said_to_take_longer(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(native, "_cores", lambda: 2)
    monkeypatch.setattr(native, "_load", lambda: 17.2)
    notice = native.build_notice([tmp_path / "a.cpp", tmp_path / "b.cpp"], tmp_path)
    assert "on 2 core(s); longer here, where the load average is 17) into" in notice


_SUITE = """\
import time

import pytest


@pytest.mark.parametrize("n", range(4))
def test_takes_a_while(n):
    time.sleep(0.5)
"""


def _read_terminal(master: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError as error:  # the child closed the terminal
            if error.errno == errno.EIO:
                break
            raise
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def test_compare_shows_the_time_left_on_a_terminal(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_slow.py").write_text(textwrap.dedent(_SUITE))
    master, terminal = os.openpty()
    try:
        command = [sys.executable, "-m", "torchdevice", "compare", "--output", str(tmp_path / "o")]
        child = subprocess.Popen(
            [*command, str(suite), "-p", "no:cacheprovider"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
            env=clean_env(),
            cwd=tmp_path,
        )
        os.close(terminal)
        shown = _read_terminal(master)
        assert child.wait(timeout=300) == 0, shown
    finally:
        os.close(master)
    # Each state of the line, as the terminal drew it (rewritten in place: \r, erase).
    states = [part.replace("\x1b[K", "").strip() for part in re.split(r"[\r\n]", shown)]
    native_eta = [
        s for s in states if re.fullmatch(r"native: [123]/4 tests done .*, about \d+ s left", s)
    ]
    assert native_eta, shown  # from the run's own pace
    # Before its first test, the redirected run's estimate is the native run's duration.
    assert any(
        re.fullmatch(r"redirected: 0/(\?|4) tests done .*, about \d+ s left", s) for s in states
    ), shown
    finished = [s for s in states if "exit status" in s]
    assert len(finished) == 2
    assert all("left" not in s for s in finished)  # the last line says how long it took

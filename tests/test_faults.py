"""Faults of a multi-process run: a failing rank, Ctrl-C of the launcher.

Each run is ``python -m torchdevice -m torch.distributed.run`` (torchrun under the
torchdevice launcher) in a session of its own, with ``TMPDIR`` pointing into the test's
directory: afterwards nothing may be left there, and no worker may still run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "faulty_rank.py"
TIMEOUT = 240


def _env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
        and not k.startswith("TORCHDEVICE_")
    }
    env["TMPDIR"] = str(tmp)
    return env


def _launch(tmp: Path, *args: str) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "torchdevice",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(SCRIPT),
        *args,
    ]
    return subprocess.Popen(
        command,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _reap(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def _line_of(code: str) -> int:
    lines = SCRIPT.read_text().splitlines()
    return next(number for number, text in enumerate(lines, 1) if code in text)


def test_a_failing_rank_fails_the_job_and_the_report_keeps_every_part(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    process = _launch(tmp, "raise")
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    finally:
        _reap(process)
    assert process.returncode != 0, output
    # torchrun names the failed rank; its traceback names the user's line.
    assert "rank 1 failed on purpose" in output
    raise_line = _line_of("failed on purpose")
    assert f'File "{SCRIPT}", line {raise_line}, in main' in output
    # One merged report: the launcher's own and both ranks' parts (rank 1 raised, and an
    # exception still runs atexit, which writes the part).
    headers = [line for line in output.splitlines() if "torchdevice migration report" in line]
    assert len(headers) == 1, output
    assert headers[0].endswith("in 3 processes (ranks 0, 1)"), headers[0]
    ones_line = _line_of('torch.ones(2, device="cuda")')
    assert f"faulty_rank.py:{ones_line} in main(): torch.ones(cuda) -> cpu:0 x2" in output
    assert _ours(tmp) == []  # no report-parts directory, no part left behind


def test_ctrl_c_of_the_launcher_ends_every_worker(tmp_path: Path) -> None:
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    process = _launch(tmp, "wait", str(out))
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(list(out.glob("pid*"))) < 2:
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the workers never started"
            time.sleep(0.2)
        workers = [int((out / f"pid{rank}").read_text()) for rank in (0, 1)]
        os.kill(process.pid, signal.SIGINT)  # Ctrl-C reaches the launcher
        output, _ = process.communicate(timeout=60)
    finally:
        _reap(process)
    assert process.returncode != 0, output
    _, alive = psutil.wait_procs(
        [_process(pid) for pid in workers if psutil.pid_exists(pid)], timeout=10
    )
    assert alive == [], f"workers still running after Ctrl-C: {alive}"
    assert _ours(tmp) == []


def _ours(tmp: Path) -> list[Path]:
    """What is left in ``tmp`` apart from torchrun's own log folder, which torchrun
    leaves after a failed or interrupted run natively too (``torchelastic_*``)."""
    return [path for path in tmp.iterdir() if not path.name.startswith("torchelastic_")]


def _process(pid: int) -> psutil.Process:
    return psutil.Process(pid)

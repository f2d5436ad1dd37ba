"""Launching torchrun (or another launcher) in subprocesses, as users launch it.

Shared by the tests that run scripts on several ranks. Each launch runs in a session of
its own (killed with its workers in ``finally``), with ``TMPDIR`` inside ``tmp_path`` so
nothing torchelastic writes outlives the test, and without ``ACTIVATE_TORCH_DEVICE``
unless the caller sets it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

TIMEOUT = 150

_EXIT_ABORT = "terminate called without an active exception"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(
    launches: list[list[str]],
    tmp_path: Path,
    env_extra: dict[str, str],
    prefix: tuple[str, ...] = ("-m", "torch.distributed.run"),
) -> str:
    """Run the launcher command lines at once; their combined output when all succeed.

    ``prefix`` is what comes after ``python``: torchrun itself, torchrun under the
    torchdevice launcher, or another launcher (``-m accelerate.commands.launch``).

    Known issue, retried once: in about 2 of 35 runs on a loaded 2-core machine, a rank
    that had finished (its results and report part written) aborted while the interpreter
    shut down ("terminate called without an active exception", SIGABRT). Only the main
    thread was alive in Python; the suspect, not yet confirmed, is a C++ thread of the
    process group releasing a tensor whose storage carries torchdevice's transfer mark
    during finalization. It is in docs/limitations.md; a second abort fails the test.
    """
    try:
        return _launch(launches, tmp_path, env_extra, prefix)
    except AssertionError as error:
        if _EXIT_ABORT not in str(error):
            raise
    return _launch(launches, tmp_path, env_extra, prefix)


def _launch(
    launches: list[list[str]],
    tmp_path: Path,
    env_extra: dict[str, str],
    prefix: tuple[str, ...],
) -> str:
    """One attempt of :func:`run`."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "ACTIVATE_TORCH_DEVICE"}
    env.update(TMPDIR=str(tmp_path / "tmp"), TORCHDEVICE_LOG_LEVEL="INFO", **env_extra)
    processes: list[subprocess.Popen[str]] = []
    try:
        for argv in launches:
            command = [sys.executable, *prefix, *argv]
            processes.append(subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True,
            ))  # fmt: skip
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    text = "\n".join(outputs)
    assert all(p.returncode == 0 for p in processes), text
    return text

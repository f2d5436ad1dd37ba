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

from childenv import tier_env

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

    No retry: a rank that aborts at interpreter exit ("terminate called without an active
    exception") fails the test (issue 19; the cause and its fix are in
    :func:`torchdevice.distributed.off_the_stack`).
    """
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "ACTIVATE_TORCH_DEVICE"}
    env.update(TMPDIR=str(tmp_path / "tmp"), TORCHDEVICE_LOG_LEVEL="INFO", **tier_env())
    env.update(env_extra)
    processes: list[subprocess.Popen[str]] = []
    try:
        for argv in launches:
            command = [sys.executable, *prefix, *argv]
            processes.append(
                subprocess.Popen(
                    command,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    text = "\n".join(outputs)
    assert [p.returncode for p in processes] == [0] * len(processes), text
    assert _EXIT_ABORT not in text, text
    return text

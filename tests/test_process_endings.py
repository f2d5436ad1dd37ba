"""How a run under ``python -m torchdevice`` ends when the script ends badly (issue 19).

Each case runs in a child process, with ``TMPDIR`` inside ``tmp_path``, and compares the
ending with the one a direct (native) run of the same script has: the exit status, what
is printed, and what is left on disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

REDIRECTED = 'x = torch.ones(2, device="cuda")'


def _env(tmp_path: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"}
        and not name.startswith("TORCHDEVICE_")
    }
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmpdir)
    return env


def _python(tmp_path: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


@pytest.mark.parametrize("report", [None, "report.json", "report.txt"])
def test_keyboard_interrupt_ends_the_run_as_sigint_does(tmp_path: Path, report: str | None) -> None:
    """Natively an uncaught ``KeyboardInterrupt`` ends Python by SIGINT (130 in a shell);
    so it does under the launcher, with or without ``--report``, and the report is
    written. (Writing the JSON report imports pydantic, hence :mod:`decimal`, whose C
    module runs Python source and so cleared CPython's flag: status 1 before.)"""
    native = _python(tmp_path, _script(tmp_path, "import torch\nraise KeyboardInterrupt\n"))
    assert native.returncode == -signal.SIGINT, native.stderr
    script = _script(tmp_path, f"import torch\n{REDIRECTED}\nraise KeyboardInterrupt\n")
    options = [] if report is None else ["--report", tmp_path / report]

    result = _python(tmp_path, "-m", "torchdevice", *options, script)

    assert result.returncode == -signal.SIGINT, result.stderr
    assert "\nKeyboardInterrupt\n" in result.stderr  # its traceback, as natively
    if report is None:
        assert "torchdevice migration report" in result.stderr
    else:
        written = (tmp_path / report).read_text(encoding="utf-8")
        if report.endswith(".json"):
            assert json.loads(written)["entries"][0]["api"] == "torch.ones"
        else:
            assert "torch.ones(cuda) -> cpu:0" in written
        assert f"migration report written to {tmp_path / report}" in result.stderr


def test_report_directory_removed_by_the_script_falls_back_to_stderr(tmp_path: Path) -> None:
    """The report cannot go where ``--report`` said (the script put a file where its folder
    was: a missing folder would be made again): one line says so, the report is printed
    instead, the script's own status stays (0), and no exit-handler traceback."""
    out = tmp_path / "out"
    out.mkdir()
    removes = f"shutil.rmtree({str(out)!r}); open({str(out)!r}, 'w').close()"
    script = _script(tmp_path, f"import shutil, torch\n{REDIRECTED}\n{removes}\n")

    result = _python(tmp_path, "-m", "torchdevice", "--report", out / "report.json", script)

    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr
    assert "Traceback" not in result.stderr
    line = (
        f"torchdevice: cannot write the migration report to {out / 'report.json'} "
        "(Not a directory); it follows here instead:"
    )
    assert line in result.stderr.splitlines()
    assert "torch.ones(cuda) -> cpu:0 x1" in result.stderr
    assert out.is_file()


def _command_line(process: psutil.Process) -> str:
    """The command line, or "" for a short-lived helper (torch runs ``ldconfig`` and the
    like) caught between its exit and its parent's ``wait``: a zombie has none to read."""
    try:
        return " ".join(process.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return ""


SLEEPER = """\
import os, time, torch
{setup}
x = torch.ones(2, device="cuda")
os.write(1, f"READY {{os.getpid()}}\\n".encode())  # one write: ranks share the pipe
time.sleep(120)
"""
TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")


@pytest.mark.parametrize(
    ("form", "ranks"),
    [
        pytest.param(("-m", "torchdevice"), 0, id="python -m torchdevice SCRIPT"),
        pytest.param(("-m", "torchdevice", *TORCHRUN), 2, id="launcher over torchrun"),
        pytest.param((*TORCHRUN, "-m", "torchdevice"), 2, id="torchrun -m torchdevice"),
        pytest.param(TORCHRUN, 2, id="ACTIVATE_TORCH_DEVICE=1 torchrun"),
    ],
)
def test_sigterm_ends_every_process_and_leaves_no_directory(
    tmp_path: Path, form: tuple[str, ...], ranks: int
) -> None:
    """A scheduler's SIGTERM to the process it started: every rank ends, and no
    torchdevice directory is left in TMPDIR (torchelastic's own log folder aside)."""
    setup = 'import torch.distributed as dist\ndist.init_process_group("nccl")' if ranks else ""
    script = _script(tmp_path, SLEEPER.format(setup=setup))
    env = _env(tmp_path)
    if form == TORCHRUN:
        env["ACTIVATE_TORCH_DEVICE"] = "1"
    process = subprocess.Popen(
        [sys.executable, *form, str(script)],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        ready, printed = 0, []
        for line in process.stdout:
            printed.append(line)
            ready += line.count("READY")
            if ready == max(ranks, 1):
                break
        assert ready == max(ranks, 1), "".join(printed)
        family = psutil.Process(process.pid).children(recursive=True)
        assert len([p for p in family if "script.py" in _command_line(p)]) == ranks
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=120)
        _, alive = psutil.wait_procs(family, timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert alive == []
    if not ranks:
        assert process.returncode == -signal.SIGTERM  # as a direct run: killed by it
    left = [p.name for p in (tmp_path / "tmp").iterdir() if not p.name.startswith("torchelastic")]
    assert left == []

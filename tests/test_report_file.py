"""The report file at exit, wherever torchdevice is on (each case in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: A CUDA-first script: one redirected line, and a child process that makes another.
SCRIPT = """\
import subprocess, sys
{activate}
import torch
x = torch.zeros(2, device="cuda")
subprocess.run([sys.executable, "-c", "import torch; torch.ones(1, device='cuda')"], check=True)
print("done", x.device)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"}
        and not name.startswith("TORCHDEVICE_")
    }
    return {**env, **extra}


def _python(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd``, with torchdevice's variables only as ``env`` sets them."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _run(tmp_path: Path, activate: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(activate=activate), encoding="utf-8")
    return _python(tmp_path, *args, str(script), **env)


def _rows(path: Path) -> list[tuple[str, int, str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return sorted((Path(e["file"]).name, e["line"], e["api"]) for e in data["entries"])


#: The parent's line, and the child's (``-c``: no file), merged into one report.
ROWS = [("<string>", 1, "torch.ones"), ("train.py", 4, "torch.zeros")]


@pytest.mark.parametrize(
    ("activate", "env"),
    [
        ("", {"ACTIVATE_TORCH_DEVICE": "1", "TORCHDEVICE_REPORT": "{out}"}),
        ("import torchdevice; torchdevice.enable()", {"TORCHDEVICE_REPORT": "{out}"}),
        ("import torchdevice; torchdevice.enable(report_path={out!r})", {}),
    ],
    ids=["ACTIVATE_TORCH_DEVICE", "enable-env", "enable-argument"],
)
def test_the_report_is_written_at_exit_however_torchdevice_is_on(
    tmp_path: Path, activate: str, env: dict[str, str]
) -> None:
    out = tmp_path / "reports" / "report.json"
    out.parent.mkdir()
    values = {name: value.format(out=str(out)) for name, value in env.items()}
    done = _run(tmp_path, activate.format(out=str(out)), **values)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done cpu\n"
    assert _rows(out) == ROWS  # one report for the run, the child's call included
    assert json.loads(out.read_text(encoding="utf-8"))["processes"] == 2


def test_a_text_path_gets_the_text_report(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    done = _run(tmp_path, "", ACTIVATE_TORCH_DEVICE="1", TORCHDEVICE_REPORT=str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    assert text.startswith("torchdevice migration report (")
    assert "train.py:4 in <module>(): torch.zeros(cuda) -> cpu:0 x1" in text


def test_an_unwritable_report_goes_to_stderr_with_one_line_saying_why(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    out = blocker / "report.json"  # below a file: its folder cannot be made
    done = _run(tmp_path, "", ACTIVATE_TORCH_DEVICE="1", TORCHDEVICE_REPORT=str(out))
    assert done.returncode == 0, done.stderr  # the script's own status
    assert not out.exists()
    lines = done.stderr.splitlines()
    assert lines[0].startswith("torchdevice: on (ACTIVATE_TORCH_DEVICE), redirecting to ")
    assert lines[1] == (
        f"torchdevice: cannot write the migration report to {out} (Not a directory); "
        "it follows here instead:"
    )
    assert lines[2].startswith("torchdevice migration report (")
    assert lines[-1].endswith(
        "TORCHDEVICE_REPORT=report.json writes the migration report "
        "(python -m torchdevice SCRIPT prints it)"
    )
    assert any("train.py:4 in <module>(): torch.zeros(cuda) -> cpu:0 x1" in x for x in lines)


def test_the_launcher_writes_the_report_once(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = _run(tmp_path, "", "-m", "torchdevice", TORCHDEVICE_REPORT=str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("torchdevice: migration report written to") == 1, done.stderr
    assert _rows(out) == ROWS


def test_no_path_no_file_and_nothing_on_stderr(tmp_path: Path) -> None:
    done = _run(tmp_path, "import torchdevice; torchdevice.enable()")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_a_disable_before_exit_keeps_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    activate = textwrap.dedent(f"""\
        import atexit, torchdevice
        torchdevice.enable(report_path={str(out)!r})
        atexit.register(torchdevice.disable)""")
    done = _run(tmp_path, activate.replace("\n", "; "))
    assert done.returncode == 0, done.stderr
    assert ("train.py", 4, "torch.zeros") in _rows(out)


def test_the_last_activation_decides(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    activate = (
        f"import torchdevice; torchdevice.enable(report_path={str(out)!r}); torchdevice.enable()"
    )
    done = _run(tmp_path, activate)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert not out.exists()


#: Removes the report's folder and puts a file in its place: the report cannot be written
#: at the end, whichever way the run was redirected (a missing folder would be made again).
DOOMED = """\
import shutil, torch
def test_redirect_then_block_the_report():
    assert torch.zeros(2, device="cuda").device.type == "cpu"
    shutil.rmtree({folder!r}); open({folder!r}, "w").close()
"""


@pytest.mark.parametrize("entry", ["launcher", "ACTIVATE_TORCH_DEVICE", "pytest"])
def test_every_entry_point_falls_back_to_stderr_the_same_way(tmp_path: Path, entry: str) -> None:
    """One writer (:func:`torchdevice.reporting.file.deliver`): a report path that became
    unwritable during the run gets one line saying why, then the report on stderr; the
    run's own status stays, and no traceback."""
    folder = tmp_path / "reports"
    folder.mkdir()
    out = folder / "report.json"
    test_file = tmp_path / "test_doomed.py"
    test_file.write_text(DOOMED.format(folder=str(folder)), encoding="utf-8")
    script = tmp_path / "run.py"
    script.write_text(
        "import test_doomed\ntest_doomed.test_redirect_then_block_the_report()\n",
        encoding="utf-8",
    )
    commands = {
        "launcher": ["-m", "torchdevice", "--report", str(out), str(script)],
        "ACTIVATE_TORCH_DEVICE": [str(script)],
        "pytest": [
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--torchdevice",
            f"--torchdevice-report={out}",
            str(test_file),
        ],
    }
    activated = {"ACTIVATE_TORCH_DEVICE": "1", "TORCHDEVICE_REPORT": str(out)}
    env = activated if entry == "ACTIVATE_TORCH_DEVICE" else {}
    done = _python(tmp_path, *commands[entry], **env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output, output
    assert "Exception ignored" not in output, output
    lines = done.stderr.splitlines()
    why = (
        f"torchdevice: cannot write the migration report to {out} (Not a directory); "
        "it follows here instead:"
    )
    assert why in lines, done.stderr
    following = lines[lines.index(why) + 1 :]
    assert following[0].startswith("torchdevice migration report ("), done.stderr
    assert any("torch.zeros(cuda) -> cpu:0 x1" in line for line in following), done.stderr
    assert folder.is_file()  # what the run left there, untouched


def test_a_fork_child_leaves_the_report_to_its_parent(tmp_path: Path) -> None:
    """A ``fork`` child that exits normally runs the ``atexit`` handlers it inherited: it
    must not deliver the launcher's report (once, by the parent, after the child ended),
    nor a report path the script asks for under the launcher (the launcher's stands)."""
    out = tmp_path / "report.json"
    other = tmp_path / "asked-by-the-script.json"
    script = tmp_path / "forks.py"
    script.write_text(
        "import os, sys, torch, torchdevice\n"
        f"torchdevice.enable(report_path={str(other)!r})\n"
        "x = torch.zeros(2, device='cuda')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)  # a normal exit: the inherited atexit handlers run\n"
        "os.waitpid(pid, 0)\n",
        encoding="utf-8",
    )
    done = _python(tmp_path, "-m", "torchdevice", "--report", str(out), str(script))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("torchdevice: migration report written to") == 1, done.stderr
    assert ("forks.py", 3, "torch.zeros") in _rows(out)
    assert not other.exists()

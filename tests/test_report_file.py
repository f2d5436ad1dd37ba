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


@pytest.mark.parametrize("where", ["a-folder", "below-a-file"])
def test_an_unwritable_report_path_is_refused_at_activation(tmp_path: Path, where: str) -> None:
    """``TORCHDEVICE_REPORT`` is checked when torchdevice switches on, like every other
    output path: one line naming the variable and why, status 2 (a usage error), and the
    script does not run; not a report on stderr at the end of the run."""
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    out = tmp_path / "a-folder" if where == "a-folder" else tmp_path / "a-file" / "report.json"
    why = "it is a directory" if where == "a-folder" else f"{str(tmp_path / 'a-file')!r} is a "
    done = _run(tmp_path, "", ACTIVATE_TORCH_DEVICE="1", TORCHDEVICE_REPORT=str(out))
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.startswith(
        f"torchdevice: error: invalid TORCHDEVICE_REPORT={str(out)!r} from the environment: "
        f"cannot write the migration report there: {why}"
    ), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_enable_refuses_an_unwritable_report_path(tmp_path: Path) -> None:
    """The same check for ``enable(report_path=...)``: a :class:`SettingsError` at the call."""
    from torchdevice.errors import SettingsError
    from torchdevice.settings import load_settings

    with pytest.raises(SettingsError) as excinfo:
        load_settings({"report_path": tmp_path})
    assert str(excinfo.value) == (
        f"invalid report_path={tmp_path!r} passed as an argument: cannot write the migration "
        "report there: it is a directory"
    )
    missing = tmp_path / "new" / "report.json"  # missing folders are made when it is written
    assert load_settings({"report_path": missing}).report_path == missing


#: Redirects once, then makes every file write of the process fail ("File too large", as a
#: full disk would): the report cannot be written at exit, over a report an earlier run left.
STALE = """import resource, signal
import torch
x = torch.zeros(2, device="cuda")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not kills
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
print("done", x.device)
"""


def test_a_stale_report_file_is_never_announced_as_written(tmp_path: Path) -> None:
    """A report file of an earlier run is at the path, and this run's write fails: the
    closing line says what happened to this run's report (not written, why, on stderr),
    not "written" because a file of that name exists."""
    out = tmp_path / "report.json"
    out.write_text('{"stale": "an earlier run"}\n', encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(STALE, encoding="utf-8")
    done = _python(tmp_path, str(script), ACTIVATE_TORCH_DEVICE="1", TORCHDEVICE_REPORT=str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done cpu\n"
    lines = done.stderr.splitlines()
    why = (
        f"torchdevice: cannot write the migration report to {out} (File too large); it "
        "follows here instead:"
    )
    assert why in lines, done.stderr
    assert lines[lines.index(why) + 1].startswith("torchdevice migration report ("), done.stderr
    assert lines[-1] == (
        "torchdevice: 1 call(s) redirected at 1 call site(s); the migration report was not "
        f"written to {out} (File too large): it is above, on stderr"
    ), done.stderr
    assert "written to" not in done.stderr.replace("not written to", ""), done.stderr
    assert out.exists()  # the earlier run's file (emptied by the failed write) is still there


#: Installed before torchdevice is imported: records every exit handler registered.
SPY = """import atexit
registered = []
_register = atexit.register
def spy(function, *args, **kwargs):
    registered.append(f"{{function.__module__}}.{{function.__qualname__}}")
    return _register(function, *args, **kwargs)
atexit.register = spy
import os, subprocess, sys
import torchdevice, torch
x = torch.zeros(2, device="cuda")
subprocess.run([sys.executable, "-c", "import torch; torch.ones(1, device='cuda')"], check=True)
torchdevice.enable(report_path={out!r})
with torchdevice.redirect(keep_cpu=True):
    torch.ones(1, device="cuda")
torchdevice.disable()
torchdevice.enable()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: the handler it inherited runs, with nothing to do
os.waitpid(pid, 0)
print("after the fork child:", os.path.exists({out!r}))
print([name for name in registered if name.startswith("torchdevice")])
"""


def test_one_exit_handler_runs_the_sequence(tmp_path: Path) -> None:
    """However many activations, report paths, children and closing lines a run has,
    torchdevice registers one exit handler; a fork child that exits normally delivers
    nothing (its exit state starts empty); the process that started the run delivers the
    report of every process once, and says so once."""
    out = tmp_path / "report.json"
    script = tmp_path / "train.py"
    script.write_text(SPY.format(out=str(out)), encoding="utf-8")
    done = _python(tmp_path, str(script), ACTIVATE_TORCH_DEVICE="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "after the fork child: False",
        "['torchdevice.reporting.file._at_exit']",
    ], done.stdout
    assert not out.exists()  # the last activation asked for no file
    lines = done.stderr.splitlines()
    assert lines[-1] == (
        "torchdevice: 3 call(s) redirected at 3 call site(s); TORCHDEVICE_REPORT=report.json "
        "writes the migration report (python -m torchdevice SCRIPT prints it)"
    ), done.stderr
    assert sum("redirected at" in line for line in lines) == 1, done.stderr


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
    if entry == "ACTIVATE_TORCH_DEVICE":  # the closing line tells the outcome it got
        assert lines[-1] == (
            "torchdevice: 1 call(s) redirected at 1 call site(s); the migration report was "
            f"not written to {out} (Not a directory): it is above, on stderr"
        ), done.stderr


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

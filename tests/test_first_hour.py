"""The first hour with torchdevice has no surprises (issue 28, item 6), each in a child process.

- ``pytest --torchdevice --torchdevice-report <a directory>`` is a usage error before any
  test runs, and a report that cannot be written at the end keeps pytest's summary;
- one rule for output paths in every tool (missing parent folders are made; a path under a
  file, or a directory where a file goes, is a one-line error before anything runs);
- ``compare --output <a file>`` and Ctrl-C during compare's pre-check end in one line;
- a bad ``ACTIVATE_TORCH_DEVICE`` under plain ``python`` is one line, status 2;
- the launcher and environment activation say on stderr, once, that torchdevice is on, and
  environment activation points to the report at exit; the processes a run starts stay
  silent;
- the README says how long its two commands take and gives a check of under a minute;
- usage errors (an unknown option, a missing script, a report path that cannot be
  written, a bad gate) are answered before torch is imported (issue 36 item 8).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mps_page
from childenv import clean_env, interruptible

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "sample_suite"
PYTHON = [sys.executable, *(["-X", "dev"] if sys.flags.dev_mode else [])]
CUDA_SCRIPT = 'import torch\nprint(torch.ones(2, device="cuda").sum().item())\n'


def _run(
    args: list[str], cwd: Path, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    shutil.copytree(SAMPLE, suite)
    return suite


# -- pytest --torchdevice-report ------------------------------------------------------------


def test_a_report_path_that_is_a_directory_stops_pytest_before_any_test(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    target = tmp_path / "reports"
    target.mkdir()
    done = _run(
        [*PYTHON, "-m", "pytest", "--torchdevice", f"--torchdevice-report={target}", "-q"],
        suite,
    )
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    said = (done.stdout + done.stderr).strip()
    assert said == f"ERROR: --torchdevice-report {target}: cannot write it: it is a directory"
    assert "Traceback" not in said


def test_a_report_that_cannot_be_written_at_the_end_keeps_the_summary(tmp_path: Path) -> None:
    """The folder goes away during the run: the report is printed, the summary stays."""
    suite = _suite(tmp_path)
    doomed = tmp_path / "doomed"
    (suite / "test_zz_last.py").write_text(
        f"import shutil\ndef test_remove():\n    shutil.rmtree({str(doomed)!r})\n"
        f"    open({str(doomed)!r}, 'w').close()\n",
        encoding="utf-8",
    )
    doomed.mkdir()
    target = doomed / "report.json"
    done = _run(
        [*PYTHON, "-m", "pytest", "--torchdevice", f"--torchdevice-report={target}", "-q"],
        suite,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert f"torchdevice: cannot write the migration report to {target}" in output
    assert "torchdevice migration report (" in output  # printed instead
    assert re.search(r"\d+ passed", done.stdout), output  # pytest's own summary
    assert "torchdevice: " in done.stdout
    assert f"migration report written to {target}" not in done.stdout


# -- one rule for output paths ---------------------------------------------------------------


def _report(tmp_path: Path) -> Path:
    path = tmp_path / "in.json"
    raw = {
        "host": "cpu host",
        "entries": [
            {
                "file": str(tmp_path / "t.py"),
                "line": 2,
                "function": "<module>",
                "kind": "redirect",
                "api": "torch.ones",
                "requested": "cuda",
                "decided": "cpu:0",
                "reason": "r",
                "count": 1,
            }
        ],
    }
    path.write_text(json.dumps(raw), encoding="utf-8")
    (tmp_path / "t.py").write_text(CUDA_SCRIPT, encoding="utf-8")
    return path


def _commands(tmp_path: Path, out: Path) -> dict[str, list[str]]:
    """Each tool that writes a file, writing it to ``out``."""
    report = _report(tmp_path)
    script = tmp_path / "t.py"
    module = [*PYTHON, "-m", "torchdevice"]
    port = ["port", "--report", str(report), "--root", str(tmp_path), "-o", str(out)]
    suite = _suite(tmp_path) / "test_tensors.py"
    return {
        "run --report": [*module, "run", "--report", str(out), str(script)],
        "combine -o": [*module, "combine", str(report), "-o", str(out)],
        "port -o": [*module, *port],
        "pytest --torchdevice-report": [
            *[*PYTHON, "-m", "pytest", "--torchdevice", f"--torchdevice-report={out}"],
            *["-q", str(suite)],
        ],
    }


@pytest.mark.parametrize(
    "tool", ["run --report", "combine -o", "port -o", "pytest --torchdevice-report"]
)
def test_every_tool_makes_missing_parent_folders(tool: str, tmp_path: Path) -> None:
    out = tmp_path / "new" / "folders" / "out.json"
    done = _run(_commands(tmp_path, out)[tool], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.is_file()


@pytest.mark.parametrize(
    "tool", ["run --report", "combine -o", "port -o", "pytest --torchdevice-report"]
)
def test_every_tool_refuses_a_path_below_a_file_before_it_starts(tool: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    out = blocker / "sub" / "out.json"
    done = _run(_commands(tmp_path, out)[tool], tmp_path)
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == (4 if tool.startswith("pytest") else 2), said
    assert said.endswith(f"{str(blocker)!r} is a file, not a directory"), said
    assert len(said.splitlines()) == 1, said
    assert "2.0" not in said  # the script did not run


# -- compare --------------------------------------------------------------------------------


def test_compare_output_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    out = tmp_path / "compare.txt"
    out.write_text("mine\n", encoding="utf-8")
    done = _run([*PYTHON, "-m", "torchdevice", "compare", "--output", str(out)], suite)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"python -m torchdevice compare: error: cannot write the reports to {str(out)!r}: "
        "it is a file, not a directory"
    )
    assert out.read_text(encoding="utf-8") == "mine\n"


def test_ctrl_c_during_compares_pre_check_is_one_line(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    started = tmp_path / "started"
    (suite / "conftest.py").write_text(
        (SAMPLE / "conftest.py").read_text(encoding="utf-8")
        + f"\nimport pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(120)\n",
        encoding="utf-8",
    )
    out = tmp_path / "compare-out"
    child = subprocess.Popen(
        # SIGINT's default action, as at a terminal: a suite run as a background job of a
        # script (CI's `.ci/run > log &`) inherits it ignored, and so would compare.
        interruptible([*PYTHON, "-m", "torchdevice", "compare", "--quiet", "--output", str(out)]),
        cwd=suite,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C reaches the terminal's whole process group
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), "the pre-check never imported the conftest"
        os.killpg(child.pid, signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.strip() == (
        "python -m torchdevice compare: interrupted before either run started; nothing was written"
    )
    assert not out.exists()


# -- ACTIVATE_TORCH_DEVICE and the lines that say torchdevice is on --------------------------


def test_a_bad_activation_value_under_plain_python_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text(CUDA_SCRIPT, encoding="utf-8")
    done = _run([*PYTHON, str(script)], tmp_path, ACTIVATE_TORCH_DEVICE="maybe")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "torchdevice: error: invalid ACTIVATE_TORCH_DEVICE='maybe' from the environment: "
        "expected a boolean: 1, true, yes or on to switch it on; 0, false, no or off (or "
        "unset) to leave it off (any case)"
    ]
    # A process that never imports torch is not concerned.
    done = _run([*PYTHON, "-c", "print('fine')"], tmp_path, ACTIVATE_TORCH_DEVICE="maybe")
    assert (done.returncode, done.stdout, done.stderr) == (0, "fine\n", "")


#: A script that starts a second Python process, which imports torch redirected too.
PARENT = """\
import subprocess, sys
import torch
print(torch.ones(2, device="cuda").sum().item())
subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='cuda')"], check=True)
"""


def _start_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("torchdevice: on")]


def test_the_launcher_says_once_that_torchdevice_is_on(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text(PARENT, encoding="utf-8")
    done = _run([*PYTHON, "-m", "torchdevice", str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert _start_lines(done.stderr) == [
        _start_lines(done.stderr)[0]
    ]  # once, not again in the child
    assert re.fullmatch(
        r"torchdevice: on, redirecting to \S+ \(\w+ host, .+\)", done.stderr.splitlines()[0]
    )
    assert "torchdevice migration report (" in done.stderr
    quiet = _run([*PYTHON, "-m", "torchdevice", "--no-report", str(script)], tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.splitlines() == done.stderr.splitlines()[:1]  # the report goes, not it


def test_environment_activation_says_so_at_start_and_points_to_the_report_at_exit(
    tmp_path: Path,
) -> None:
    script = tmp_path / "t.py"
    script.write_text(PARENT, encoding="utf-8")
    done = _run([*PYTHON, str(script)], tmp_path, ACTIVATE_TORCH_DEVICE="1")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr  # the child says nothing
    assert lines[0].startswith("torchdevice: on (ACTIVATE_TORCH_DEVICE), redirecting to ")
    assert lines[1] == (
        "torchdevice: 2 call(s) redirected at 2 call site(s); TORCHDEVICE_REPORT=report.json "
        "writes the migration report (python -m torchdevice SCRIPT prints it)"
    )
    report = tmp_path / "reports" / "run.json"
    done = _run(
        [*PYTHON, str(script)], tmp_path, ACTIVATE_TORCH_DEVICE="1", TORCHDEVICE_REPORT=str(report)
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"torchdevice: 2 call(s) redirected at 2 call site(s); migration report written to {report}"
    )
    assert json.loads(report.read_text(encoding="utf-8"))["entries"]


# -- the README -----------------------------------------------------------------------------


def test_the_readme_says_how_long_its_commands_take_and_the_quick_check_is_quick() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Try it", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"# 1\. [^\n]*\n#\s+\(the run: about \d+ (s|min)", section), section
    assert re.search(r"# 2\. [^\n]*\n#\s+\(about \d+ min", section), section
    quick = re.search(r"<!-- quick-check -->\n```bash\n(?P<command>[^\n]+)\n```", readme)
    assert quick is not None, "the README's one-minute check"
    command = quick["command"].split(" && ", 1)[1]  # after the pip install, as the docs test
    start = time.monotonic()
    done = subprocess.run(
        command,
        shell=True,
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    took = time.monotonic() - start
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torchdevice: on, redirecting to" in done.stderr
    assert took < 60, f"the one-minute check took {took:.0f} s"


# -- usage errors come before torch's import (issue 36 item 8) -----------------------------

#: Runs the command line's main with the arguments given, then says whether torch (or
#: the launcher) was imported and with what status the command ended.
_IMPORTS = """\
import json, sys
from torchdevice.tools.cli import main
try:
    status = main(sys.argv[1:], prog="python -m torchdevice")
except SystemExit as exc:
    status = exc.code
print(json.dumps({"status": status, "torch": "torch" in sys.modules,
                  "launcher": "torchdevice.tools.launcher" in sys.modules}))
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus", "x.py"], "python -m torchdevice: error: unrecognized arguments: --bogus"),
        (["missing.py"], "python -m torchdevice: can't open file {missing!r}: [Errno 2] No such"),
        (
            ["--report", "{file}/r.json", "script.py"],
            "python -m torchdevice: error: cannot write the report to {file}/r.json: "
            "{file!r} is a file, not a directory",
        ),
        (
            ["--max-redirected-lines=-2", "script.py"],
            "python -m torchdevice: error: argument --max-redirected-lines: expected a number",
        ),
        (
            ["run", "--native", "--no-report", "script.py"],
            "python -m torchdevice run: error: --native runs the script without torchdevice",
        ),
    ],
)
def test_usage_errors_are_answered_before_torch_is_imported(
    args: list[str], message: str, tmp_path: Path
) -> None:
    """``python -m torchdevice --bogus x.py``: the usage error in a fraction of a second,
    not after the 2-3 s of importing torch (the closing note has the timings)."""
    (tmp_path / "script.py").write_text("print('ran')\n", encoding="utf-8")
    (tmp_path / "file").write_text("", encoding="utf-8")
    names = {"file": str(tmp_path / "file"), "missing": str(tmp_path / "missing.py")}
    argv = [arg.format(**names) for arg in args]
    done = _run([*PYTHON, "-c", _IMPORTS, *argv], tmp_path)
    facts = json.loads(done.stdout.splitlines()[-1])
    assert facts == {"status": 2, "torch": False, "launcher": False}, done.stderr
    assert done.stderr.splitlines()[-1].startswith(message.format(**names)), done.stderr
    assert "ran" not in done.stdout


def test_tunable_op_under_the_launcher_is_a_no_op_not_an_attribute_error(tmp_path: Path) -> None:
    """``python -m torchdevice tunable.py`` ended in "AttributeError: module 'torch._C' has
    no attribute '_cuda_tunableop_enable'"; TunableOp changes no result, so it is a no-op
    whose switches keep their values (logged once at INFO)."""
    script = tmp_path / "tunable.py"
    script.write_text(
        "import torch\ntorch.cuda.tunable.enable(True)\nprint(torch.cuda.tunable.is_enabled())\n",
        encoding="utf-8",
    )
    done = _run([*PYTHON, "-m", "torchdevice", "--no-report", str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True\n"
    assert "AttributeError" not in done.stderr


def test_the_mps_pages_check_ported_runs_its_work_on_the_cpu(tmp_path: Path) -> None:
    """``python -m torchdevice port mps_check.py``, ``git apply``, ``python mps_check.py``:
    the ported script printed "MPS not available ... not built with MPS enabled." and did
    nothing on the CPU (issue 36 item 6); now its work runs, natively."""
    script = mps_page.write(tmp_path, "mps_check.py")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=60)
    port = _run([*PYTHON, "-m", "torchdevice", "port", "-o", "mps.patch", script.name], tmp_path)
    assert port.returncode == 0, port.stderr
    applied = _run(["git", "apply", "mps.patch"], tmp_path)
    assert applied.returncode == 0, applied.stderr
    native = _run([*PYTHON, script.name], tmp_path)
    assert native.returncode == 0, native.stderr
    assert native.stdout == mps_page.PRINTS
    assert "mps_device = device" not in script.read_text(encoding="utf-8")

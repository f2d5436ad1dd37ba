"""The launcher: ``python -m torchdevice SCRIPT`` and the ``torchdevice`` console script.

Every test runs a real interpreter on a small script written to ``tmp_path``: the launcher
is about what a fresh process sees (``sys.argv``, ``__main__``, exit codes, what is printed
at exit), which only a child process shows faithfully. The environment is copied without
the variables that would switch torchdevice on (or configure it) from outside.
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

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_cuda.py"
HOST = probe_host()
#: The device type a "cuda" request lands on here ("cpu" on this CPU-only host).
CUDA_LANDS_ON = decide("cuda", HOST).device.type
REPORT_TITLE = "torchdevice migration report"
REDIRECTED_CALL = 'torch.ones(3, device="cuda")'

# Prints what the script sees as one JSON line, prefixed so it is easy to find.
FACTS = """\
import json
import sys

import torch

import torchdevice

print("FACTS " + json.dumps({
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "path0": sys.path[0],
    "main_module_file": getattr(sys.modules["__main__"], "__file__", None),
    "enabled": torchdevice.is_enabled(),
    "device": torch.zeros(2, device="cuda").device.type,
}))
"""

# The same facts without torch, so that the native run is quick: used for parity checks.
PLAIN_FACTS = """\
import json
import sys

print("FACTS " + json.dumps({
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "path0": sys.path[0],
}))
"""


def _env() -> dict[str, str]:
    """os.environ without anything that switches torchdevice on or configures it."""
    env = dict(os.environ)
    for name in list(env):
        if name in {"ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"} or name.startswith(
            "TORCHDEVICE_"
        ):
            del env[name]
    return env


def python(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` (the interpreter running the tests) and capture its output."""
    command = [sys.executable]
    if sys.flags.dev_mode:  # CI runs the suite under -X dev: so do the children
        command += ["-X", "dev"]
    command += [str(arg) for arg in args]
    return subprocess.run(
        command,
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m torchdevice ARGS``."""
    return python("-m", "torchdevice", *args, cwd=cwd)


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def line_of(path: Path, code: str) -> int:
    """The 1-based number of the (first) line of ``path`` that contains ``code``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if code in line:
            return number
    raise AssertionError(f"{code!r} is not in {path}")


def facts(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The JSON line a FACTS script printed."""
    lines = [line for line in result.stdout.splitlines() if line.startswith("FACTS ")]
    assert len(lines) == 1, f"no FACTS line:\n{result.stdout}\n{result.stderr}"
    return json.loads(lines[0].removeprefix("FACTS "))


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def redirecting_script(tmp_path: Path, ending: str = "", times: int = 5) -> Path:
    """A script that makes one redirected call ``times`` times on one line, then ``ending``."""
    return write(
        tmp_path / "redirecting.py",
        f"""\
        import sys

        import torch

        for _ in range({times}):
            {REDIRECTED_CALL}
        print("script body ran")
        {ending}
        """,
    )


def assert_text_report(text: str, script: Path) -> None:
    assert REPORT_TITLE in text
    site = f"{script.name}:{line_of(script, REDIRECTED_CALL)}"
    rows = [row for row in text.splitlines() if site in row]
    assert rows, f"no report row for {site}:\n{text}"
    assert "torch.ones" in rows[0]


# -- the script sees what it would see if started directly ---------------------------------


def test_script_runs_as_main_with_its_own_argv_file_and_path(tmp_path):
    script = write(tmp_path / "scripts" / "facts.py", FACTS)

    seen = facts(ok(run(script, "a", "--flag", "b")))

    assert seen["argv"] == [str(script), "a", "--flag", "b"]
    assert seen["name"] == "__main__"
    assert seen["file"] == str(script)
    assert seen["main_module_file"] == str(script)  # sys.modules["__main__"] is the script
    assert Path(str(seen["path0"])).resolve() == script.parent.resolve()
    assert seen["enabled"] is True
    assert seen["device"] == CUDA_LANDS_ON == "cpu"


def test_options_before_the_script_are_ours_after_it_the_scripts(tmp_path):
    write(tmp_path / "script.py", FACTS)

    seen = facts(ok(run("--keep-cpu", "script.py", "--keep-cpu", cwd=tmp_path)))

    assert seen["argv"] == ["script.py", "--keep-cpu"]  # ours consumed one, not both
    assert seen["enabled"] is True


def test_relative_script_path_sees_what_a_native_run_sees(tmp_path):
    """argv, __name__, __file__ and sys.path[0] match ``python sub/script.py`` exactly.

    Since Python 3.9 a script's ``__file__`` is absolute even when started by a relative
    path (``sys.argv[0]`` stays as given).
    """
    write(tmp_path / "sub" / "plain.py", PLAIN_FACTS)
    relative = os.path.join("sub", "plain.py")

    native = facts(ok(python(relative, "x", cwd=tmp_path)))
    launched = facts(ok(run("--no-report", relative, "x", cwd=tmp_path)))

    assert launched == native


# -- exit codes and exceptions come through; the report is printed whichever way it ends ----


def test_normal_end_exits_0_and_prints_the_report(tmp_path):
    script = redirecting_script(tmp_path)

    result = ok(run(script))

    assert "script body ran" in result.stdout
    assert_text_report(result.stderr, script)
    assert "x5" in result.stderr


def test_sys_exit_code_is_preserved_and_the_report_still_printed(tmp_path):
    script = redirecting_script(tmp_path, ending="sys.exit(3)")

    result = run(script)

    assert result.returncode == 3, result.stderr
    assert_text_report(result.stderr, script)


def test_uncaught_exception_exits_1_with_its_traceback_and_the_report(tmp_path):
    script = redirecting_script(tmp_path, ending='raise ValueError("boom")')

    result = run(script)

    assert result.returncode == 1, result.stderr
    assert "ValueError: boom" in result.stderr
    raise_line = line_of(script, 'raise ValueError("boom")')
    assert f'File "{script}", line {raise_line}, in <module>' in result.stderr
    assert_text_report(result.stderr, script)


# -- the report: --report PATH (JSON or text), --no-report ----------------------------------


def test_report_json_lists_the_call_site_with_its_count(tmp_path):
    script = redirecting_script(tmp_path, times=5)
    out = tmp_path / "out.json"

    result = ok(run("--report", out, script))

    data = json.loads(out.read_text(encoding="utf-8"))
    line = line_of(script, REDIRECTED_CALL)
    entries = [e for e in data["entries"] if e["file"].endswith(script.name) and e["line"] == line]
    assert len(entries) == 1, data
    entry = entries[0]
    assert entry["api"] == "torch.ones"
    assert entry["requested"] == "cuda"
    assert entry["count"] == 5
    assert entry["decided"].startswith(CUDA_LANDS_ON)
    assert data["total_calls"] >= 5
    assert REPORT_TITLE not in result.stderr  # written to the file, not printed


def test_report_txt_is_written_as_text(tmp_path):
    script = redirecting_script(tmp_path)
    out = tmp_path / "out.txt"

    result = ok(run("--report", out, script))

    text = out.read_text(encoding="utf-8")
    assert_text_report(text, script)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert REPORT_TITLE not in result.stderr


def test_no_report_prints_no_report(tmp_path):
    script = redirecting_script(tmp_path)

    result = ok(run("--no-report", script))

    assert "script body ran" in result.stdout
    assert REPORT_TITLE not in result.stderr
    assert REPORT_TITLE not in result.stdout


# -- -m MODULE, the run subcommand, the console script ---------------------------------------


def test_dash_m_runs_a_module_as_main_with_its_arguments(tmp_path):
    write(tmp_path / "pkgmod.py", FACTS)

    seen = facts(ok(run("-m", "pkgmod", "x", "--flag", "y", cwd=tmp_path)))

    assert seen["name"] == "__main__"
    assert seen["argv"][1:] == ["x", "--flag", "y"]
    assert Path(str(seen["argv"][0])).resolve() == (tmp_path / "pkgmod.py").resolve()
    assert seen["enabled"] is True
    assert seen["device"] == CUDA_LANDS_ON


def test_run_subcommand_is_the_same_as_the_default(tmp_path):
    script = write(tmp_path / "facts.py", FACTS)

    result = ok(run("run", script, "a", "b"))

    seen = facts(result)
    assert seen["argv"] == [str(script), "a", "b"]
    assert seen["name"] == "__main__"
    assert seen["enabled"] is True
    assert seen["device"] == CUDA_LANDS_ON
    assert REPORT_TITLE in result.stderr


def test_console_script_info_shows_the_host_and_the_policy():
    console = Path(sys.executable).with_name("torchdevice")
    if not console.exists():
        pytest.skip(f"no torchdevice console script next to {sys.executable}")

    result = subprocess.run(
        [str(console), "info"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    ok(result)
    lines = result.stdout.splitlines()
    assert any(f"host: {HOST.kind}" in line for line in lines), result.stdout
    cuda_rows = [line for line in lines if line.strip().startswith("'cuda' ")]
    assert len(cuda_rows) == 1, result.stdout
    assert str(decide("cuda", HOST).device) in cuda_rows[0]
    if HOST.kind == "cpu":
        assert "host: cpu" in result.stdout
        assert "cpu:0" in cuda_rows[0]


# -- errors ----------------------------------------------------------------------------------


def test_no_script_is_a_usage_error():
    result = run()

    assert result.returncode == 2
    assert "usage:" in result.stderr
    assert "SCRIPT" in result.stderr


def test_version_help_and_subcommand_help():
    version = ok(run("--version"))
    assert version.stdout.strip().startswith(f"torchdevice {torchdevice.__version__} ")
    top = ok(run("--help"))
    for command in ("run", "info", "compare"):
        assert f"    {command} " in top.stdout, top.stdout
    info_help = ok(run("info", "--help"))
    assert info_help.stdout.startswith("usage: python -m torchdevice info [-h]")
    assert "host: " not in info_help.stdout  # help, not the command itself


def test_uncaught_exception_shows_only_the_scripts_frames(tmp_path):
    script = write(
        tmp_path / "nested.py",
        """\
        def inner():
            raise ValueError("deep")


        inner()
        """,
    )
    result = run("--no-report", script)
    assert result.returncode == 1
    frames = [
        line.strip() for line in result.stderr.splitlines() if line.strip().startswith("File ")
    ]
    assert frames == [
        f'File "{script}", line 5, in <module>',
        f'File "{script}", line 2, in inner',
    ], result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("ACTIVATE_TORCH_DEVICE", "maybe", "expected a boolean: 1, true, yes or on"),
        ("TORCH_ALLOW_REDIRECTS", "sure", "expected a boolean: 1, true, yes or on"),
        ("TORCHDEVICE_LOG_LEVEL", "LOUD", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ("TORCHDEVICE_HOST", "tpu", "expected 'cpu', 'mps', 'cuda' or 'simulated-mps'"),
    ],
)
def test_a_bad_variable_is_one_line_and_status_2(tmp_path, variable, value, accepted):
    marker = tmp_path / "ran"
    script = write(tmp_path / "marks.py", f"open({str(marker)!r}, 'w').close()\n")
    env = {**_env(), variable: value}
    result = subprocess.run(
        [sys.executable, "-m", "torchdevice", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback
    assert lines[0].startswith(f"python -m torchdevice: error: invalid {variable}={value!r}")
    assert accepted in lines[0]
    assert not marker.exists()


@pytest.mark.parametrize("where", ["below-a-file", "directory"])
def test_report_path_that_cannot_be_written_fails_before_the_script(tmp_path, where):
    """(Missing parent folders are made: tests/test_first_hour.py, the tools' one rule.)"""
    marker = tmp_path / "ran"
    script = write(tmp_path / "marks.py", f"open({str(marker)!r}, 'w').close()\n")
    target = tmp_path if where == "directory" else script / "such" / "r.json"
    result = run("--report", target, script)
    assert result.returncode == 2
    assert f"cannot write the report to {target}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not marker.exists()  # the script never started


@pytest.fixture(scope="module")
def missing_script_run(tmp_path_factory):
    """One launcher run on a script that does not exist (shared: a child costs ~2 s)."""
    missing = tmp_path_factory.mktemp("missing") / "no_such_script.py"
    return missing, run(missing)


def test_missing_script_names_the_file_and_fails(missing_script_run):
    missing, result = missing_script_run

    assert result.returncode != 0
    assert str(missing) in result.stderr
    assert REPORT_TITLE not in result.stderr


def test_missing_script_error_is_a_message_not_a_traceback(missing_script_run):
    """Like ``python missing.py``: one clear line naming the file, no torchdevice traceback."""
    missing, result = missing_script_run

    assert result.returncode != 0
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr, result.stderr


# -- the shipped example ---------------------------------------------------------------------


def test_example_trains_when_redirected():
    result = ok(run(EXAMPLE, "--epochs", "3", "--min-accuracy", "0.0", cwd=ROOT))

    assert "test accuracy" in result.stdout
    assert REPORT_TITLE in result.stderr
    assert EXAMPLE.name in result.stderr  # the report points into the example


@pytest.mark.skipif(torch.cuda.is_available(), reason="the example runs natively on CUDA")
def test_example_needs_cuda_natively():
    """Without the launcher it refuses to run here: the redirect is what makes it work."""
    result = python(EXAMPLE, "--epochs", "1", cwd=ROOT)

    assert result.returncode != 0
    assert "requires a CUDA GPU" in result.stderr


# -- the CI gate: --max-redirected-lines [N] -------------------------------------------------

#: Two lines written for CUDA (one of them called three times) and a line that asks for the
#: CPU, which no port changes.
DRIFTED = """\
import sys

import torch

for _ in range(3):
    x = torch.ones(2, device="cuda")
y = x.cuda()
z = torch.zeros(2, device="cpu")
print("sum", (y + z).sum().item())
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def _gate_lines(script: Path) -> list[str]:
    """The listing the gate prints for DRIFTED at ``script`` (run from its folder)."""
    ones, cuda = line_of(script, 'device="cuda"'), line_of(script, "x.cuda()")
    return [
        f"  {script.name}:{ones}: torch.ones(cuda) -> {CUDA_LANDS_ON}:0",
        f"  {script.name}:{cuda}: Tensor.cuda(cuda) -> {CUDA_LANDS_ON}:0",
    ]


def test_the_gate_fails_a_run_that_redirected_more_lines_than_allowed(tmp_path):
    script = write(tmp_path / "drifted.py", DRIFTED)

    alone = run("--max-redirected-lines", "--no-report", script.name, cwd=tmp_path)

    assert alone.returncode == 3, alone.stderr
    assert "sum 2.0" in alone.stdout  # the script ran in full first
    lines = alone.stderr.splitlines()
    heading = lines.index(
        "torchdevice: 2 line(s) of your code were redirected, more than the 0 allowed "
        "(--max-redirected-lines 0):"
    )
    assert lines[heading + 1 :] == _gate_lines(script)  # lines, not calls; the CPU line is not one
    one = run("--max-redirected-lines", "1", "--no-report", script.name, cwd=tmp_path)
    assert one.returncode == 3, one.stderr
    assert "more than the 1 allowed (--max-redirected-lines 1):" in one.stderr
    two = ok(run("--max-redirected-lines=2", "--no-report", script.name, cwd=tmp_path))
    assert "line(s) of your code were redirected" not in two.stderr
    ok(run("--no-report", script.name, cwd=tmp_path))  # no gate, no failure


def test_the_gate_keeps_the_scripts_own_failure_and_follows_the_report(tmp_path):
    script = write(tmp_path / "drifted.py", DRIFTED)

    result = run("--max-redirected-lines", "0", script.name, "5", cwd=tmp_path)

    assert result.returncode == 5, result.stderr  # the script's status, not the gate's
    assert result.stderr.index(REPORT_TITLE) < result.stderr.index("line(s) of your code")
    assert result.stderr.splitlines()[-2:] == _gate_lines(script)


def test_the_gate_counts_the_lines_of_the_processes_the_run_started(tmp_path):
    write(tmp_path / "child.py", 'import torch\ntorch.zeros(1, device="cuda")\n')
    script = write(
        tmp_path / "parent.py",
        """\
        import subprocess, sys
        subprocess.run([sys.executable, "child.py"], check=True)
        """,
    )

    result = run("--max-redirected-lines", "--no-report", script.name, cwd=tmp_path)

    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines()[-1] == f"  child.py:2: torch.zeros(cuda) -> {CUDA_LANDS_ON}:0"


def test_a_negative_gate_is_a_usage_error(tmp_path):
    script, marker = write(tmp_path / "m.py", "open('ran', 'w').close()\n"), tmp_path / "ran"
    result = run("--max-redirected-lines=-1", script, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "python -m torchdevice: error: argument --max-redirected-lines: expected a number "
        "of lines, 0 or more"
    )
    assert not marker.exists()


def test_no_report_keeps_the_line_that_says_torchdevice_is_on(tmp_path):
    script = redirecting_script(tmp_path)

    result = ok(run("--no-report", script))

    assert result.stderr.splitlines() == [result.stderr.splitlines()[0]]
    assert result.stderr.startswith(f"torchdevice: on, redirecting to {CUDA_LANDS_ON}")


# -- --native: the script without torchdevice, beside the host's accelerator ----------------

NATIVE_FACTS = """\
import json, sys
import torch
device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
activation = sys.modules.get("torchdevice.activation")
print("FACTS " + json.dumps({
    "device": str(torch.ones(2, device=device).device),
    "enabled": bool(activation and activation.is_enabled()),
    "sum": torch.arange(4.0, device=device).sum().item(),
}))
"""


def test_native_runs_the_script_without_torchdevice_on_the_simulated_mps_device(tmp_path):
    script = write(tmp_path / "ported.py", NATIVE_FACTS)

    beside = ok(run("run", "--native", "--host", "simulated-mps", script))
    plain = ok(run("--native", script))

    assert facts(beside) == {"device": "simgpu:0", "enabled": False, "sum": 6.0}
    assert facts(plain) == {"device": "cpu", "enabled": False, "sum": 6.0}
    assert beside.stderr.splitlines() == [
        "torchdevice: off (--native), running natively, beside simulated-mps "
        "(device type 'simgpu', as torch.accelerator reports it)"
    ]
    assert plain.stderr.splitlines() == ["torchdevice: off (--native), running natively"]


def test_native_fails_where_the_code_still_asks_for_cuda(tmp_path):
    script = write(tmp_path / "cuda.py", 'import torch\ntorch.ones(1, device="cuda")\n')

    result = run("--native", "--host", "simulated-mps", script)

    assert result.returncode == 1
    assert "Torch not compiled with CUDA enabled" in result.stderr.splitlines()[-1]
    assert REPORT_TITLE not in result.stderr


@pytest.mark.parametrize("option", ["--report=r.json", "--no-report", "--keep-cpu"])
def test_native_with_an_option_of_a_redirected_run_is_a_usage_error(tmp_path, option):
    script = write(tmp_path / "m.py", "open('ran', 'w').close()\n")
    result = run("--native", option, script, cwd=tmp_path)
    assert result.returncode == 2
    flag = option.split("=")[0]
    assert result.stderr.splitlines()[-1] == (
        f"python -m torchdevice: error: --native runs the script without torchdevice, so "
        f"{flag} cannot apply (a native run redirects nothing and has no migration report)"
    )
    assert not (tmp_path / "ran").exists()


# -- info's columns ----------------------------------------------------------------------------


def test_info_keeps_its_columns_straight_with_a_long_value(tmp_path):
    """``TORCHDEVICE_REPORT=<a long path> torchdevice info``: the long value used to push
    its row's last column out of line; now it keeps its line and the column continues
    below, where the other rows have it."""
    long_path = tmp_path / ("a-very-long-folder-name-" * 3) / "report.json"
    env = {**_env(), "TORCHDEVICE_REPORT": str(long_path)}
    command = [sys.executable, "-m", "torchdevice", "info"]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    lines = ok(done).stdout.splitlines()
    start = lines.index("settings (argument > environment > default; see docs/getting-started.md):")
    rows = lines[start + 1 : start + 12]
    path_row = next(i for i, line in enumerate(rows) if line.startswith("  report_path "))
    assert rows[path_row].rstrip().endswith(str(long_path))
    source = rows[path_row + 1]
    assert source.strip() == "TORCHDEVICE_REPORT from the environment"
    column = len(source) - len(source.lstrip())
    others = [row for row in rows if row.endswith(" default")]
    assert len(others) == 8, rows
    assert {row.index(" default") + 1 for row in others} == {column}
    policy = lines[lines.index("policy on this host:") + 1 : start - 1]
    column = policy[0].index("reason")
    for row in policy[1:]:  # every reason starts under the heading, after three cells
        assert row[column - 1] == " ", policy
        assert row[column] != " ", policy
        assert len(row[:column].split()) == 3, policy

"""One error rule for every command: one line on stderr, status 2, before any work starts.

Also what Ctrl-C does to the launcher (the script's frames only) and to ``compare`` (its
child stopped, a partial ``compare.md``). Each case runs the real command in a child
process: exit statuses, signals and what reaches stderr are process-level behaviour.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from childenv import clean_env, interruptible
from torchdevice.environment import BOOL_EXPECTED
from torchdevice.host import probe_host
from torchdevice.redirecting.policy import decide

pytestmark = pytest.mark.slow

PROG = "python -m torchdevice"


def _command(*args: str | Path) -> list[str]:
    command = [sys.executable]
    if sys.flags.dev_mode:
        command += ["-X", "dev"]
    return [*command, "-m", "torchdevice", *map(str, args)]


def run(*args: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m torchdevice ARGS`` to its end."""
    return subprocess.run(
        _command(*args),
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line of stderr of a command that failed with status 2."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def marking_script(tmp_path: Path) -> tuple[Path, Path]:
    """A script that leaves a file behind when it runs: ``(script, marker)``."""
    marker = tmp_path / "ran"
    script = tmp_path / "marks.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    return script, marker


def _interruptible(*args: str | Path) -> list[str]:
    """``python -m torchdevice ARGS``, started with SIGINT's default action."""
    return interruptible(_command(*args))


def _wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


# -- port ----------------------------------------------------------------------------------


def test_port_to_an_unwritable_patch_fails_before_the_script_runs(tmp_path: Path) -> None:
    script, marker = marking_script(tmp_path)
    target = script / "no" / "such" / "fix.patch"  # below a file (missing folders are made)
    line = one_line(run("port", "-o", target, script))
    assert line == (
        f"{PROG} port: error: cannot write the patch to {target}: "
        f"{str(script)!r} is a file, not a directory"
    )
    assert not marker.exists()


def test_port_with_a_bad_setting_fails_before_the_script_runs(tmp_path: Path) -> None:
    script, marker = marking_script(tmp_path)
    line = one_line(run("port", script, TORCHDEVICE_HOST="tpu"))
    assert line == (
        f"{PROG} port: error: invalid TORCHDEVICE_HOST='tpu' from the environment: "
        "expected 'cpu', 'mps', 'cuda' or 'simulated-mps'"
    )
    assert not marker.exists()


# -- run -m --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("no_such_module_here", "No module named no_such_module_here"),
        ("json.no_such_part", "No module named json.no_such_part"),
        (
            "json",
            "No module named json.__main__; 'json' is a package and cannot be directly executed",
        ),
    ],
)
def test_a_missing_module_is_one_line_and_no_report(module: str, message: str) -> None:
    """``python -m nosuchmod`` says the same in one line (with status 1; ours is 2, the
    status of every usage error of the command, a missing script's included)."""
    result = run("-m", module)
    assert one_line(result) == f"{PROG}: error: {message}"
    assert result.stdout == ""  # no report, empty or not


# -- Ctrl-C of the launcher ------------------------------------------------------------------


def test_ctrl_c_shows_only_the_scripts_frames(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = tmp_path / "waits.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import time


            def wait():
                open({str(ready)!r}, "w").close()
                time.sleep(120)


            wait()
            """
        ),
        encoding="utf-8",
    )
    process = subprocess.Popen(
        _interruptible("--no-report", script),
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(ready, process)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=300)  # the CI box may be loaded
    finally:
        process.kill()
    # Python's own ending for an uncaught KeyboardInterrupt: death by SIGINT (130 in a shell)
    assert process.returncode in (-signal.SIGINT, 128 + signal.SIGINT), stderr
    frames = [line.strip() for line in stderr.splitlines() if line.strip().startswith("File ")]
    assert frames[:2] == [
        f'File "{script}", line 9, in <module>',
        f'File "{script}", line 6, in wait',
    ], stderr
    assert all(str(script) in frame for frame in frames), stderr
    assert stderr.rstrip().endswith("KeyboardInterrupt")


# -- compare -------------------------------------------------------------------------------


def test_compare_rejects_an_unknown_pytest_option_before_running_anything(tmp_path: Path) -> None:
    tests = tmp_path / "test_marks.py"
    marker = tmp_path / "ran"
    tests.write_text(f"def test_marks():\n    open({str(marker)!r}, 'w').close()\n")
    output = tmp_path / "out"
    result = run("compare", "--output", output, "--bogus", tests, cwd=tmp_path)
    assert one_line(result) == f"{PROG} compare: error: pytest: unrecognized arguments: --bogus"
    assert not output.exists()
    assert not marker.exists()


def test_compare_stops_after_the_native_run_finds_a_missing_path(tmp_path: Path) -> None:
    """pytest only looks for its paths when it starts collecting: the native run says it,
    and the redirected run never starts."""
    output = tmp_path / "out"
    result = run("compare", "--quiet", "--output", output, "no_such_dir", cwd=tmp_path)
    assert one_line(result) == (
        f"{PROG} compare: error: pytest: file or directory not found: no_such_dir"
    )
    assert not (output / "redirected.log").exists()
    assert not (output / "compare.md").exists()


def test_compare_rejects_a_bad_setting_before_running_anything(tmp_path: Path) -> None:
    output = tmp_path / "out"
    result = run("compare", "--output", output, cwd=tmp_path, TORCHDEVICE_FALLBACK="maybe")
    assert one_line(result) == (
        f"{PROG} compare: error: invalid TORCHDEVICE_FALLBACK='maybe' from the environment: "
        f"{BOOL_EXPECTED}"
    )
    assert not output.exists()


def test_ctrl_c_of_compare_stops_its_child_and_writes_what_finished(tmp_path: Path) -> None:
    """Only compare is signalled (as ``kill -INT``): its pytest child must not outlive it."""
    started = tmp_path / "started"
    (tmp_path / "test_suite.py").write_text(
        textwrap.dedent(
            f"""\
            import os
            import time


            def test_fast():
                pass


            def test_slow():
                with open({str(started)!r}, "w") as handle:
                    handle.write(str(os.getpid()))
                time.sleep(120)
            """
        ),
        encoding="utf-8",
    )
    output = tmp_path / "out"
    process = subprocess.Popen(
        _interruptible(
            "compare", "--quiet", "--output", output, "-p", "no:cacheprovider", "test_suite.py"
        ),
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(started, process)
        child = int(started.read_text())
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)  # the CI box may be loaded
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert stderr.splitlines() == [
        f"{PROG} compare: interrupted during the native run; what finished is in "
        f"{output / 'compare.md'}"
    ]
    assert stdout == ""
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    data = json.loads((output / "compare.json").read_text())
    assert data["interrupted"] == "native"
    native = {test["nodeid"]: test["native"]["outcome"] for test in data["tests"]}
    assert native == {"test_suite.py::test_fast": "passed"}
    assert data["runs"]["redirected"]["exit_code"] is None  # never started
    markdown = (output / "compare.md").read_text()
    assert "- **interrupted** (Ctrl-C) during the native run" in markdown


# -- info ----------------------------------------------------------------------------------


def test_info_rejects_an_invalid_host() -> None:
    line = one_line(run("info", TORCHDEVICE_HOST="tpu"))
    assert line == (
        f"{PROG} info: error: invalid TORCHDEVICE_HOST='tpu' from the environment: "
        "expected 'cpu', 'mps', 'cuda' or 'simulated-mps'"
    )


def test_info_json_shows_the_effective_settings_and_where_they_came_from() -> None:
    result = run("info", "--json", TORCHDEVICE_KEEP_CPU="yes", TORCHDEVICE_LOG_LEVEL="debug")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    settings = {row["name"]: row for row in data["settings"]}
    assert settings["keep_cpu"] == {
        "name": "keep_cpu",
        "value": True,
        "variable": "TORCHDEVICE_KEEP_CPU",
        "source": "TORCHDEVICE_KEEP_CPU from the environment",
    }
    assert settings["log_level"]["value"] == "DEBUG"
    assert settings["fallback"] == {
        "name": "fallback",
        "value": True,
        "variable": "TORCHDEVICE_FALLBACK",
        "source": "default",
    }
    assert settings["cpu_override"]["variable"] is None
    host = probe_host()
    assert data["host"]["kind"] == host.kind
    cuda = next(row for row in data["policy"] if row["request"] == "cuda")
    assert cuda["device"] == str(decide("cuda", host).device)
    assert data["enabled_at_import"] is False


def test_info_text_lists_the_settings() -> None:
    result = run("info", TORCHDEVICE_FALLBACK="off")
    assert result.returncode == 0, result.stderr
    rows = {
        line.split()[0]: line.split(None, 2)[1:]
        for line in result.stdout.split("settings (", 1)[1].splitlines()[1:]
        if line.startswith("  ") and not line.strip().startswith("enabled")
    }
    assert rows["fallback"] == ["False", "TORCHDEVICE_FALLBACK from the environment"]
    assert rows["keep_cpu"] == ["False", "default"]
    assert rows["host"] == ["unset", "default"]


def test_info_says_which_tier_a_run_would_use() -> None:
    default = run("info")
    tier = run("info", TORCHDEVICE_INTERCEPT="entry-points")
    assert default.returncode == tier.returncode == 0, default.stderr + tier.stderr
    assert "  tier: mode: a function mode sees every torch call" in default.stdout
    assert (
        "  tier: entry-points: wrappers on the functions that take a device; every other op "
        "runs native, with no function mode (docs/tiers.md)"
    ) in tier.stdout
    assert "  intercept      entry-points TORCHDEVICE_INTERCEPT from the environment" in tier.stdout
    bad = one_line(run("info", TORCHDEVICE_INTERCEPT="wrappers"))
    assert bad.startswith(f"{PROG} info: error: invalid TORCHDEVICE_INTERCEPT='wrappers'")
    assert "'mode'" in bad
    assert "'entry-points'" in bad


def test_info_text_and_json_render_one_table() -> None:
    """``info`` and ``info --json`` are two renderings of one :func:`info_dict`: every
    policy row of the object is a line of the text, decided as the policy decides."""
    from torchdevice.host import Host
    from torchdevice.tools.cli import info

    host = Host.cpu()
    data = info.info_dict(host, info.effective_settings({}))
    text = info.render(data).splitlines()
    start = text.index("policy on this host:") + 2  # after the column titles
    table = text[start : start + len(data["policy"])]
    assert text[start + len(data["policy"])] == ""  # the table ends there
    assert len(data["policy"]) == 7
    for line, row in zip(table, data["policy"], strict=True):
        label = "none" if row["request"] is None else repr(row["request"])
        assert line.split()[0] == label
        if "error" in row:
            assert line.split()[1] == "error"
            assert line.endswith(row["error"])
            continue
        decision = decide(row["request"], host)
        assert (row["device"], row["action"], row["reason"]) == (
            str(decision.device),
            decision.action,
            decision.reason,
        )
        assert line.split(None, 3)[1:] == [row["device"], row["action"], row["reason"]]
    assert json.loads(json.dumps(data)) == data  # what --json prints is the same object

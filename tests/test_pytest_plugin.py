"""The pytest plugin (``--torchdevice``, the fixture, the marker), run through ``pytester``.

Runs that switch torchdevice on go through ``runpytest_subprocess``: enabling in this
process would be undone at unconfigure, but pytester's in-process runs also drop the
modules they import from ``sys.modules``, which torch's lazily imported parts do not
survive. Runs that leave torchdevice off stay in process (fast).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from torchdevice import ledger
from torchdevice.environment import BOOL_EXPECTED
from torchdevice.reporting import MigrationReport, merge

pytest_plugins = ("pytester",)

#: The exact expectations below are for a host without CUDA (redirects go to the CPU).
cpu_host_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason="expected lines are those of a host without CUDA"
)


def test_options_are_in_their_own_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "torchdevice: run CUDA-first tests redirected:",
            "  --torchdevice         redirect the whole run: every device request goes to the",
            "  --torchdevice-report=PATH",
        ]
    )


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.torchdevice_native: run this test natively (torchdevice off) "
            "even under --torchdevice"
        ]
    )


def test_without_the_option_nothing_changes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os
        import sys

        import pytest
        import torch
        import torchdevice

        CUDA_MODULE = sys.modules["torch.cuda"]

        def test_off():
            assert not torchdevice.is_enabled()
            assert "ACTIVATE_TORCH_DEVICE" not in os.environ
            assert torch.cuda is CUDA_MODULE

        @pytest.mark.torchdevice_native
        def test_marker_alone_is_a_no_op():
            assert not torchdevice.is_enabled()
        """
    )
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("torchdevice: *")
    assert "ACTIVATE_TORCH_DEVICE" not in result.stdout.str()


@cpu_host_only
def test_fixture_redirects_one_test_and_restores(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os

        import pytest
        import torch
        import torchdevice

        def test_redirected(torchdevice):
            assert torchdevice.host.kind == "cpu"
            assert torch.zeros(2, device="cuda").device.type == "cpu"
            assert torch.cuda.is_available()

        def test_native_afterwards():
            assert not torchdevice.is_enabled()
            assert "ACTIVATE_TORCH_DEVICE" not in os.environ
            with pytest.raises((AssertionError, RuntimeError)):
                torch.zeros(2, device="cuda")

        @pytest.mark.torchdevice_native
        def test_fixture_wins_over_the_marker(torchdevice):
            assert torchdevice is not None and torch.cuda.is_available()
        """
    )
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "test_fixture_redirects_one_test_and_restores.py::test_redirected PASSED*",
            "test_fixture_redirects_one_test_and_restores.py::test_native_afterwards PASSED*",
            "test_fixture_redirects_one_test_and_restores.py::"
            "test_fixture_wins_over_the_marker PASSED*",
            "*= 3 passed in *",
        ]
    )
    assert result.ret == 0


SUITE_CONFTEST = """
import torch

# Evaluated when the initial conftests load: before pytest_configure, before any test module.
CUDA_AT_CONFTEST_IMPORT = torch.cuda.is_available()
"""

SUITE = """
import os
import subprocess
import sys

import pytest
import torch
import torchdevice
from torchdevice import ledger

import conftest

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_conftest_saw_redirected_answers():
    assert conftest.CUDA_AT_CONFTEST_IMPORT


@requires_cuda
def test_gpu_only_runs():
    assert torch.ones(2, device="cuda").device.type == "cpu"


@pytest.mark.torchdevice_native
def test_native():
    assert not torchdevice.is_enabled()
    assert not torch.cuda.is_available()
    # The run's variable for its children outlives the disable(): the ledger holds it alone.
    assert os.environ["ACTIVATE_TORCH_DEVICE"] == "1"
    assert [(c.what, c.lifetime) for c in ledger.changes()] == [
        ("$ACTIVATE_TORCH_DEVICE", "pytest session")
    ]


def test_redirected_again_after_the_native_test():
    assert torchdevice.is_enabled()
    assert torch.zeros(1, device="cuda:0").device.type == "cpu"


def test_child_pytest_is_redirected_too():
    assert os.environ["ACTIVATE_TORCH_DEVICE"] == "1"
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "child_check.py"],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0, child.stdout + child.stderr
    assert "1 passed" in child.stdout
"""

CHILD = """
import torch
import torchdevice

CUDA_AT_IMPORT = torch.cuda.is_available()

def test_child():
    assert CUDA_AT_IMPORT and torchdevice.is_enabled()
"""


@cpu_host_only
def test_whole_suite_redirected_from_before_conftest_import(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SUITE_CONFTEST)
    pytester.makepyfile(test_suite=SUITE, child_check=CHILD)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "--torchdevice", "--torchdevice-report", "report.json"
    )
    result.stdout.fnmatch_lines(
        [
            "torchdevice: redirecting to cpu (cpu host, *)",
            "test_suite.py::test_conftest_saw_redirected_answers PASSED*",
            "test_suite.py::test_gpu_only_runs PASSED*",
            "test_suite.py::test_native PASSED*",
            "test_suite.py::test_redirected_again_after_the_native_test PASSED*",
            "test_suite.py::test_child_pytest_is_redirected_too PASSED*",
            "torchdevice: * redirected call(s) at * call site(s); "
            "migration report written to report.json",
            "*= 5 passed in *",
        ]
    )
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["host"].startswith("cpu host")
    redirects = sorted(
        (e["function"], e["api"], e["requested"])
        for e in report["entries"]
        if e["kind"] == "redirect"
    )
    assert redirects == [
        ("test_gpu_only_runs", "torch.ones", "cuda"),
        ("test_redirected_again_after_the_native_test", "torch.zeros", "cuda:0"),
    ]
    # The suite's own torch.cuda.is_available() calls are lines to port too.
    asked = {
        (Path(e["file"]).name, e["api"]) for e in report["entries"] if e["kind"] == "device-api"
    }
    assert ("conftest.py", "torch.cuda.is_available") in asked
    assert ("test_suite.py", "torch.cuda.is_available") in asked


XDIST_SUITE = """
import os
from pathlib import Path

import pytest
import torch
import torchdevice

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def ran(name):
    Path(__file__).with_name(f"ran-{os.environ['PYTEST_XDIST_WORKER']}-{name}").touch()


@requires_cuda
def test_one():
    ran("one")
    assert torch.ones(1, device="cuda").device.type == "cpu"


@requires_cuda
def test_two():
    ran("two")
    for _ in range(3):
        torch.zeros(1, device="cuda")


@pytest.mark.torchdevice_native
def test_native():
    ran("native")
    assert not torchdevice.is_enabled()


def test_fixture_nests(torchdevice):
    ran("fixture")
    assert torch.randn(2, device="cuda").device.type == "cpu"
"""


@cpu_host_only
def test_xdist_workers_are_redirected_and_reports_merged(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dist=XDIST_SUITE)
    result = pytester.runpytest_subprocess(
        "-p",
        "xdist",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "--torchdevice",
        "--torchdevice-report",
        "out/report.txt",
    )
    result.stdout.fnmatch_lines(
        [
            "torchdevice: redirecting to cpu (cpu host, *)",
            "created: 2/2 workers",
            "torchdevice: * redirected call(s) at * call site(s); "
            "migration report written to out/report.txt",
            "*= 4 passed in *",
        ]
    )
    workers = {path.name.split("-")[1] for path in pytester.path.glob("ran-*")}
    assert workers == {"gw0", "gw1"}
    text = (pytester.path / "out" / "report.txt").read_text().splitlines()
    assert text[0].startswith("torchdevice migration report (cpu host, ")
    # the controller and its two workers, each counted once (no part file on top of the
    # report a worker sends through xdist)
    assert text[0].endswith(" in 3 processes")
    redirects = [line for line in text[1:] if "[redirect:" in line]
    assert sorted(line.split(": ", 1)[1].split(" ->")[0] for line in redirects) == [
        "torch.ones(cuda)",
        "torch.randn(cuda)",
        "torch.zeros(cuda)",
    ]
    assert sum(int(line.split(" x")[-1].split(" ")[0]) for line in redirects) == 5


def test_merge_adds_counts_of_the_same_call_site() -> None:
    def entry(line: int, count: int) -> dict[str, object]:
        return {
            "file": "a.py",
            "line": line,
            "function": "f",
            "kind": "redirect",
            "api": "torch.ones",
            "requested": "cuda",
            "decided": "cpu:0",
            "reason": "why",
            "count": count,
        }

    raw = [{"entries": [entry(1, 2), entry(2, 1)]}, {"entries": [entry(1, 3)], "ranks": [1]}, {}]
    merged = merge([MigrationReport.from_dict(r) for r in raw], "cpu host")
    assert [(e.site.lineno, e.count) for e in merged.entries] == [(1, 5), (2, 1)]
    assert merged.total == 6
    assert merged.host == "cpu host"
    assert (merged.processes, merged.ranks) == (3, (1,))
    assert MigrationReport.from_dict(merged.to_dict()) == merged


@pytest.mark.parametrize(
    ("variable", "value"),
    [("ACTIVATE_TORCH_DEVICE", "maybe"), ("TORCH_ALLOW_REDIRECTS", "sure")],
)
def test_a_bad_activation_variable_is_a_usage_error_under_the_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """Not a crash at plugin load with a traceback: pytest's usage error, one line."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv(variable, value)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--torchdevice")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().strip().splitlines() == [
        f"ERROR: invalid {variable}={value!r} from the environment: {BOOL_EXPECTED}"
    ]
    assert result.stdout.str() == ""


def test_a_bad_activation_variable_does_not_stop_a_run_without_the_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project that never asked for torchdevice (it may not even use torch) runs; the
    variable is named in a configuration warning, and torchdevice stays off."""
    pytester.makepyfile(
        """
        import sys

        def test_no_torch_here():
            assert "torch" not in sys.modules
        """
    )
    monkeypatch.setenv("ACTIVATE_TORCH_DEVICE", "maybe")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*PytestConfigWarning: invalid ACTIVATE_TORCH_DEVICE='maybe' from the environment: "
            "expected a boolean*; torchdevice stays off"
        ]
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TORCHDEVICE_LOG_LEVEL", "LOUD", "expected 'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ("TORCHDEVICE_HOST", "tpu", "expected 'cpu', 'mps', 'cuda' or 'simulated-mps'"),
        ("TORCHDEVICE_KEEP_CPU", "maybe", BOOL_EXPECTED),
    ],
)
def test_a_bad_setting_is_a_usage_error_under_the_option(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    message: str,
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv(variable, value)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--torchdevice")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().strip().splitlines() == [
        f"ERROR: invalid {variable}={value!r} from the environment: {message}"
    ]


def test_a_failed_start_leaves_the_environment_and_the_ledger_as_they_were(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: the variables the run set for its children before the bad setting
    stopped it are undone through the ledger, before any test."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    for variable in ("ACTIVATE_TORCH_DEVICE", "TORCHDEVICE_HOST", "TORCHDEVICE_INTERCEPT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TORCHDEVICE_KEEP_CPU", "maybe")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--torchdevice-host", "cpu", "--torchdevice-intercept", "mode"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    for variable in ("ACTIVATE_TORCH_DEVICE", "TORCHDEVICE_HOST", "TORCHDEVICE_INTERCEPT"):
        assert variable not in os.environ
    assert ledger.changes() == []


# -- the summary line, ini keys, UnsupportedFeatureError as a skip ---------------------------

UNSUPPORTED_SUITE = """
import pytest
import torch


def test_graph():
    torch.cuda.CUDAGraph()


@pytest.mark.torchdevice_skip_unsupported
def test_graph_marked():
    torch.cuda.CUDAGraph()


@pytest.fixture
def graph():
    return torch.cuda.CUDAGraph()


@pytest.mark.torchdevice_skip_unsupported
def test_graph_in_a_fixture(graph):
    pass


def test_redirects():
    for _ in range(2):
        torch.ones(1, device="cuda")
"""


@cpu_host_only
def test_unsupported_features_fail_unless_the_marker_asks_for_a_skip(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_unsupported=UNSUPPORTED_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--torchdevice", "-rfs")
    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [1] test_unsupported.py:9: unsupported on this host under torchdevice: "
            "torch.cuda.CUDAGraph",
            "SKIPPED [1] test_unsupported.py:19: unsupported on this host under torchdevice: "
            "torch.cuda.CUDAGraph",
        ]
    )
    result.stdout.fnmatch_lines(
        ["FAILED test_unsupported.py::test_graph - torchdevice.errors.UnsupportedFeatur*"]
    )
    # One summary line on every redirected run, a report path or not: the two torch.ones
    # calls of one line (the refused graphs are not redirected calls).
    result.stdout.fnmatch_lines(
        [
            "torchdevice: 2 redirected call(s) at 1 call site(s); "
            "--torchdevice-report=PATH writes the migration report",
        ]
    )


@cpu_host_only
def test_the_option_skips_every_unsupported_feature(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unsupported=UNSUPPORTED_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--torchdevice", "--torchdevice-skip-unsupported"
    )
    result.assert_outcomes(passed=1, skipped=3)


@cpu_host_only
def test_ini_keys_set_the_options(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        torchdevice = true
        torchdevice_report = out/report.json
        torchdevice_skip_unsupported = true
        """
    )
    pytester.makepyfile(test_unsupported=UNSUPPORTED_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(
        [
            "torchdevice: redirecting to cpu (cpu host, *)",
            "torchdevice: 2 redirected call(s) at 1 call site(s); "
            "migration report written to out/report.json",
        ]
    )
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert [(e["api"], e["count"]) for e in report["entries"] if e["kind"] == "redirect"] == [
        ("torch.ones", 2)
    ]


def test_ini_keys_are_listed_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "  torchdevice (bool):*redirect the whole run (as --torchdevice)",
            "  torchdevice_report (string):*",
            "  torchdevice_skip_unsupported (bool):*",
        ]
    )


TIER_SUITE = """
import os, subprocess, sys
import torch
from torch.overrides import _get_current_function_mode_stack

CONFTEST_SAW = type(torch.device).__name__  # the stand-in from before any test module


def test_the_run_is_in_the_entry_points_tier():
    assert CONFTEST_SAW == "_DeviceClass"
    assert list(_get_current_function_mode_stack()) == []  # no function mode
    assert torch.zeros(1, device="cuda").device == torch.device("cpu")
    assert str(torch.device(0)) == "cuda:0"
    assert os.environ["TORCHDEVICE_INTERCEPT"] == "entry-points"
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(type(torch.device).__name__)"],
        capture_output=True, text=True, check=True,
    )
    assert child.stdout.strip() == "_DeviceClass"  # the child is in the tier too
"""


@cpu_host_only
def test_the_intercept_option_runs_the_suite_in_that_tier(pytester: pytest.Pytester) -> None:
    """``--torchdevice-intercept entry-points`` implies ``--torchdevice``, and reaches the
    children of the run through ``TORCHDEVICE_INTERCEPT``."""
    pytester.makeconftest("import torch\nSAW = type(torch.device).__name__\n")
    pytester.makepyfile(test_tier=TIER_SUITE)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "--torchdevice-intercept", "entry-points"
    )
    result.stdout.fnmatch_lines(
        [
            "torchdevice: redirecting to cpu (cpu host, *); entry-points tier (no function mode)",
            "test_tier.py::test_the_run_is_in_the_entry_points_tier PASSED*",
        ]
    )
    result.assert_outcomes(passed=1)


def test_an_unknown_tier_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--torchdevice-intercept", "modes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--torchdevice-intercept: invalid choice: 'modes'*"])


GATED = """
import torch


def test_one():
    for _ in range(3):
        assert torch.ones(2, device="cuda").sum().item() == 2


def test_two():
    torch.cuda.synchronize()
"""


@cpu_host_only
def test_the_gate_fails_a_passing_run_that_redirected_more_lines_than_allowed(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_gated=GATED)
    option = "--torchdevice-max-redirected-lines"

    failed = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"{option}=1")
    passed = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"{option}=2")
    alone = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_gated.py", option)

    failed.assert_outcomes(passed=2)  # the tests pass; the run fails (as pytest-cov's gate)
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    failed.stdout.fnmatch_lines(
        [
            "torchdevice: 4 redirected call(s) at 2 call site(s); *",
            "torchdevice: 2 line(s) of your code were redirected, more than the 1 allowed "
            f"({option} 1):",
            "  test_gated.py:6: torch.ones(cuda) -> cpu:0",
            "  test_gated.py:10: torch.cuda.synchronize(cuda) -> cpu:0",
        ]
    )
    assert passed.ret == pytest.ExitCode.OK
    assert "line(s) of your code were redirected" not in passed.stdout.str()
    assert alone.ret == pytest.ExitCode.TESTS_FAILED  # given alone: 0 lines allowed, and
    alone.stdout.fnmatch_lines([f"*more than the 0 allowed ({option} 0):"])  # it redirects


def test_the_gate_before_a_test_path_says_how_to_write_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gated=GATED)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--torchdevice-max-redirected-lines", "test_gated.py"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*argument --torchdevice-max-redirected-lines: expected a number of lines, not "
            "'test_gated.py': write --torchdevice-max-redirected-lines=0 (or =N), or put it "
            "after the test paths"
        ]
    )


@cpu_host_only
def test_the_gates_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gated=GATED)
    pytester.makeini("[pytest]\ntorchdevice_max_redirected_lines = 1\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*more than the 1 allowed (--torchdevice-max-redirected-lines 1):"]
    )
    pytester.makeini("[pytest]\ntorchdevice_max_redirected_lines = some\n")
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(
        ["ERROR: torchdevice_max_redirected_lines = 'some': expected a number of lines, 0 or more"]
    )

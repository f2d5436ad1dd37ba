"""``torchdevice compare``: the categories, the reporting plugin, and a run on the sample suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from torchdevice.tools import cli
from torchdevice.tools.compare import (
    RunResult,
    TestResult,
    categorize,
    compare_runs,
    progress,
    read_results,
    render_markdown,
    runner,
)
from torchdevice.tools.compare.runner import _split
from torchdevice.tools.compare_plugin import ENV_VAR, first_line

pytest_plugins = ("pytester",)

SAMPLE = Path(__file__).parent / "sample_suite"


@pytest.mark.parametrize(
    ("native", "redirected", "category"),
    [
        ("passed", "failed", "regression"),
        ("passed", "error", "regression"),
        ("xfailed", "xpassed", "regression"),
        ("skipped", "passed", "redirected_only"),
        ("skipped", "failed", "redirected_only"),
        ("absent", "passed", "redirected_only"),
        ("passed", "skipped", "native_only"),
        ("failed", "absent", "native_only"),
        ("failed", "passed", "fixed"),
        ("passed", "passed", "same"),
        ("failed", "error", "same"),
        ("skipped", "skipped", "same"),
    ],
)
def test_categories(native: str, redirected: str, category: str) -> None:
    assert categorize(TestResult(native), TestResult(redirected)) == category  # type: ignore[arg-type]


def test_totals_and_pass_rate_count_verdicts_only() -> None:
    run = RunResult("native", [])
    read_results(
        [
            '{"event": "collected", "count": 5}',
            '{"event": "test", "nodeid": "a", "outcome": "passed"}',
            '{"event": "test", "nodeid": "b", "outcome": "passed", "redirects": 2, "fallbacks": 1}',
            '{"event": "test", "nodeid": "c", "outcome": "failed", "message": "boom"}',
            '{"event": "test", "nodeid": "d", "outcome": "skipped"}',
            '{"event": "test", "nodeid": "e", "outcome": "xfailed"}',
            "",
        ],
        run,
    )
    assert run.collected == 5
    assert run.tests["b"] == TestResult("passed", "", 0.0, 2, 1)
    totals = run.totals()
    assert totals == {
        "tests": 5,
        "passed": 2,
        "failed": 1,
        "error": 0,
        "skipped": 1,
        "xfailed": 1,
        "xpassed": 0,
        "pass_rate": 0.6667,
    }


def test_markdown_lists_the_regressions_with_their_counts() -> None:
    native = RunResult("native", [], exit_code=0)
    native.tests = {"t::a": TestResult("passed"), "t::b": TestResult("skipped", "needs a GPU")}
    redirected = RunResult("redirected", [], exit_code=1)
    redirected.tests = {
        "t::a": TestResult("failed", "AssertionError: a | b", 0.1, 3, 1),
        "t::b": TestResult("passed", "", 0.1, 1, 0),
    }
    text = render_markdown(compare_runs(native, redirected, ["-k", "x"], "cpu host, test"))
    lines = text.splitlines()
    assert "- pytest arguments: `-k x`" in lines
    assert "| pass rate (passed / passed+failed+error) | 100.0% | 50.0% |" in lines
    assert "## Pass natively, fail redirected (1)" in lines
    assert "| `t::a` | failed | AssertionError: a \\| b | 3 | 1 |" in lines
    assert "## Run only redirected (1)" in lines
    assert "| `t::b` | passed |  | needs a GPU |" in lines
    assert "## Fail natively, pass redirected (0)" in lines


def test_our_options_come_first_the_rest_is_pytests() -> None:
    assert _split(["--output", "o", "-k", "x", "tests"]) == (
        ["--output", "o"],
        ["-k", "x", "tests"],
    )
    assert _split(["--quiet", "--", "--output"]) == (["--quiet"], ["--output"])
    assert _split(["tests", "--quiet"]) == ([], ["tests", "--quiet"])
    assert _split(["--host", "simulated-mps", "--host=cpu", "-x"]) == (
        ["--host", "simulated-mps", "--host=cpu"],
        ["-x"],
    )


def test_the_plugin_is_named_when_pytest_will_not_load_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Installed (as here), the pytest11 entry point loads it; naming it again would register
    # it twice. From a source tree on PYTHONPATH there is no entry point to load it.
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    assert runner._plugin_autoloads()
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert not runner._plugin_autoloads()
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.setattr(runner.importlib.metadata, "entry_points", lambda group: [])
    assert not runner._plugin_autoloads()


def test_first_line_skips_blank_lines() -> None:
    assert first_line("\n\n  RuntimeError: x  \nmore") == "RuntimeError: x"


def test_reporting_plugin_folds_every_kind_of_outcome(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_kinds="""
        import pytest

        @pytest.fixture
        def broken_setup():
            raise RuntimeError("setup broke\\nsecond line")

        @pytest.fixture
        def broken_teardown():
            yield
            raise ValueError("teardown broke")

        def test_pass(record_property):
            record_property("torchdevice_redirects", 4)
            record_property("torchdevice_fallbacks", 0)

        def test_fail():
            assert 1 == 2

        def test_skip():
            pytest.skip("no GPU here")

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            raise AssertionError

        @pytest.mark.xfail(reason="known", strict=False)
        def test_xpass():
            pass

        def test_setup_error(broken_setup):
            pass

        def test_teardown_error(broken_teardown):
            pass
        """,
        test_broken="import nonexistent_module_for_compare",
    )
    log = pytester.path / "results.jsonl"
    monkeypatch.setenv(ENV_VAR, str(log))
    result = pytester.runpytest(
        "-p", "torchdevice.tools.compare_plugin", "--continue-on-collection-errors"
    )
    assert result.ret == 1
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r for r in records if r["event"] != "test"] == [
        {"event": "collected", "count": 7},  # after the collection error's line
        {"event": "finished", "exitstatus": 1},
    ]
    got = {
        r["nodeid"]: (r["outcome"], r["message"], r["redirects"])
        for r in records
        if r["event"] == "test"
    }
    assert got == {
        "test_broken.py": (
            "error",
            f"ImportError while importing test module '{pytester.path / 'test_broken.py'}'.",
            None,
        ),
        "test_kinds.py::test_pass": ("passed", "", 4),
        "test_kinds.py::test_fail": ("failed", "assert 1 == 2", None),
        "test_kinds.py::test_skip": ("skipped", "no GPU here", None),
        "test_kinds.py::test_xfail": ("xfailed", "known", None),
        "test_kinds.py::test_xpass": ("xpassed", "", None),
        "test_kinds.py::test_setup_error": ("error", "RuntimeError: setup broke", None),
        "test_kinds.py::test_teardown_error": ("error", "ValueError: teardown broke", None),
    }


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="the sample suite's numbers are those of a host without CUDA"
)
def test_compare_the_sample_suite_under_xdist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out"
    status = cli.main(["compare", "--output", str(output), str(SAMPLE), "-p", "xdist", "-n", "2"])
    out, err = capsys.readouterr()
    assert status == 1  # one test passes natively and fails redirected
    assert out.splitlines() == [
        "native:     5 passed, 0 failed, 0 errors, 3 skipped; pass rate 100.0%",
        "redirected: 6 passed, 2 failed, 0 errors, 0 skipped; pass rate 75.0%",
        "1 pass natively but fail redirected; 3 run only redirected",
        f"wrote {output / 'compare.json'} and {output / 'compare.md'}",
    ]
    progress = [line for line in err.splitlines() if "exit status" in line]
    assert progress[0].startswith(
        "native: 8/8 tests done (5 passed, 0 failed, 0 errors, 3 skipped) in "
    )
    assert progress[1].startswith(
        "redirected: 8/8 tests done (6 passed, 2 failed, 0 errors, 0 skipped) in "
    )
    assert progress[-1].endswith(" s, exit status 1")

    data = json.loads((output / "compare.json").read_text())
    assert data["format"] == "torchdevice-compare/1"
    assert data["runs"]["native"]["totals"]["pass_rate"] == 1.0
    assert data["runs"]["redirected"]["totals"]["pass_rate"] == 0.75
    assert data["runs"]["native"]["collected"] == data["runs"]["redirected"]["collected"] == 8
    assert data["regressions"] == ["test_host.py::test_device_matches_request"]
    assert data["redirected_only"] == [
        "test_gpu.py::test_cuda_matmul",
        "test_gpu.py::test_peak_memory",
        "test_gpu.py::test_tensor_is_on_cuda",
    ]
    assert data["native_only"] == data["fixed"] == []
    tests = {t["nodeid"]: t for t in data["tests"]}
    regression = tests["test_host.py::test_device_matches_request"]["redirected"]
    assert (regression["outcome"], regression["message"]) == (
        "failed",
        "AssertionError: assert 'cpu' == 'cuda'",
    )
    # torch.cuda.is_available() (the facade answered) and torch.arange(device="cuda")
    assert (regression["redirects"], regression["fallbacks"]) == (2, 0)
    native_marked = tests["test_host.py::test_native_even_under_torchdevice"]
    assert native_marked["redirected"]["outcome"] == "passed"
    assert native_marked["redirected"]["redirects"] == 0

    md = (output / "compare.md").read_text().splitlines()
    assert "| pass rate (passed / passed+failed+error) | 100.0% | 75.0% |" in md
    assert (
        "| `test_host.py::test_device_matches_request` | failed "
        "| AssertionError: assert 'cpu' == 'cuda' | 2 | 0 |"
    ) in md
    assert (
        "| `test_gpu.py::test_tensor_is_on_cuda` | failed "
        "| AssertionError: assert 'cpu' == 'cuda' | needs a CUDA GPU |"
    ) in md
    report = json.loads((output / "migration-report.json").read_text())
    assert report["total_calls"] >= 3


@pytest.mark.parametrize(
    ("done", "collected", "elapsed", "expected", "left"),
    [
        (2, 10, 4.0, None, 16.0),  # the run's own pace: 2 s a test, 8 tests left
        (2, 10, 4.0, 100.0, 16.0),  # its own pace wins once it has one
        (0, 10, 4.0, 30.0, 26.0),  # before a test finished: the other run's duration
        (0, None, 40.0, 30.0, 0.0),  # longer than the other run took: nothing left to say
        (0, None, 1.0, None, None),  # nothing to go by
        (12, 10, 4.0, None, 0.0),  # more results than collected (reruns): none left
    ],
)
def test_compare_estimates_what_is_left(done, collected, elapsed, expected, left) -> None:
    assert progress.estimate_left(done, collected, elapsed, expected) == left


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "about 5 s left"),
        (23, "about 25 s left"),
        (59, "about 60 s left"),
        (61, "about 1 min left"),
        (600, "about 10 min left"),
    ],
)
def test_eta_is_a_rough_figure(seconds, text) -> None:
    assert progress.eta_text(seconds) == text


def test_node_ids_list_their_numbers_as_numbers() -> None:
    """pytest lists ``test[1]``, ``test[2]``, ``test[10]``; a plain string sort would put
    ``[10]`` before ``[1]`` (``0`` sorts before ``]``)."""
    ids = ["t.py::test[10]", "t.py::test[1]", "t.py::test[2]", "t.py::other"]
    run = RunResult("native", [], tests={nodeid: TestResult("passed") for nodeid in ids})
    rows = compare_runs(run, run, []).rows()
    assert [row[0] for row in rows] == [
        "t.py::other",
        "t.py::test[1]",
        "t.py::test[2]",
        "t.py::test[10]",
    ]


#: A suite whose only CUDA line outside a parametrized test is a torch.cuda call the
#: facade answers.
GATED_SUITE = """\
import pytest
import torch


@pytest.mark.parametrize("n", [1, 2, 10])
def test_sizes(n):
    assert torch.ones(n, device="cuda").sum().item() == n


def test_synchronize():
    torch.cuda.synchronize()
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="native runs must fail without CUDA")
def test_the_gate_fails_compare_and_a_facade_call_counts_as_a_redirect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_gated.py").write_text(GATED_SUITE, encoding="utf-8")
    # Its own rootdir: without an ini file pytest takes the common ancestor of the suite
    # and the working directory (/tmp for a checkout in /tmp), and the node ids with it.
    (suite / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    output = tmp_path / "out"

    status = cli.main(
        ["compare", "--output", str(output), "--max-redirected-lines", "--quiet", str(suite)]
    )

    _, err = capsys.readouterr()
    assert status == 3  # no regression (natively they fail); only the gate fails
    assert err.splitlines()[-3:] == [
        "torchdevice: 2 line(s) of your code were redirected, more than the 0 allowed "
        "(--max-redirected-lines 0):",
        f"  {suite / 'test_gated.py'}:7: torch.ones(cuda) -> cpu:0",
        f"  {suite / 'test_gated.py'}:11: torch.cuda.synchronize(cuda) -> cpu:0",
    ]
    data = json.loads((output / "compare.json").read_text(encoding="utf-8"))
    tests = {t["nodeid"]: t["redirected"] for t in data["tests"]}
    assert tests["test_gated.py::test_synchronize"]["redirects"] == 1  # the facade answered
    assert [t["nodeid"] for t in data["tests"]] == [
        "test_gated.py::test_sizes[1]",
        "test_gated.py::test_sizes[2]",
        "test_gated.py::test_sizes[10]",
        "test_gated.py::test_synchronize",
    ]
    assert (
        cli.main(["compare", "--output", str(output), "--max-redirected-lines=2", str(suite)]) == 0
    )

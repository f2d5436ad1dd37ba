"""Logging as a library should: the user's level, the user's line, warnings at the user's line."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import torchdevice
from childenv import clean_env

LOGGER = logging.getLogger("torchdevice")


def test_the_level_is_left_to_the_application(caplog: pytest.LogCaptureFixture) -> None:
    # What logging.basicConfig(level=INFO) or pytest --log-cli-level=INFO do: the root's
    # level. An enable() without log_level must not hide the redirects behind WARNING.
    caplog.set_level(logging.INFO)
    torchdevice.enable()
    assert LOGGER.level == logging.NOTSET
    here = sys._getframe().f_lineno + 1
    torch.zeros(2, device="cuda")
    records = [r for r in caplog.records if r.name == "torchdevice.redirects"]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.INFO
    assert "torch.zeros(cuda) -> cpu:0" in record.getMessage()
    # The record is made at the user's line: %(pathname)s:%(lineno)d names this file.
    assert (record.pathname, record.lineno, record.funcName) == (
        __file__,
        here,
        "test_the_level_is_left_to_the_application",
    )


def test_the_root_at_warning_shows_no_redirect(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    torchdevice.enable()
    torch.zeros(2, device="cuda")
    assert [r for r in caplog.records if r.name.startswith("torchdevice")] == []


def test_an_explicit_level_is_applied_and_undone(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)  # the application's root level...
    caplog.handler.setLevel(logging.NOTSET)  # ...and a handler that keeps what reaches it
    torchdevice.enable(log_level="DEBUG")
    assert LOGGER.level == logging.DEBUG
    torch.ones(1, device="mps")
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("torchdevice")]
    # DEBUG adds each decision with its reason, before the INFO line of the call site.
    debug = [m for m in messages if m.startswith("decision: 'mps'")]
    assert len(debug) == 1
    assert "-> cpu (to-cpu: MPS request on a CPU-only host" in debug[0]
    assert any("torch.ones(mps:0) -> cpu:0" in m for m in messages)
    torchdevice.enable(log_level="ERROR")  # a reconfiguration replaces the level
    assert LOGGER.level == logging.ERROR
    torchdevice.disable()
    assert LOGGER.level == logging.NOTSET


def test_a_warning_torch_raises_in_a_handler_names_the_users_line() -> None:
    torchdevice.enable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here = sys._getframe().f_lineno + 1
        values = torch.range(0, 2, device="cuda")  # deprecated: torch warns from C++
    assert values.tolist() == [0.0, 1.0, 2.0]
    deprecations = [w for w in caught if "torch.range is deprecated" in str(w.message)]
    assert len(deprecations) == 1
    assert (deprecations[0].filename, deprecations[0].lineno) == (__file__, here)


def test_warnings_hook_leaves_with_disable() -> None:
    original = warnings._showwarnmsg  # type: ignore[attr-defined]
    torchdevice.enable()
    assert warnings._showwarnmsg is not original  # type: ignore[attr-defined]
    torchdevice.disable()
    assert warnings._showwarnmsg is original  # type: ignore[attr-defined]


def test_the_library_logger_has_a_null_handler_and_no_other() -> None:
    """As urllib3: nothing is printed for the library unless someone asks."""
    assert [type(handler) for handler in LOGGER.handlers] == [logging.NullHandler]
    torchdevice.enable(log_level="INFO")  # asked: a stderr handler, removed by disable()
    assert len(LOGGER.handlers) == 2
    torchdevice.disable()
    assert [type(handler) for handler in LOGGER.handlers] == [logging.NullHandler]


# -- in child processes: what reaches a real stderr ------------------------------------------

APP = """\
import logging

import torch

torch.zeros(1, device="cuda")  # before the application configures logging
logging.basicConfig(level=logging.INFO, format="APP %(name)s %(lineno)d %(message)s")
torch.ones(1, device="cuda")  # after
"""


def _python(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *map(str, args)],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("form", ["launcher --log-level", "ACTIVATE + TORCHDEVICE_LOG_LEVEL"])
def test_a_script_that_configures_logging_sees_each_record_once(tmp_path: Path, form: str) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP, encoding="utf-8")
    if form.startswith("launcher"):
        result = _python("-m", "torchdevice", "--no-report", "--log-level", "INFO", script)
    else:
        result = _python(script, ACTIVATE_TORCH_DEVICE="1", TORCHDEVICE_LOG_LEVEL="INFO")
    lines = result.stderr.splitlines()
    # Before basicConfig: torchdevice's own handler; after: the application's, alone.
    zeros = [line for line in lines if "torch.zeros(cuda)" in line]
    ones = [line for line in lines if "torch.ones(cuda)" in line]
    assert len(zeros) == 1, result.stderr
    assert zeros[0].startswith("torchdevice.redirects INFO: ")
    assert len(ones) == 1, result.stderr
    assert ones[0].startswith("APP torchdevice.redirects 7 ")
    starts = [line for line in lines if "redirecting to " in line]
    said = [line for line in starts if line.startswith("torchdevice: on")]  # issue 28
    assert len(said) == 1, result.stderr  # --no-report keeps it (issue 36)
    records = [line for line in starts if line not in said]
    assert len(records) == 1, result.stderr
    assert records[0].startswith("torchdevice INFO: redirecting to cpu (cpu host, ")


START = """\
import logging
import sys

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s|%(message)s")
import torch
import torchdevice

print("FORM", sys.argv[1])
if sys.argv[1] == "enable":
    torchdevice.enable()
    torchdevice.disable()
    torchdevice.enable()  # the same configuration again: no second line
elif sys.argv[1] == "redirect":
    with torchdevice.redirect(keep_cpu=True):
        pass
"""


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="expects a host without CUDA")
@pytest.mark.parametrize("form", ["enable", "redirect", "environment", "launcher"])
def test_every_activation_form_logs_one_start_up_line(tmp_path: Path, form: str) -> None:
    script = tmp_path / "start.py"
    script.write_text(START, encoding="utf-8")
    if form == "environment":
        result = _python(script, form, ACTIVATE_TORCH_DEVICE="1")
    elif form == "launcher":  # it enables before the script configures logging: stderr
        result = _python("-m", "torchdevice", "--no-report", "--log-level", "INFO", script, form)
    else:
        result = _python(script, form)
    output = result.stderr if form == "launcher" else result.stdout
    # The launcher also says it is on, on stderr (issue 28; --no-report keeps that line,
    # issue 36): not a log record.
    starts = [
        line
        for line in output.splitlines()
        if "redirecting to" in line and not line.startswith("torchdevice: on")
    ]
    expected = (
        "torchdevice INFO: " if form == "launcher" else "torchdevice|"
    ) + "redirecting to cpu (cpu host, "
    assert len(starts) == 1, output
    assert starts[0].startswith(expected)
    assert starts[0].endswith(
        "; explicit 'cpu' requests stay on the CPU" if form == "redirect" else ")"
    )


def test_records_go_to_a_logger_per_concern(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="torchdevice")
    torchdevice.enable()
    torch.zeros(1, device="cuda")
    names = {record.name for record in caplog.records if "torch.zeros" in record.getMessage()}
    assert names == {"torchdevice.redirects"}
    # Filtering one concern out leaves the others.
    logging.getLogger("torchdevice.redirects").setLevel(logging.WARNING)
    try:
        caplog.clear()
        torch.ones(1, device="cuda")
        assert [r for r in caplog.records if "torch.ones" in r.getMessage()] == []
    finally:
        logging.getLogger("torchdevice.redirects").setLevel(logging.NOTSET)

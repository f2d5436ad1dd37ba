"""Settings (argument > environment > default) and activation from the environment (SPEC §6)."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchdevice
from torchdevice import SettingsError
from torchdevice.environment import BOOL_EXPECTED
from torchdevice.host import Host
from torchdevice.settings import ENV_VARS, Settings, activation_requested, load_settings

# --- load_settings -----------------------------------------------------------------------


def test_defaults():
    settings = load_settings({}, {})
    assert settings == Settings()
    assert dataclasses.asdict(settings) == {
        "log_level": None,
        "keep_cpu": False,
        "cpu_override": False,
        "host": None,
        "report_path": None,
        "fallback": True,
        "cuda_available": True,
        "written_for": None,
        "intercept": "mode",
    }


def test_none_options_mean_no_arguments():
    assert load_settings(None, {"TORCHDEVICE_LOG_LEVEL": "INFO"}).log_level == "INFO"


@pytest.mark.parametrize(
    ("options", "environ", "expected"),
    [
        pytest.param({}, {}, None, id="default"),
        pytest.param({}, {"TORCHDEVICE_LOG_LEVEL": "DEBUG"}, "DEBUG", id="environment"),
        pytest.param({"log_level": "ERROR"}, {}, "ERROR", id="argument"),
        pytest.param(
            {"log_level": "ERROR"}, {"TORCHDEVICE_LOG_LEVEL": "DEBUG"}, "ERROR", id="argument-wins"
        ),
        pytest.param({}, {"TORCHDEVICE_LOG_LEVEL": ""}, None, id="empty-env-is-unset"),
    ],
)
def test_log_level_precedence(options, environ, expected):
    assert load_settings(options, environ).log_level == expected


def test_argument_overrides_an_invalid_environment_value():
    environ = {"TORCHDEVICE_LOG_LEVEL": "LOUD", "TORCHDEVICE_KEEP_CPU": "maybe"}
    settings = load_settings({"log_level": "INFO", "keep_cpu": True}, environ)
    assert (settings.log_level, settings.keep_cpu) == ("INFO", True)


@pytest.mark.parametrize(
    ("variable", "raw", "field", "expected"),
    [
        ("TORCHDEVICE_KEEP_CPU", "true", "keep_cpu", True),
        ("TORCHDEVICE_KEEP_CPU", "0", "keep_cpu", False),
        ("TORCHDEVICE_HOST", "cpu", "host", "cpu"),  # forcing mps/cuda: test_host_choice
        ("TORCHDEVICE_REPORT", "/tmp/report.json", "report_path", Path("/tmp/report.json")),
        ("TORCHDEVICE_FALLBACK", "false", "fallback", False),
        ("TORCHDEVICE_CUDA_AVAILABLE", "0", "cuda_available", False),
        ("TORCHDEVICE_WRITTEN_FOR", "mps", "written_for", "mps"),
        ("TORCHDEVICE_WRITTEN_FOR", " CUDA ", "written_for", "cuda"),
        ("TORCHDEVICE_INTERCEPT", "entry-points", "intercept", "entry-points"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_environment_fills_fields(variable, raw, field, expected):
    assert getattr(load_settings({}, {variable: raw}), field) == expected


def test_argument_beats_environment_for_every_kind_of_field():
    environ = {
        "TORCHDEVICE_KEEP_CPU": "true",
        "TORCHDEVICE_HOST": "mps",
        "TORCHDEVICE_FALLBACK": "false",
    }
    host = Host.cuda(2)
    settings = load_settings({"keep_cpu": False, "host": host, "fallback": True}, environ)
    assert settings.keep_cpu is False
    assert settings.host == host
    assert settings.fallback is True


@pytest.mark.parametrize("raw", ["debug", "Debug", "dEbUg", "DEBUG"])
def test_log_level_is_case_insensitive(raw):
    assert load_settings({}, {"TORCHDEVICE_LOG_LEVEL": raw}).log_level == "DEBUG"
    assert load_settings({"log_level": raw}, {}).log_level == "DEBUG"


def test_invalid_environment_value_names_the_variable():
    with pytest.raises(SettingsError) as excinfo:
        load_settings({}, {"TORCHDEVICE_LOG_LEVEL": "LOUD"})
    assert isinstance(excinfo.value, ValueError)
    message = str(excinfo.value)
    assert message.startswith("invalid TORCHDEVICE_LOG_LEVEL='LOUD' from the environment: ")
    assert "argument" not in message


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"intercept": "bogus"}, "expected 'mode' or 'entry-points'"),
        ({"log_level": "LOUD"}, "expected 'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ({"written_for": "tpu"}, "expected 'cuda' or 'mps'"),
        ({"keep_cpu": [1]}, "expected a boolean"),
        ({"report_path": 3}, "expected a path"),
        ({"host": "tpu"}, "expected 'cpu', 'mps', 'cuda' or 'simulated-mps'"),
    ],
)
def test_every_invalid_value_says_what_is_expected_in_one_voice(given, said):
    """pydantic's own words ("Input should be ...") never reach the user: every message
    ends in what is expected, as the host's and the booleans' always did (issue 36)."""
    ((name, value),) = given.items()
    with pytest.raises(SettingsError) as excinfo:
        load_settings(given, {})
    assert str(excinfo.value) == f"invalid {name}={value!r} passed as an argument: {said}"


def test_invalid_environment_bool_names_the_variable():
    with pytest.raises(SettingsError) as excinfo:
        load_settings({}, {"TORCHDEVICE_KEEP_CPU": "maybe"})
    assert str(excinfo.value).startswith(
        "invalid TORCHDEVICE_KEEP_CPU='maybe' from the environment: "
    )


def test_invalid_argument_value_names_the_argument():
    with pytest.raises(SettingsError) as excinfo:
        load_settings({"log_level": "LOUD"}, {"TORCHDEVICE_LOG_LEVEL": "INFO"})
    assert isinstance(excinfo.value, ValueError)
    message = str(excinfo.value)
    assert message.startswith("invalid log_level='LOUD' passed as an argument: ")
    assert "environment" not in message
    assert "TORCHDEVICE_LOG_LEVEL" not in message


def test_invalid_host_argument():
    with pytest.raises(SettingsError, match=r"^invalid host='gpu' passed as an argument: "):
        load_settings({"host": "gpu"}, {})


def test_unknown_option_is_a_type_error_naming_it():
    with pytest.raises(TypeError) as excinfo:
        load_settings({"log_levle": "INFO"}, {})
    assert not isinstance(excinfo.value, SettingsError)
    message = str(excinfo.value)
    assert "'log_levle'" in message
    assert "log_level" in message.split("known options:")[1]


def test_settings_are_frozen():
    settings = load_settings({}, {})
    with pytest.raises(dataclasses.FrozenInstanceError, match="log_level"):
        settings.log_level = "DEBUG"


# --- activation_requested ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, False, id="unset"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": "1"}, True, id="activate-1"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": "0"}, False, id="activate-0"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": ""}, False, id="activate-empty"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "true"}, True, id="allow-true"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "TRUE"}, True, id="allow-TRUE"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "True"}, True, id="allow-True"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "1"}, True, id="allow-1"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": " yes "}, True, id="allow-yes"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "false"}, False, id="allow-false"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "OFF"}, False, id="allow-OFF"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": ""}, False, id="allow-empty"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": "true"}, True, id="activate-true"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": "On"}, True, id="activate-On"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": "no"}, False, id="activate-no"),
        pytest.param(
            {"ACTIVATE_TORCH_DEVICE": "0", "TORCH_ALLOW_REDIRECTS": "true"}, True, id="either"
        ),
        pytest.param(
            {"ACTIVATE_TORCH_DEVICE": "1", "TORCH_ALLOW_REDIRECTS": "false"}, True, id="either-2"
        ),
    ],
)
def test_activation_requested(environ, expected):
    assert activation_requested(environ) is expected


@pytest.mark.parametrize("variable", ["ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"])
@pytest.mark.parametrize("raw", ["maybe", "2", "t", "y", "enable"])
def test_activation_variables_other_values_are_an_error(variable, raw):
    with pytest.raises(SettingsError) as excinfo:
        activation_requested({variable: raw})
    assert isinstance(excinfo.value, ValueError)
    assert str(excinfo.value) == (
        f"invalid {variable}={raw!r} from the environment: {BOOL_EXPECTED}"
    )


#: Every boolean variable torchdevice reads, and how to read it back.
BOOLEAN_VARIABLES = ["ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"] + [
    variable
    for variable, field in ENV_VARS.items()
    if field in ("keep_cpu", "fallback", "cuda_available")
]


def _read_bool(variable: str, raw: str) -> bool:
    if variable in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"):
        return activation_requested({variable: raw})
    return getattr(load_settings({}, {variable: raw}), ENV_VARS[variable])


@pytest.mark.parametrize("variable", BOOLEAN_VARIABLES)
def test_every_boolean_variable_follows_one_rule(variable):
    """The same words mean the same in every variable, and the same words are refused."""
    for raw in ("1", "true", "TRUE", "Yes", " on "):
        assert _read_bool(variable, raw) is True, raw
    for raw in ("0", "false", "False", "NO", "off "):
        assert _read_bool(variable, raw) is False, raw
    for raw in ("t", "y", "2", "enabled"):
        with pytest.raises(SettingsError, match=f"^invalid {variable}={raw!r} from the "):
            _read_bool(variable, raw)
    assert len(BOOLEAN_VARIABLES) == 5


def test_activation_requested_reads_os_environ_by_default(monkeypatch):
    monkeypatch.delenv("ACTIVATE_TORCH_DEVICE", raising=False)
    monkeypatch.delenv("TORCH_ALLOW_REDIRECTS", raising=False)
    assert activation_requested() is False
    monkeypatch.setenv("TORCH_ALLOW_REDIRECTS", "True")
    assert activation_requested() is True
    monkeypatch.delenv("TORCH_ALLOW_REDIRECTS")
    monkeypatch.setenv("ACTIVATE_TORCH_DEVICE", "1")
    assert activation_requested() is True


def test_load_settings_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_LOG_LEVEL", "error")
    assert load_settings().log_level == "ERROR"


# --- activation at import, in a fresh interpreter ----------------------------------------

CPU_ONLY = not torch.cuda.is_available() and not torch.backends.mps.is_available()

PROBE = """
import torch, torchdevice
print(torchdevice.is_enabled())
try:
    device = torch.zeros(1, device="cuda").device
except Exception as exc:
    print(type(exc).__name__)
else:
    print(device)
"""

IMPORT_CASES = {
    "activate": {"ACTIVATE_TORCH_DEVICE": "1"},
    "allow-TRUE": {"TORCH_ALLOW_REDIRECTS": "TRUE"},
    "neither": {},
    "activate-maybe": {"ACTIVATE_TORCH_DEVICE": "maybe"},
}


def _clean_environ(extra):
    environ = {
        name: value
        for name, value in os.environ.items()
        if name not in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
        and not name.startswith("TORCHDEVICE_")
    }
    environ.update(extra)
    return environ


@pytest.fixture(scope="module")
def imports():
    """Run every case's interpreter at once (each takes seconds to import torch)."""
    running = {
        case: subprocess.Popen(
            [sys.executable, "-c", PROBE],
            env=_clean_environ(extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, extra in IMPORT_CASES.items()
    }
    results = {}
    for case, process in running.items():
        stdout, stderr = process.communicate(timeout=120)
        results[case] = (process.returncode, stdout, stderr)
    return results


def _native_cuda_error():
    assert not torchdevice.is_enabled()
    try:
        torch.zeros(1, device="cuda")
    except Exception as exc:  # whatever torch raises natively
        return type(exc).__name__
    pytest.fail("creating a CUDA tensor succeeded on a host without CUDA")


@pytest.mark.slow
@pytest.mark.skipif(not CPU_ONLY, reason="expects a CPU-only host (no CUDA, no MPS)")
@pytest.mark.parametrize("case", ["activate", "allow-TRUE"])
def test_environment_enables_at_import(imports, case):
    returncode, stdout, stderr = imports[case]
    assert returncode == 0, stderr
    assert stdout.split() == ["True", "cpu"]


@pytest.mark.slow
@pytest.mark.skipif(not CPU_ONLY, reason="expects a CPU-only host (no CUDA, no MPS)")
def test_without_the_variables_nothing_happens_at_import(imports):
    returncode, stdout, stderr = imports["neither"]
    assert returncode == 0, stderr
    assert stdout.split() == ["False", _native_cuda_error()]


@pytest.mark.slow
def test_invalid_activate_value_fails_the_import(imports):
    returncode, stdout, stderr = imports["activate-maybe"]
    assert returncode == 2  # one line, as a usage error (tests/test_first_hour.py)
    assert stdout == ""
    assert stderr.startswith("torchdevice: error: invalid ACTIVATE_TORCH_DEVICE='maybe'")
    assert len(stderr.splitlines()) == 1, stderr


def test_defaults_need_no_pydantic():
    """An activation with every setting at its default validates nothing: pydantic (about
    6 MiB of a process's peak memory) is not imported; a given value is validated by it."""
    code = (
        "import sys, torchdevice; from torchdevice.settings import load_settings;"
        "load_settings({}, {}); torchdevice.enable(); torchdevice.disable();"
        "print('pydantic' in sys.modules);"
        "print(load_settings({'log_level': 'info'}, {}).log_level, 'pydantic' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHDEVICE_", "ACTIVATE_"))}
    env.pop("TORCH_ALLOW_REDIRECTS", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert done.stdout.split("\n")[:2] == ["False", "INFO True"]


@pytest.mark.parametrize("function", [torchdevice.enable, torchdevice.redirect])
def test_help_lists_every_option_with_its_variable(function):
    """``help(enable)`` shows the options one by one, not ``**options: Unpack[Options]``."""
    fields = [field.name for field in dataclasses.fields(Settings)]
    parameters = inspect.signature(function).parameters
    assert list(parameters) == fields
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    assert repr(parameters["keep_cpu"].default) == "$TORCHDEVICE_KEEP_CPU or False"
    assert repr(parameters["cpu_override"].default) == "False"  # it has no variable
    documented = torchdevice.enable.__doc__ or ""
    for name in fields:
        assert f"``{name}``" in documented, name
    for variable in ENV_VARS:
        assert f"``{variable}``" in documented, variable


# --- one declaration: everything else that names the settings agrees with it -------------


def test_options_typed_dict_names_every_setting():
    """``Options`` is the one other spelling of the settings (a type checker cannot derive
    it): the same names, in the same order."""
    from torchdevice.settings import FIELDS, Options

    assert tuple(Options.__annotations__) == FIELDS
    assert tuple(f.name for f in dataclasses.fields(Settings)) == FIELDS


def test_environment_variables_come_from_the_declaration():
    declared = {
        f.metadata["env"]: f.name for f in dataclasses.fields(Settings) if f.metadata["env"]
    }
    assert dict(ENV_VARS) == declared
    assert all(variable.startswith("TORCHDEVICE_") for variable in ENV_VARS)


def _docs_table() -> dict[str, tuple[str, str]]:
    """getting-started.md's options table: option -> (environment column, default column)."""
    text = (Path(__file__).parents[1] / "docs" / "getting-started.md").read_text()
    section = text.split("## Options and environment variables", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 4:
            rows[cells[0].strip("`")] = (cells[1].strip("`"), cells[2])
    return rows


def test_docs_table_lists_every_setting_with_its_variable():
    table = _docs_table()
    assert list(table) == [f.name for f in dataclasses.fields(Settings)]
    for spec in dataclasses.fields(Settings):
        variable, default = table[spec.name]
        assert variable == (spec.metadata["env"] or "—"), spec.name
        if isinstance(spec.default, bool):
            assert default == f"`{spec.default}`", spec.name


def test_run_flags_come_from_the_declaration():
    """``torchdevice run``'s setting flags: one per declared flag, accepting what the
    setting's type accepts, and filling that setting."""
    from torchdevice.tools.cli import run

    parser = run.parser("torchdevice run")
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    flagged = [f for f in dataclasses.fields(Settings) if f.metadata["flag"]]
    assert [f.metadata["flag"] for f in flagged] == [
        "--log-level",
        "--keep-cpu",
        "--host",
        "--written-for",
        "--intercept",
    ]
    for spec in flagged:
        action = actions[spec.metadata["flag"]]
        assert action.dest == spec.name
        assert action.help == spec.metadata["flag_help"]
    assert tuple(actions["--log-level"].choices) == ("DEBUG", "INFO", "WARNING", "ERROR")
    assert tuple(actions["--host"].choices) == ("cpu", "mps", "cuda", "simulated-mps")
    assert tuple(actions["--written-for"].choices) == ("cuda", "mps")
    assert tuple(actions["--intercept"].choices) == ("mode", "entry-points")
    assert actions["--keep-cpu"].nargs == 0  # a switch
    ns = parser.parse_args(
        ["--keep-cpu", "--host", "cpu", "--log-level", "INFO", "--written-for", "mps", "x.py"]
    )
    assert (ns.keep_cpu, ns.host, ns.log_level, ns.written_for) == (True, "cpu", "INFO", "mps")


def test_an_invalid_written_for_names_its_source_and_the_choices():
    with pytest.raises(SettingsError) as excinfo:
        load_settings({}, {"TORCHDEVICE_WRITTEN_FOR": "rocm"})
    message = str(excinfo.value)
    assert message.startswith("invalid TORCHDEVICE_WRITTEN_FOR='rocm' from the environment: ")
    assert message.endswith("expected 'cuda' or 'mps'"), message


def test_host_choices_are_the_kinds_and_the_declared_backends():
    """The kinds are spelled once (the type); the other choices are what the installed
    distributions declare in the ``torchdevice.backends`` entry points (torchdevice's own
    simulated MPS host among them), read only when a question is not about a kind."""
    from typing import get_args

    from torchdevice import extra_backends
    from torchdevice.host import HOST_CHOICES, HOST_KINDS, HostKind

    assert HOST_KINDS == get_args(HostKind) == ("cpu", "mps", "cuda")
    assert tuple(HOST_CHOICES) == (*HOST_KINDS, *extra_backends.choices())
    assert "simulated-mps" in extra_backends.choices()
    assert ("cuda" in HOST_CHOICES, "simulated-mps" in HOST_CHOICES) == (True, True)
    assert "nowhere" not in HOST_CHOICES
    assert (len(HOST_CHOICES), HOST_CHOICES[0], list(HOST_CHOICES[-2:])) == (
        len(HOST_KINDS) + len(extra_backends.choices()),
        "cpu",
        list((*HOST_KINDS, *extra_backends.choices())[-2:]),
    )
    with pytest.raises(
        ValueError, match=r"^unknown host kind 'tpu': expected 'cpu', 'mps' or 'cuda'$"
    ):
        Host("tpu")  # type: ignore[arg-type]

"""The host torchdevice acts as: probed from the real torch, forced only where possible."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchdevice
from torchdevice import SettingsError
from torchdevice.activation import current_runtime
from torchdevice.host import probe_host

CPU = torch.device("cpu")


@pytest.fixture
def cold_probe():
    """Forget the cached probe, so the next one runs now (with a facade in place)."""
    probe_host.cache_clear()
    yield
    probe_host.cache_clear()


def test_probe_under_the_facade_sees_the_real_machine(cold_probe):
    torchdevice.enable(host="cpu")  # forced: nothing probed yet; the torch.cuda facade is in
    assert torch.cuda.is_available()  # the facade answers for the redirect
    torchdevice.enable(keep_cpu=True)  # now the probe runs, under the facade
    runtime = current_runtime()
    assert runtime is not None
    assert runtime.host.kind == probe_host().kind == "cpu"
    assert torch.ones(2, device="cuda").device == CPU
    assert torch.ones(2, device="cpu").device == CPU


@pytest.mark.parametrize("kind", ["mps", "cuda"])
def test_forcing_a_host_the_machine_cannot_be_is_a_settings_error(kind):
    with pytest.raises(SettingsError) as excinfo:
        torchdevice.enable(host=kind)
    message = str(excinfo.value)
    assert message.startswith(f"invalid host={kind!r} passed as an argument: host {kind!r} needs")
    assert "this machine has none (it is a cpu host" in message
    assert "'cpu' always works" in message
    assert not torchdevice.is_enabled()  # nothing half-installed: torch is native
    with pytest.raises((RuntimeError, AssertionError)):
        torch.ones(1, device="cuda")
    torchdevice.enable()  # and torchdevice still works
    assert torch.ones(1, device="cuda").device == CPU


def test_forced_host_from_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_HOST", "cuda")
    with pytest.raises(SettingsError, match=r"^invalid TORCHDEVICE_HOST='cuda' from the environ"):
        torchdevice.enable()


def test_forcing_cpu_always_works():
    torchdevice.enable(host="cpu")
    assert torch.zeros(1, device="mps").device == CPU


@pytest.mark.parametrize("kind", ["mps", "cuda"])
def test_launcher_with_a_host_the_machine_cannot_be_is_a_usage_error(kind, tmp_path):
    script = tmp_path / "script.py"
    script.write_text("raise SystemExit('the script must not run')\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "torchdevice", "--host", kind, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"python -m torchdevice: error: invalid host={kind!r}")
    assert "Traceback" not in result.stderr

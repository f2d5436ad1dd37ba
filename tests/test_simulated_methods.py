"""Every public ``torch.Tensor`` and ``torch.UntypedStorage`` method on the simulated device,
against the CPU, in child processes: a method that crashes the interpreter fails the test by
name, and the sweep goes on past it.

The calls and their classification are in ``scripts/tensor_methods.py``; this module runs it,
restarts it after a crash with the crashing method left out, and judges the outcomes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "tensor_methods.py"
#: More crashes than this and the sweep stops restarting: something is broken wholesale.
MAX_CRASHES = 10

pytestmark = pytest.mark.slow


def _sweep(progress: Path, **extra_env: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Outcomes by method, and the methods the interpreter died in (with how it ended)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("TORCHDEVICE_") and name != "ACTIVATE_TORCH_DEVICE"
    } | extra_env
    crashed: dict[str, str] = {}
    while True:
        result = subprocess.run(
            [sys.executable, str(SCRIPT), str(progress), *crashed],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        lines = progress.read_text(encoding="utf-8").splitlines() if progress.exists() else []
        if lines and lines[-1] == "finished" and result.returncode == 0:
            break
        started = [line.split(" ", 1)[1] for line in lines if line.startswith("start ")]
        finished = {line.split(" ", 2)[1] for line in lines if line.startswith("done ")}
        dying = [name for name in started if name not in finished and name not in crashed]
        if not dying or len(crashed) >= MAX_CRASHES:
            pytest.fail(
                f"the sweep stopped (status {result.returncode}) outside any method:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        crashed[dying[-1]] = f"status {result.returncode}: {result.stderr.strip()[-500:]}"
    outcomes = {}
    for line in lines:
        if line.startswith("done "):
            _, name, outcome, *detail = line.split(" ", 3)
            outcomes[name] = (outcome, " ".join(detail))
    return outcomes, crashed


def test_no_method_crashes_and_each_matches_the_cpu_or_fails_as_mps(tmp_path: Path) -> None:
    outcomes, crashed = _sweep(tmp_path / "progress.txt")
    assert not crashed, f"methods that crashed the interpreter: {crashed}"
    differs = {name: detail for name, (outcome, detail) in outcomes.items() if outcome == "differs"}
    assert not differs, f"methods whose device result is not the CPU's: {differs}"
    counts = {outcome: 0 for outcome in ("same", "refused", "device-specific", "both-fail")}
    for outcome, _ in outcomes.values():
        counts[outcome] += 1
    # The sweep really compares: most methods run on both devices with the same result.
    assert counts["same"] > 3 * (counts["refused"] + counts["both-fail"]), counts
    for name in ("Tensor.add", "Tensor.matmul", "Tensor.clone", "UntypedStorage.clone"):
        assert outcomes[name][0] == "same", (name, outcomes[name])
    assert outcomes["Tensor.heaviside"][0] == "refused"  # MPS has no heaviside kernel
    assert outcomes["Tensor.double"][0] == "refused"  # nor float64


def test_a_crash_names_the_method_and_the_sweep_goes_on(tmp_path: Path) -> None:
    outcomes, crashed = _sweep(tmp_path / "progress.txt", SWEEP_CRASH_IN="Tensor.abs")
    assert list(crashed) == ["Tensor.abs"]
    assert crashed["Tensor.abs"].startswith("status -11")  # SIGSEGV
    assert "Tensor.abs" not in outcomes
    assert outcomes["Tensor.absolute"][0] == "same"  # the next method, in a new interpreter
    assert outcomes["UntypedStorage.clone"][0] == "same"  # and the sweep's end


def test_this_process_never_registered_the_backend() -> None:
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"

"""Libraries that check themselves take their GPU path, redirected, and train.

Lightning's ``Trainer``/Fabric compare the device they build with the accelerator they
chose, and Accelerate turns fp16 autocast and its GradScaler on only for a CUDA device:
with the facade saying CUDA is there, device objects must read as written
(docs/policy.md, device objects). Each script in ``tests/scripts`` is written for a GPU,
imports nothing of torchdevice, and runs in a child process under
``python -m torchdevice``; it prints what it saw (accelerator, device, activation dtype
inside ``forward``, autocast, scaler, losses) as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from childenv import clean_env

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
CPU_HOST = not torch.cuda.is_available() and not torch.backends.mps.is_available()

needs_lightning = pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None,
    reason="lightning is not installed (pip install lightning; it keeps torch as is)",
)
needs_accelerate = pytest.mark.skipif(
    importlib.util.find_spec("accelerate") is None, reason="accelerate is not installed"
)
pytestmark = [
    pytest.mark.skipif(not CPU_HOST, reason="describes the redirect on a CPU-only host"),
    pytest.mark.usefixtures("tier"),  # both tiers (conftest.py)
]


def run_redirected(script: str, *args: str, **env: str) -> dict[str, object]:
    """Run a GPU script under ``python -m torchdevice`` in a child; its JSON facts."""
    result = subprocess.run(
        [sys.executable, "-m", "torchdevice", str(SCRIPTS / script), *args],
        cwd=ROOT,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    facts: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    facts["report"] = result.stderr
    return facts


@needs_lightning
def test_lightning_trainer_default_accelerator_takes_the_gpu_path():
    """``Trainer()`` with ``accelerator="auto"`` picks CUDA, validates its device, trains."""
    facts = run_redirected("lightning_gpu.py", "32-true")
    assert facts["accelerator"] == "CUDAAccelerator"
    assert facts["root_device"] == facts["module_device"] == "cuda:0"
    assert facts["steps"] == 8
    assert facts["losses_finite"] is True
    assert (facts["activation_dtype"], facts["autocast"]) == ("float32", False)
    assert "GPU available: True (cuda), used: True" in str(facts["report"])  # Lightning's


@needs_lightning
def test_lightning_trainer_16_mixed_runs_autocast_and_a_grad_scaler():
    facts = run_redirected("lightning_gpu.py", "16-mixed")
    assert facts["accelerator"] == "CUDAAccelerator"
    assert facts["precision"] == "MixedPrecision"
    assert facts["scaler"] == "GradScaler"
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert facts["steps"] == 8
    assert facts["losses_finite"] is True


@needs_lightning
def test_lightning_trainer_with_cuda_hidden_takes_the_cpu_path():
    """``TORCHDEVICE_CUDA_AVAILABLE=0``: Lightning's CPU path, through ``isolate_rng``
    (the sanity check), which hands ``torch.cuda.set_rng_state_all`` an empty list."""
    facts = run_redirected("lightning_gpu.py", "32-true", TORCHDEVICE_CUDA_AVAILABLE="0")
    assert facts["accelerator"] == "CPUAccelerator"
    assert facts["root_device"] == "cpu"
    assert facts["steps"] == 8
    assert facts["losses_finite"] is True


@needs_lightning
def test_fabric_gpu_16_mixed_runs_autocast_and_a_grad_scaler():
    facts = run_redirected("fabric_gpu.py")
    assert facts["accelerator"] == "CUDAAccelerator"
    assert facts["device"] == "cuda:0"
    assert facts["precision"] == "MixedPrecision"
    assert facts["scaler"] == "GradScaler"
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert facts["losses_finite"] is True


@needs_accelerate
def test_accelerate_fp16_runs_autocast_and_a_grad_scaler():
    """Not silently fp32: Accelerate's CUDA branch, with autocast and loss scaling."""
    facts = run_redirected("accelerate_fp16.py")
    assert facts["device"] == "cuda"
    assert facts["native_amp"] is True
    assert facts["scaler"] == "GradScaler"
    assert isinstance(facts["scale"], float)
    assert facts["scale"] > 0
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert facts["losses_finite"] is True


@needs_accelerate
def test_accelerate_fp16_trains_with_a_grad_scaler_on_the_simulated_mps_host():
    """As on a Mac: autocast casts on the device, and GradScaler.unscale_ takes 1/scale in
    float32 there (MPS has no float64), so fp16 with loss scaling trains."""
    facts = run_redirected("accelerate_fp16.py", TORCHDEVICE_HOST="simulated-mps")
    assert facts["device"] == "cuda"
    assert (facts["native_amp"], facts["scaler"]) == (True, "GradScaler")
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert 0 < facts["scale"] <= 65536.0  # a float16 overflow halves it and skips that step
    assert facts["losses_finite"] is True
    assert "mps host" in str(facts["report"])


@needs_lightning
def test_fabric_gpu_16_mixed_on_the_simulated_mps_host():
    """Fabric feeds float16 inputs to float32 weights and relies on autocast to cast them:
    the device's autocast rules make that work, as on a Mac."""
    facts = run_redirected("fabric_gpu.py", TORCHDEVICE_HOST="simulated-mps")
    assert (facts["accelerator"], facts["device"]) == ("CUDAAccelerator", "cuda:0")
    assert facts["scaler"] == "GradScaler"
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert facts["losses_finite"] is True


needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)


@needs_accelerate
@needs_transformers
def test_from_pretrained_device_map_auto_and_integer_devices():
    """``from_pretrained(device_map="auto")``: Accelerate sees one CUDA device and places
    every weight with ``set_module_tensor_to_device(..., 0)``, whose ``torch.device(0)``
    must read ``cuda:0`` as written (natively an error on a CPU-only host); the loaded model
    generates the tokens of the model it was saved from."""
    facts = run_redirected("hf_device_map.py")
    assert facts["device_0"] == "cuda:0"
    assert facts["parameter_devices"] == ["cpu"]
    assert facts["model_device"] == "cpu"
    assert facts["same_weights"] is True
    assert facts["same_tokens"] is True
    assert facts["set_device"] == "cpu"
    assert facts["set_value"] == [[3.0, 3.0], [3.0, 3.0]]
    assert facts["set_is_parameter"] is True


@needs_accelerate
def test_accelerate_gpu_only_checks_of_its_own_suite_pass():
    """The GPU-only tests of Accelerate's suite that read the device it chose (they lost
    before device objects read as written; docs/huggingface.md has the whole-suite run)."""
    facts = run_redirected("accelerate_gpu_checks.py")
    assert facts["state_device_type"] == "cuda"
    assert facts["cpu_after_gpu"] == "ValueError"  # Accelerator(cpu=True) after a GPU one
    assert facts["env_var_device"] == "cuda:64"
    assert facts["scaler"] == {
        "init_scale": 1024,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "enabled": True,
    }
    assert facts["autocast_dtypes"] == ["float16", "float32", "float16"]
    assert facts["step_was_skipped"] == [False, True, True, False]
    assert facts["weights_unchanged"] == [False, True, True, False]  # a skipped step is one

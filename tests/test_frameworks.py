"""Libraries that check themselves take their GPU path, redirected, and train.

Lightning's ``Trainer``/Fabric compare the device they build with the accelerator they
chose, and Accelerate turns fp16 autocast and its GradScaler on only for a CUDA device:
with the facade saying CUDA is there, device objects must read as written
(docs/policy.md, device objects). Each script in ``tests/scripts`` is written for a GPU,
imports nothing of torchdevice, and runs in a child process under
``python -m torchdevice``; it prints what it saw (accelerator, device, activation dtype
inside ``forward``, autocast, scaler, losses) as JSON.

Every test runs on both hosts (the ``host`` axis): the CPU host and the simulated MPS host,
where the same programs must take the same paths as on a Mac. Where a Mac differs (a
library that prefers MPS when ``torch.backends.mps`` says it is there), the test says so.
"""

from __future__ import annotations

import importlib.util
import json
import math
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
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)
pytestmark = [
    pytest.mark.skipif(not CPU_HOST, reason="describes the redirect on a CPU-only host"),
    pytest.mark.parametrize("host", ["cpu", "simulated-mps"]),
    pytest.mark.usefixtures("tier"),  # both tiers (conftest.py)
]
#: What a CUDA request lands on, by host.
LANDS_ON = {"cpu": "cpu", "simulated-mps": "simgpu:0"}


def run_redirected(host: str, script: str, *args: str, **env: str) -> dict[str, object]:
    """Run a GPU script under ``python -m torchdevice`` on ``host`` in a child; its JSON
    facts."""
    result = subprocess.run(
        [sys.executable, "-m", "torchdevice", str(SCRIPTS / script), *args],
        cwd=ROOT,
        env=clean_env(TORCHDEVICE_HOST=host, HF_HUB_OFFLINE="1", **env),
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
def test_lightning_trainer_default_accelerator_takes_the_gpu_path(host):
    """``Trainer()`` with ``accelerator="auto"`` picks CUDA, validates its device, trains."""
    facts = run_redirected(host, "lightning_gpu.py", "32-true")
    assert facts["accelerator"] == "CUDAAccelerator"
    assert facts["root_device"] == facts["module_device"] == "cuda:0"
    assert facts["steps"] == 8
    assert facts["losses_finite"] is True
    assert (facts["activation_dtype"], facts["autocast"]) == ("float32", False)
    assert "GPU available: True (cuda), used: True" in str(facts["report"])  # Lightning's


@needs_lightning
def test_lightning_trainer_16_mixed_runs_autocast_and_a_grad_scaler(host):
    facts = run_redirected(host, "lightning_gpu.py", "16-mixed")
    assert facts["accelerator"] == "CUDAAccelerator"
    assert facts["precision"] == "MixedPrecision"
    assert facts["scaler"] == "GradScaler"
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert facts["steps"] == 8
    assert facts["losses_finite"] is True


@needs_lightning
def test_lightning_trainer_with_cuda_hidden_takes_the_cpu_path(host):
    """``TORCHDEVICE_CUDA_AVAILABLE=0``: Lightning's CPU path, through ``isolate_rng``
    (the sanity check), which hands ``torch.cuda.set_rng_state_all`` an empty list. On the
    simulated MPS host too: Lightning's MPS accelerator also asks for an Apple processor,
    which this machine is not (on a Mac it would pick MPS)."""
    facts = run_redirected(host, "lightning_gpu.py", "32-true", TORCHDEVICE_CUDA_AVAILABLE="0")
    assert facts["accelerator"] == "CPUAccelerator"
    assert facts["root_device"] == "cpu"
    assert facts["steps"] == 8
    assert facts["losses_finite"] is True


@needs_lightning
def test_fabric_gpu_16_mixed_runs_autocast_and_a_grad_scaler(host):
    """On the simulated host too: Fabric feeds float16 inputs to float32 weights and relies
    on autocast to cast them, which the device's autocast rules do, as on a Mac."""
    facts = run_redirected(host, "fabric_gpu.py")
    assert facts["accelerator"] == "CUDAAccelerator"
    assert facts["device"] == "cuda:0"
    assert facts["precision"] == "MixedPrecision"
    assert facts["scaler"] == "GradScaler"
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert facts["losses_finite"] is True


#: The device type Accelerate picks, by host: CUDA on the CPU host (the program is CUDA
#: code); MPS on the simulated MPS host, where ``torch.backends.mps.is_available()`` is
#: true for every program, as on a Mac, and Accelerate prefers MPS when it is there.
ACCELERATE_PICKS = {"cpu": "cuda", "simulated-mps": "mps"}


@needs_accelerate
def test_accelerate_fp16_runs_autocast_and_a_grad_scaler(host):
    """Not silently fp32: autocast and loss scaling on the device. On the simulated host
    GradScaler.unscale_ takes 1/scale in float32 (MPS has no float64), as on a Mac."""
    facts = run_redirected(host, "accelerate_fp16.py")
    assert facts["device"] == ACCELERATE_PICKS[host]
    assert facts["native_amp"] is True
    assert facts["scaler"] == "GradScaler"
    assert isinstance(facts["scale"], float)
    assert 0 < facts["scale"] <= 65536.0  # a float16 overflow halves it and skips that step
    assert (facts["activation_dtype"], facts["autocast"]) == ("float16", True)
    assert facts["losses_finite"] is True
    assert f"{host.removeprefix('simulated-')} host" in str(facts["report"])


@needs_accelerate
@needs_transformers
def test_from_pretrained_device_map_auto_and_integer_devices(host):
    """``from_pretrained(device_map="auto")``: Accelerate sees one CUDA device and places
    every weight with ``set_module_tensor_to_device(..., 0)``, whose ``torch.device(0)``
    must read ``cuda:0`` as written (natively an error on a CPU-only host); the loaded model
    generates the tokens of the model it was saved from."""
    facts = run_redirected(host, "hf_device_map.py")
    assert facts["device_0"] == "cuda:0"
    assert facts["parameter_devices"] == [LANDS_ON[host]]
    assert facts["model_device"] == LANDS_ON[host]
    assert facts["same_weights"] is True
    assert facts["same_tokens"] is True
    assert facts["set_device"] == LANDS_ON[host]
    assert facts["set_value"] == [[3.0, 3.0], [3.0, 3.0]]
    assert facts["set_is_parameter"] is True


@needs_accelerate
def test_accelerate_gpu_only_checks_of_its_own_suite_pass(host):
    """The GPU-only tests of Accelerate's suite that read the device it chose (they lost
    before device objects read as written; docs/huggingface.md has the whole-suite run)."""
    facts = run_redirected(host, "accelerate_gpu_checks.py")
    assert facts["state_device_type"] == ACCELERATE_PICKS[host]
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


@needs_transformers
def test_hf_trainer_trains_a_cuda_script(host, tmp_path):
    """A Trainer script written for CUDA: it trains on the device "cuda" lands on, with the
    pinned DataLoader a GPU run has. TrainingArguments prefers MPS when it is there: on the
    CPU host the program is CUDA code, on the simulated MPS host (a Mac) MPS is there."""
    facts = run_redirected(host, "trainer_cuda.py", str(tmp_path / "trainer"))
    assert facts["args_device"] == {"cpu": "cuda:0", "simulated-mps": "mps"}[host]
    assert facts["model_device"] == LANDS_ON[host]
    assert facts["pin_memory"] is True
    assert math.isfinite(facts["train_loss"])
    assert facts["peak_memory"] is True

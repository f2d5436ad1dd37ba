"""Autocast and GradScaler written for CUDA run on the real device, in the real dtype.

An autocast for a device type no tensor lives on is silently a no-op, so every test checks
that the dtype of a matmul actually changes.
"""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from torch import nn

import torchdevice
from torchdevice import Host
from torchdevice.patches import amp

CPU = torch.device("cpu")


def matmul_dtype() -> torch.dtype:
    a = torch.randn(4, 4, device="cuda")
    return (a @ a).dtype


def test_without_torchdevice_a_cuda_autocast_is_a_silent_no_op_on_the_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available" warning
        with torch.autocast("cuda"):
            a = torch.randn(4, 4)
            assert (a @ a).dtype == torch.float32


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.autocast("cuda"),
        lambda: torch.autocast(device_type="cuda"),
        lambda: torch.amp.autocast("cuda"),
        lambda: torch.autocast("mps"),
    ],
)
def test_autocast_for_cuda_runs_in_the_cpus_autocast_dtype(make):
    torchdevice.enable()
    with make() as context:
        assert context.device == "cpu"
        assert torch.is_autocast_enabled("cpu")
        assert matmul_dtype() == torch.bfloat16
    assert matmul_dtype() == torch.float32
    assert not torch.is_autocast_enabled("cpu")


def test_explicit_dtype_and_disabled_autocast_are_kept():
    torchdevice.enable()
    with torch.autocast("cuda", dtype=torch.float16):
        assert matmul_dtype() == torch.float16
    with torch.autocast("cuda", enabled=False):
        assert matmul_dtype() == torch.float32


def test_torch_cuda_amp_autocast_keeps_its_float16_default():
    torchdevice.enable()
    with pytest.warns(FutureWarning), torch.cuda.amp.autocast():
        assert matmul_dtype() == torch.float16


def test_autocast_as_a_decorator():
    torchdevice.enable()

    @torch.autocast("cuda")
    def forward(x):
        return x @ x

    assert forward(torch.randn(2, 2, device="cuda")).dtype == torch.bfloat16


def test_cpu_autocast_is_never_rewritten():
    torchdevice.enable(host=Host.mps())
    assert amp.real_device_type("cpu", "torch.autocast") == "cpu"
    assert amp.real_device_type("cuda", "torch.autocast") == "mps"
    assert amp.real_device_type("mps", "torch.autocast") == "mps"


def test_cuda_host_rewrites_mps_autocast_to_cuda():
    torchdevice.enable(host=Host.cuda(1))
    assert amp.real_device_type("mps", "torch.autocast") == "cuda"
    assert amp.real_device_type("cuda", "torch.autocast") == "cuda"


def test_the_rewrite_is_reported_at_the_call_site():
    torchdevice.enable()
    autocast_line = sys._getframe().f_lineno + 1
    with torch.autocast("cuda"):
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp is deprecated
        scaler_line = sys._getframe().f_lineno + 1
        torch.cuda.amp.GradScaler()  # through typing_extensions' @deprecated wrapper
    sites = {(e.api, e.site.filename, e.site.lineno) for e in torchdevice.report().entries}
    assert ("torch.autocast", __file__, autocast_line) in sites
    assert ("torch.amp.GradScaler", __file__, scaler_line) in sites


def train_with_scaler(make_scaler, steps: int = 5):
    torch.manual_seed(0)
    model = nn.Linear(8, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = make_scaler()
    x, y = torch.randn(32, 8, device="cuda"), torch.randn(32, 2, device="cuda")
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return scaler, losses


@pytest.mark.parametrize(
    "make_scaler",
    [
        lambda: torch.amp.GradScaler("cuda"),
        lambda: torch.amp.GradScaler(init_scale=2.0**16),
        lambda: torch.cuda.amp.GradScaler(init_scale=1024.0),
    ],
)
def test_grad_scaler_for_cuda_scales_and_steps_on_the_real_device(make_scaler):
    torchdevice.enable()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp.GradScaler
        scaler, losses = train_with_scaler(make_scaler)
    assert scaler.is_enabled()
    assert scaler._device == "cpu"
    assert scaler.get_scale() > 1.0
    assert losses[-1] < losses[0]


def test_grad_scaler_skips_a_step_with_inf_gradients_and_backs_off():
    torchdevice.enable()
    model = nn.Linear(2, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", init_scale=8.0)
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(torch.tensor([[float("inf"), 1.0]], device="cuda")).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 4.0
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.detach(), b)


def test_amp_is_restored_exactly():
    init = torch.amp.autocast_mode.autocast.__dict__["__init__"]
    scaler_init = torch.amp.grad_scaler.GradScaler.__dict__["__init__"]
    torchdevice.enable()
    assert torch.amp.autocast_mode.autocast.__dict__["__init__"] is not init
    torchdevice.disable()
    assert torch.amp.autocast_mode.autocast.__dict__["__init__"] is init
    assert torch.amp.grad_scaler.GradScaler.__dict__["__init__"] is scaler_init
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.autocast("cuda").device == "cuda"


# -- the dtype a CUDA autocast takes: as torch's CUDA branch takes it (issue 29) ---------------
def native_cuda_autocast(dtype: torch.dtype, monkeypatch) -> tuple[bool, torch.dtype, list[str]]:
    """What torch's own ``autocast("cuda", dtype=...)`` decides on a machine with CUDA
    (``torch/amp/autocast_mode.py``, its CUDA branch, run here with CUDA said available):
    whether it is enabled, its dtype, and the warnings it gives."""
    monkeypatch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        context = torch.autocast("cuda", dtype=dtype)
    monkeypatch.undo()
    return context._enabled, context.fast_dtype, [str(w.message) for w in caught]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_a_cuda_autocast_takes_every_dtype_a_gpu_takes_without_a_warning(dtype, monkeypatch):
    """``torch.autocast("cuda", dtype=torch.float32)`` (llm.c's default) is silent on a GPU;
    redirected, the CPU's autocast would warn "CPU Autocast only supports dtypes of
    torch.bfloat16, torch.float16" and switch off."""
    native = native_cuda_autocast(dtype, monkeypatch)
    assert native == (True, dtype, [])
    torchdevice.enable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        context = torch.autocast("cuda", dtype=dtype)
    assert (context._enabled, context.fast_dtype, [str(w.message) for w in caught]) == native
    assert context.device == "cpu"
    half = torch.randn(4, 4, device="cuda", dtype=torch.float16)
    with context:  # lower-precision ops run in the dtype given, whatever their inputs
        assert (half @ half).dtype == dtype
    assert (half @ half).dtype == torch.float16


def test_an_mps_autocast_warns_where_mps_does_in_mps_words():
    torchdevice.enable()
    with pytest.warns(UserWarning, match="^In MPS autocast") as caught:
        context = torch.autocast("mps", dtype=torch.float32)
    assert [str(w.message) for w in caught] == [
        "In MPS autocast, but the target dtype is not supported. Disabling autocast.\n"
        "MPS Autocast only supports dtypes of torch.bfloat16, torch.float16 currently."
    ]
    assert caught[0].filename == __file__  # at the line that made it, as torch says it
    assert context._enabled is False
    with context:
        assert matmul_dtype() == torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast("mps", dtype=torch.bfloat16):
            assert matmul_dtype() == torch.bfloat16


SIMULATED_AUTOCAST = """
import json, warnings
import torch
half = torch.randn(4, 4, device="cuda", dtype=torch.float16)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    context = torch.autocast("cuda", dtype=torch.float32)
with context:
    inside = (half @ half).dtype
print(json.dumps({"device": context.device, "enabled": context._enabled,
                  "dtype": str(inside), "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.slow
def test_a_cuda_autocast_in_float32_is_silent_on_the_simulated_mps_host(tmp_path):
    """The same on the MPS stand-in, whose autocast (MPS's) would warn for float32."""
    import json
    import subprocess

    from childenv import clean_env

    script = tmp_path / "llmc_autocast.py"
    script.write_text(SIMULATED_AUTOCAST)
    result = subprocess.run(
        [sys.executable, "-m", "torchdevice", "--host", "simulated-mps", str(script)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts == {"device": "simgpu", "enabled": True, "dtype": "torch.float32", "warnings": []}

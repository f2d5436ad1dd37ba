"""enable / disable / redirect: process-wide, idempotent, nested, and exactly undone."""

from __future__ import annotations

import sys
import threading

import pytest
import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

import torchdevice
from pristine import REAL_CUDA, REAL_GENERATOR, REAL_LOAD, torch_is_pristine
from torchdevice.redirecting.mode import DeviceMode

CPU = torch.device("cpu")


def cuda_tensor_device() -> torch.device:
    return torch.zeros(1, device="cuda").device


def device_modes() -> list[DeviceMode]:
    return [m for m in _get_current_function_mode_stack() if isinstance(m, DeviceMode)]


def test_enable_disable_restore_torch_exactly():
    assert torch_is_pristine() == []
    torchdevice.enable()
    assert torchdevice.is_enabled()
    assert torch.cuda is not REAL_CUDA
    assert sys.modules["torch.cuda"] is torch.cuda
    assert torch.load is not REAL_LOAD
    assert cuda_tensor_device() == CPU
    torchdevice.disable()
    assert torch_is_pristine() == []
    assert torch.cuda is REAL_CUDA
    assert torch.Generator is REAL_GENERATOR
    with pytest.raises((RuntimeError, AssertionError)):
        cuda_tensor_device()


def test_enable_and_disable_are_idempotent():
    torchdevice.enable()
    torchdevice.enable()
    assert len(device_modes()) == 1
    torchdevice.disable()
    torchdevice.disable()
    assert torch_is_pristine() == []


def test_enable_with_new_options_reconfigures_in_place():
    torchdevice.enable()
    first = device_modes()
    torchdevice.enable(keep_cpu=True)
    assert device_modes() == first
    runtime = torchdevice.activation.current_runtime()
    assert runtime is not None
    assert runtime.settings.keep_cpu


def test_redirect_restores_disabled_state_on_exit_and_on_exception():
    with torchdevice.redirect():
        assert cuda_tensor_device() == CPU
    assert torch_is_pristine() == []
    with pytest.raises(ValueError, match="inside"), torchdevice.redirect():
        raise ValueError("inside")
    assert torch_is_pristine() == []


def test_redirect_nests_and_restores_the_outer_options():
    torchdevice.enable(keep_cpu=True)
    outer = torchdevice.activation.current_runtime()
    with torchdevice.redirect(cpu_override=True) as inner:
        assert inner is not outer
        assert inner.settings.keep_cpu
        assert inner.settings.cpu_override
        with torchdevice.redirect(keep_cpu=False) as innermost:
            assert not innermost.settings.keep_cpu
        assert torchdevice.activation.current_runtime() is inner
    assert torchdevice.activation.current_runtime() is outer
    assert len(device_modes()) == 1


def test_redirect_is_reentrant_with_the_same_options():
    with torchdevice.redirect(), torchdevice.redirect():
        assert len(device_modes()) == 1
        assert cuda_tensor_device() == CPU
    assert torch_is_pristine() == []


def test_disable_inside_redirect_then_exit():
    with torchdevice.redirect():
        torchdevice.disable()
        assert not torchdevice.is_enabled()
    assert torch_is_pristine() == []


def test_disable_removes_the_mode_from_under_another_mode():
    class Outer(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    torchdevice.enable()
    other = Outer()
    other.__enter__()
    try:
        torchdevice.disable()
        assert _get_current_function_mode_stack() == [other]
    finally:
        other.__exit__(None, None, None)


def run_in_thread(fn):
    result: dict[str, object] = {}

    def target():
        try:
            result["value"] = fn()
        except Exception as exc:
            result["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return result


def test_threads_started_after_enable_are_redirected():
    torchdevice.enable()
    assert run_in_thread(cuda_tensor_device) == {"value": CPU}
    assert run_in_thread(lambda: torch.device("cpu:-1")) == {"value": CPU}


def test_thread_pool_workers_are_redirected():
    from concurrent.futures import ThreadPoolExecutor

    torchdevice.enable()
    with ThreadPoolExecutor(max_workers=2) as pool:
        devices = list(pool.map(lambda _: cuda_tensor_device(), range(4)))
    assert devices == [CPU] * 4


def test_threads_after_disable_are_native_again():
    torchdevice.enable()
    torchdevice.disable()
    result = run_in_thread(cuda_tensor_device)
    assert isinstance(result.get("error"), (RuntimeError, AssertionError))


def test_a_thread_started_while_enabled_goes_native_after_disable():
    enabled, disabled, finished = threading.Event(), threading.Event(), threading.Event()
    seen: list[object] = []

    def worker():
        seen.append(cuda_tensor_device())
        enabled.set()
        disabled.wait(5)
        try:
            cuda_tensor_device()
        except (RuntimeError, AssertionError, NotImplementedError) as exc:
            seen.append(exc)
        finished.set()

    torchdevice.enable()
    thread = threading.Thread(target=worker)
    thread.start()
    assert enabled.wait(5)
    torchdevice.disable()
    disabled.set()
    assert finished.wait(5)
    thread.join()
    assert seen[0] == CPU
    assert isinstance(seen[1], (RuntimeError, AssertionError)), seen[1]


def test_threads_running_before_enable_are_covered():
    """3.12+: threading.setprofile_all_threads; 3.10/3.11: the same C API through ctypes."""
    go, done = threading.Event(), threading.Event()
    seen: list[object] = []

    def worker():
        go.wait(5)
        seen.append(cuda_tensor_device())
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    torchdevice.enable()
    go.set()
    assert done.wait(5)
    thread.join()
    assert seen == [CPU]


def test_set_cpu_override_needs_an_activation():
    with pytest.raises(RuntimeError, match=r"torchdevice\.enable\(\)"):
        torchdevice.set_cpu_override(True)


def test_invalid_option_leaves_state_unchanged(monkeypatch):
    with pytest.raises(torchdevice.SettingsError, match="log_level='LOUD' passed as an argument"):
        torchdevice.enable(log_level="LOUD")
    assert torch_is_pristine() == []
    monkeypatch.setenv("TORCHDEVICE_LOG_LEVEL", "LOUD")
    with pytest.raises(torchdevice.SettingsError, match="TORCHDEVICE_LOG_LEVEL='LOUD'"):
        torchdevice.enable()
    # The variable is the test's own (the pristine check reads exported variables too).
    assert torch_is_pristine() == ["$TORCHDEVICE_LOG_LEVEL is not as native torch had it"]
    monkeypatch.delenv("TORCHDEVICE_LOG_LEVEL")
    assert torch_is_pristine() == []
    with pytest.raises(TypeError, match="unknown torchdevice option 'keep_gpu'"):
        torchdevice.enable(keep_gpu=True)


@pytest.mark.slow
def test_torch_compile_while_enabled_and_after_disable():
    def step(x):
        return torch.relu(x) + torch.ones(3, device="cuda")

    torchdevice.enable()
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    out = compiled(torch.tensor([-1.0, 0.0, 2.0], device="cuda"))
    assert out.device == CPU
    torch.testing.assert_close(out, torch.tensor([1.0, 1.0, 3.0]))
    torchdevice.disable()

    def native(x):
        return torch.relu(x) + torch.ones(3)

    compiled_native = torch.compile(native, fullgraph=True, backend="eager")
    torch.testing.assert_close(
        compiled_native(torch.tensor([-1.0, 0.0, 2.0])), torch.tensor([1.0, 1.0, 3.0])
    )


@pytest.mark.slow
def test_torch_compile_inductor_redirected_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    expected = model(x)
    torchdevice.enable()
    model.cuda()
    compiled = torch.compile(model)
    out = compiled(x.cuda())
    assert out.device == CPU
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_the_mode_is_reentrant_with_nested_with_blocks():
    """``with m: with m:`` pushes twice and pops twice (the stack keeps each push)."""
    from torchdevice.activation import _resolve_host
    from torchdevice.redirecting.runtime import Runtime
    from torchdevice.settings import load_settings

    host = _resolve_host("cpu")
    mode = DeviceMode(Runtime(host, load_settings({})))
    with mode:
        assert _get_current_function_mode_stack() == [mode]
        with mode:
            assert _get_current_function_mode_stack() == [mode, mode]
            assert cuda_tensor_device() == CPU
        assert _get_current_function_mode_stack() == [mode]
        assert cuda_tensor_device() == CPU
    assert _get_current_function_mode_stack() == []


def test_importing_the_package_and_plugin_does_not_import_torch():
    """pytest loads the plugin in every run: it must not cost a torch import."""
    import os
    import subprocess

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
    }
    code = (
        "import sys, torchdevice, torchdevice.tools.pytest_plugin; "
        "print('torch' in sys.modules, callable(torchdevice.report))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.slow
def test_compiled_code_survives_disable_enable_cycles_without_recompiling():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    @torch.compile(backend=counter)
    def step(x):
        return x + torch.ones(3, device="cuda")

    try:
        for _ in range(3):
            torchdevice.enable()
            assert step(torch.zeros(3, device="cuda")).tolist() == [1.0, 1.0, 1.0]
            torchdevice.disable()
        assert counter.frame_count == 1  # one graph, guarded on the same runtime each time
    finally:
        torch._dynamo.reset()


def test_a_reused_runtime_starts_from_its_settings_override():
    torchdevice.enable()
    first = torchdevice.activation.current_runtime()
    torchdevice.set_cpu_override(True)
    torchdevice.disable()
    torchdevice.enable()
    assert torchdevice.activation.current_runtime() is first
    assert first.state.cpu_override is False
    torchdevice.enable(keep_cpu=True)  # other settings: another runtime
    assert torchdevice.activation.current_runtime() is not first

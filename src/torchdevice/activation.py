"""Switching redirection on and off: ``enable``, ``disable``, ``redirect``.

Activation is process-wide (SPEC §1): the function mode is pushed on the calling thread
and carried into other threads by :mod:`torchdevice.threads`; the ``torch.load`` /
``torch.Generator`` wrappers and the ``torch.cuda`` facade are module-level. One lock
serialises every change, so concurrent ``enable``/``disable`` calls leave a consistent
state.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

from torchdevice import fallback as fallback_module
from torchdevice import mode, patches, threads
from torchdevice.fallback import Fallback
from torchdevice.host import Host, HostKind, forced_host, probe_host
from torchdevice.intercepts import build_table
from torchdevice.report import MigrationReport, Recorder, configure_logging
from torchdevice.runtime import Runtime

if TYPE_CHECKING:
    from torchdevice.settings import Settings

__all__ = [
    "current_runtime",
    "disable",
    "enable",
    "is_enabled",
    "redirect",
    "report",
    "reset_report",
    "set_cpu_override",
]

_lock = threading.RLock()
_recorder = Recorder()
_runtime: Runtime | None = None
_mode: mode.DeviceMode | None = None
_options: dict[str, Any] = {}


def _resolve_host(setting: Host | HostKind | None) -> Host:
    if isinstance(setting, Host):
        return setting
    if setting is not None:
        return forced_host(setting)  # the settings model already checked it can be
    return probe_host()


def _facade() -> ModuleType:
    """The facade package, imported on first activation (it pulls in psutil)."""
    from torchdevice import facade  # noqa: PLC0415 - keeps `import torchdevice` light

    return facade


def current_runtime() -> Runtime | None:
    """The active runtime, or ``None`` while disabled."""
    return _runtime


def _enter_current_thread() -> None:
    """Push the active mode on the calling thread; it leaves again when the thread ends."""
    active = _mode
    if active is not None:
        mode.push(active)
        threads.guard_exit()


def _activate(runtime: Runtime, options: dict[str, Any]) -> None:
    """Make ``runtime`` current, installing everything if redirection was off."""
    global _runtime, _mode, _options
    if _runtime is not None and _runtime is not runtime:
        _runtime.flush()  # its fast counters belong in the process-wide report
    table = build_table(runtime.host)
    accelerator = runtime.default_device
    fallback = (
        None
        if accelerator is None
        else Fallback(runtime, accelerator.type, enabled=runtime.settings.fallback)
    )
    if _mode is None:
        new_mode = mode.DeviceMode(runtime, table, fallback)
        _runtime, _mode, _options = runtime, new_mode, options
        threads.install(_enter_current_thread, mode.remove_all)
        _enter_current_thread()
        patches.install(current_runtime)
        _observe_native_fallback(runtime)
        _facade().install(current_runtime)  # per host: torch.cuda off CUDA, torch.mps off MPS
        return
    _runtime, _options = runtime, options
    _mode.runtime = runtime
    _mode.table = table
    _mode.fallback = fallback
    _observe_native_fallback(runtime)
    _enter_current_thread()
    _facade().install(current_runtime)  # adapts the facades to the new host


def _observe_native_fallback(runtime: Runtime) -> None:
    """Count PyTorch's own MPS fallbacks in the report on MPS hosts (none elsewhere)."""
    if runtime.host.kind == "mps":
        fallback_module.observe_native(current_runtime)
    else:
        fallback_module.unobserve_native()


def _configure(settings: Settings, options: dict[str, Any]) -> None:
    explicit = "log_level" in options or bool(os.environ.get("TORCHDEVICE_LOG_LEVEL"))
    configure_logging(settings.log_level, explicit)


def enable(**options: Any) -> None:
    """Redirect every device request in this process through the policy (SPEC §1).

    Idempotent: enabling twice with the same options changes nothing; enabling with other
    options reconfigures the running activation. Options are the fields of
    :class:`~torchdevice.settings.Settings` (``keep_cpu``, ``cpu_override``, ``host``,
    ``log_level``, ``report_path``); each overrides its environment variable.
    """
    with _lock:
        if _runtime is not None and options == _options:
            _enter_current_thread()
            return
        from torchdevice.settings import load_settings  # noqa: PLC0415 - pydantic on demand

        settings = load_settings(options)
        host = _resolve_host(settings.host)  # probe before the facade hides torch.cuda
        _configure(settings, options)
        _activate(Runtime(host, settings, _recorder), dict(options))


def disable() -> None:
    """Stop redirecting and restore torch exactly as it was (SPEC §1). Idempotent."""
    global _runtime, _mode, _options
    with _lock:
        if _mode is None:
            return
        active = _mode
        if _runtime is not None:
            _runtime.flush()
        _facade().uninstall()
        patches.uninstall()
        fallback_module.unobserve_native()
        threads.uninstall()
        mode.remove(active)
        active.retire()
        _runtime, _mode, _options = None, None, {}


def is_enabled() -> bool:
    """Whether redirection is on."""
    return _runtime is not None


@contextmanager
def redirect(**options: Any) -> Iterator[Runtime]:
    """Redirect inside a ``with`` block; nests; the previous state returns on exit.

    Options add to those of an enclosing ``redirect``/``enable``. The scope is in time,
    not per thread: while the block runs, every covered thread is redirected.
    """
    with _lock:
        saved = (_runtime, _options)
        merged = {**_options, **options}
        enable(**merged)
        runtime = _runtime
    assert runtime is not None
    try:
        yield runtime
    finally:
        with _lock:
            previous, previous_options = saved
            if previous is None:
                disable()
            elif previous is not _runtime:
                _activate(previous, previous_options)


def set_cpu_override(on: bool) -> None:
    """Turn the ``cpu:-1`` CPU override on or off from code (SPEC §2)."""
    with _lock:
        if _runtime is None:
            raise RuntimeError(
                "torchdevice is not enabled: call torchdevice.enable() before set_cpu_override()"
            )
        _runtime.set_cpu_override(on)


def report() -> MigrationReport:
    """The migration report of this process so far (all activations)."""
    rt = _runtime
    if rt is not None:
        return rt.report()
    host = probe_host()
    return _recorder.report(f"{host.kind} host, {host.device_name()}")


def reset_report() -> None:
    """Start a new migration report."""
    _recorder.clear()
    if _runtime is not None:
        _runtime.forget_counts()

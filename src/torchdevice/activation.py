"""Switching redirection on and off: ``enable``, ``disable``, ``redirect``.

Activation is process-wide: the function mode is pushed on the calling thread
and carried into other threads by :mod:`torchdevice.patches.threads`; everything else it
changes in torch and the standard library is a patch of
:data:`torchdevice.patches.INSTALL_ORDER`, which activation walks, and which the
:mod:`~torchdevice.ledger` undoes. One lock serialises every change, so concurrent
``enable``/``disable`` calls leave a consistent state.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from torchdevice import ledger, patches, program
from torchdevice.host import HOST_KINDS, Host, HostChoice, forced_host, probe_host
from torchdevice.logs import configure_logging, logger
from torchdevice.patches import threads
from torchdevice.redirecting import mode
from torchdevice.redirecting import runtime as runtime_module
from torchdevice.redirecting.fallback import Fallback
from torchdevice.redirecting.runtime import Runtime
from torchdevice.reporting import MigrationReport
from torchdevice.reporting import file as report_file
from torchdevice.reporting import parts as report_parts
from torchdevice.reporting.recorder import Recorder
from torchdevice.settings import ENV_VARS, Settings, load_settings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from torchdevice.settings import Options

__all__ = [
    "current_runtime",
    "describe",
    "disable",
    "enable",
    "enable_for",
    "is_enabled",
    "redirect",
    "report",
    "reset_report",
    "set_cpu_override",
]

_lock = threading.RLock()
_recorder = Recorder()
_mode: mode.DeviceMode | None = None
_options: dict[str, Any] = {}

#: Ledger group of the environment variables exported for child processes.
ENV_GROUP = patches.ENV_GROUP
#: Settings field -> the environment variable that carries it to child processes.
_FIELD_VARS = {field: variable for variable, field in ENV_VARS.items()}


def _resolve_host(setting: Host | HostChoice | None) -> Host:
    if isinstance(setting, Host):
        return setting
    if setting is not None:
        return forced_host(setting)  # the settings model already checked it can be
    return probe_host()


def current_runtime() -> Runtime | None:
    """The active runtime, or ``None`` while disabled
    (:func:`torchdevice.redirecting.runtime.active`)."""
    return runtime_module.active()


def _env_value(name: str, value: Any, host: Host) -> str | None:
    """``value`` of option ``name`` as its environment variable reads it; ``None``: it
    cannot travel.

    A host travels as its kind only when a child would build that very host from it:
    ``"cpu"``, or the kind the machine really has. An extra backend's choice travels as
    itself: every child starts its own backend from the same entry point. An injected
    :class:`Host` (a started accelerator, a pretend MPS machine) does not: children probe
    the real machine.
    """
    if name == "host":
        if isinstance(value, str) and value not in HOST_KINDS:  # an extra backend's choice
            return value
        return host.kind if host in (Host.cpu(), probe_host()) else None
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _export_environment(runtime: Runtime, options: dict[str, Any]) -> None:
    """Put redirection, and each setting given as an argument, in the environment.

    Every Python process this one starts (``subprocess``, ``multiprocessing`` spawn and
    forkserver, DataLoader workers, torchrun's workers) inherits it, and the ``.pth``
    hook shipped with torchdevice (:mod:`_torchdevice_startup`) enables it there when
    torch is imported, with the same settings. Settings that came from the environment are
    there already; ``cpu_override`` has no variable and stays with this process. Recorded
    in the ledger, so ``disable()`` restores the variables.
    """
    ledger.undo(ENV_GROUP)
    ledger.set_env(ENV_GROUP, patches.ACTIVATE_VAR, "1")
    # What the program is written for, however it was found: a child (a DataLoader worker,
    # a rank) runs the same program and must tell the same story (torchdevice.program).
    exported = {**options, "written_for": runtime.settings.written_for}
    for name, value in exported.items():
        variable = _FIELD_VARS.get(name)
        text = None if variable is None or value is None else _env_value(name, value, runtime.host)
        if variable is not None and text is not None:
            ledger.set_env(ENV_GROUP, variable, text)


def _enter_current_thread() -> None:
    """Push the active mode on the calling thread; it leaves again when the thread ends.

    Not in the entry-points tier, whose wrappers serve every thread without a mode."""
    active = _mode
    if active is not None and active.runtime.settings.intercept == "mode":
        mode.push(active)
        threads.guard_exit()


def _after_fork_in_child() -> None:
    """In a fork child that must not touch the accelerator, keep host requests on the CPU.

    A ``DataLoader`` worker is forked from a process that has used the accelerator; CUDA
    (and MPS) cannot be used again in such a child, which torch reports through the device
    module's ``_is_in_bad_fork()`` (``torch.manual_seed`` asks the same question). Natively
    the worker's host tensors (``torch.rand(3)`` in ``__getitem__``) are CPU tensors.
    """
    rt = runtime_module.active()
    if rt is None or rt.default_device is None:
        return
    try:
        module = torch.get_device_module(rt.default_device.type)
    except RuntimeError:  # no device module: nothing says the child cannot use it
        return
    in_bad_fork = getattr(module, "_is_in_bad_fork", None)
    if in_bad_fork is not None and in_bad_fork():
        rt.keep_host_requests(
            f"this process was forked after {rt.default_device.type} was initialized"
        )


_fork_hook: list[bool] = []


def _watch_forks() -> None:
    """Register :func:`_after_fork_in_child` once per process.

    Fork handlers cannot be unregistered; this one does nothing while redirection is off,
    so it is outside the ledger.
    """
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook.append(True)


def _activate(runtime: Runtime, options: dict[str, Any]) -> None:
    """Make ``runtime`` current, installing everything if redirection was off.

    One tier at a time: switching between the function mode and the entry-points tier
    takes the other tier's changes out first (``disable()``), then installs afresh.
    """
    global _mode, _options
    if _mode is not None and _mode.runtime.settings.intercept != runtime.settings.intercept:
        disable()
        configure_logging(runtime.settings.log_level)  # enable()'s, which disable() undid
    _export_environment(runtime, options)
    accelerator = runtime.default_device
    fallback = (
        None
        if accelerator is None
        else Fallback(runtime, accelerator.type, enabled=runtime.settings.fallback)
    )
    installing = patches.Activation(runtime, _enter_current_thread, mode.remove_all, _own_report)
    if _mode is None:
        _watch_forks()
        new_mode = mode.DeviceMode(runtime, fallback)
        runtime_module.set_active(runtime)
        _mode, _options = new_mode, options
        patches.install(installing, first=True)  # the threads' patch enters this thread
        return
    runtime_module.set_active(runtime)
    _options = options
    _mode.serve(runtime, fallback)
    _enter_current_thread()
    patches.install(installing, first=False)  # adapts what follows the host to the new one


def enable(**options: Unpack[Options]) -> None:
    """Redirect every device request in this process through the policy.

    Idempotent: enabling twice with the same options changes nothing; enabling with other
    options reconfigures the running activation. Each option overrides its environment
    variable, which overrides the default (:class:`~torchdevice.settings.Settings`):

    - ``log_level`` (``TORCHDEVICE_LOG_LEVEL``): ``"DEBUG"``/``"INFO"``/``"WARNING"``/
      ``"ERROR"`` for the ``torchdevice`` loggers; unset, logging's configuration decides.
    - ``keep_cpu`` (``TORCHDEVICE_KEEP_CPU``): explicit ``"cpu"`` requests stay on the CPU.
    - ``cpu_override``: start with the ``"cpu:-1"`` override on.
    - ``host`` (``TORCHDEVICE_HOST``): ``"cpu"``, or ``"mps"``/``"cuda"`` where the machine
      has it, or the choice of a backend an installed distribution declares
      (:data:`~torchdevice.host.HOST_CHOICES`), or a :class:`~torchdevice.host.Host`;
      unset, the machine is probed.
    - ``report_path`` (``TORCHDEVICE_REPORT``): where the report is written at exit; a path
      that cannot be written is refused here.
    - ``fallback`` (``TORCHDEVICE_FALLBACK``): rerun on the CPU the ops the accelerator
      cannot run (default true).
    - ``cuda_available`` (``TORCHDEVICE_CUDA_AVAILABLE``): what the facades' availability
      queries answer while redirecting (default true).
    - ``intercept`` (``TORCHDEVICE_INTERCEPT``): ``"mode"`` (default: a function mode sees
      every torch call) or ``"entry-points"`` (wrappers on the functions that take a
      device, no mode: every other op runs native; docs/tiers.md).

    - ``written_for`` (``TORCHDEVICE_WRITTEN_FOR``): ``"cuda"`` or ``"mps"``, the accelerator
      the program is written for; unset, it is read from the module that calls
      ``enable()`` (:mod:`torchdevice.program`).

    A bad value raises :class:`~torchdevice.errors.SettingsError` naming where it came from.

    Child processes are redirected too: ``ACTIVATE_TORCH_DEVICE=1`` and each option given
    here (but ``cpu_override``, and a ``host`` the child could not be) are exported to the
    environment they inherit, until ``disable()``; the ``.pth`` file installed with
    torchdevice enables them when they import torch (docs: "Child processes").

    With ``report_path`` (or ``TORCHDEVICE_REPORT``), the migration report of the whole run
    is written there when the process exits (:mod:`torchdevice.reporting.file`).
    """
    caller = sys._getframe(1)
    enable_for(lambda: program.of_caller(caller), dict(options))


def enable_for(read_program: Callable[[], program.Reading], options: dict[str, Any]) -> None:
    """:func:`enable` for a program ``read_program`` reads, when no ``written_for`` option
    says what it is written for: the launcher's script, ``__main__`` for an activation
    from the environment or the pytest plugin (whose callers are no program).

    ``read_program`` is called only when the option is unset, and before the runtime is
    chosen: an activation is one story (:mod:`torchdevice.program`).
    """
    with _lock:
        if runtime_module.active() is not None and options == _options:
            _enter_current_thread()
            return
        # What an earlier activation exported for its children is not the user's
        # environment: it must not fill the options this call leaves out.
        ledger.undo(ENV_GROUP)
        try:
            settings = load_settings(options)
            host = _resolve_host(settings.host)  # probe before the facade hides torch.cuda
            settings, reading = _read_program(settings, read_program)
        except BaseException:
            active = runtime_module.active()
            if active is not None:  # the running activation stays, and so do its exports
                _export_environment(active, _options)
            raise
        configure_logging(settings.log_level)
        fresh = not _serves(_last_runtime, host, settings)
        runtime = _runtime_for(host, settings)
        _activate(runtime, dict(options))
        report_file.request(settings.report_path, report)  # written at exit (report_file)
        if fresh:  # once per process and configuration, whichever way it was switched on
            logger.info("%s", describe(runtime))
            logger.debug("the program is %s code: %s", reading.written_for, reading.source)


def _read_program(
    settings: Settings, read_program: Callable[[], program.Reading]
) -> tuple[Settings, program.Reading]:
    """``settings`` with ``written_for`` filled in: the option's, else the program's."""
    if settings.written_for is not None:
        return settings, program.Reading(settings.written_for, "the written_for option")
    reading = read_program()
    return dataclasses.replace(settings, written_for=reading.written_for), reading


def describe(runtime: Runtime) -> str:
    """Where device requests go under ``runtime``, in one line (the start-up line)."""
    target = runtime.default_device
    host = runtime.host
    where = "cpu" if target is None else str(target)
    line = f"redirecting to {where} ({host.kind} host, {host.device_name()})"
    if runtime.settings.keep_cpu:
        line += "; explicit 'cpu' requests stay on the CPU"
    if runtime.settings.intercept != "mode":
        line += f"; {runtime.settings.intercept} tier (no function mode)"
    return line


class _FromEnvironment:
    """The default an option shows in ``help()``: its variable, else the setting's default."""

    def __init__(self, variable: str | None, default: object) -> None:
        self.text = repr(default) if variable is None else f"${variable} or {default!r}"

    def __repr__(self) -> str:
        return self.text


def _options_signature(returns: str) -> inspect.Signature:
    """``(*, log_level=..., keep_cpu=..., ...)``: the options one by one, for ``help()``,
    which would otherwise show ``**options: Unpack[Options]``."""
    return inspect.Signature(
        [
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=_FromEnvironment(_FIELD_VARS.get(field.name), field.default),
                annotation=field.type,
            )
            for field in dataclasses.fields(Settings)
        ],
        return_annotation=returns,
    )


enable.__signature__ = _options_signature("None")  # type: ignore[attr-defined]


#: The runtime of the last activation, reused by the next one with the same host and
#: settings (see :func:`_runtime_for`).
_last_runtime: Runtime | None = None


def _serves(runtime: Runtime | None, host: Host, settings: Settings) -> bool:
    """Whether ``runtime`` is the one an activation with ``host`` and ``settings`` builds."""
    return runtime is not None and runtime.host == host and runtime.settings == settings


def _runtime_for(host: Host, settings: Settings) -> Runtime:
    """The runtime for an activation: the last one again when nothing it depends on changed.

    Compiled code is guarded on the runtime's identity (its decisions are trace-time
    constants), so a new object at every ``enable()`` would recompile every graph after
    each ``disable()``/``enable()`` cycle or ``redirect()`` block, and a loop of them would
    hit dynamo's recompile limit. Reused, it starts from its settings' ``cpu:-1`` state.
    """
    global _last_runtime
    last = _last_runtime
    if last is not None and _serves(last, host, settings):
        last.set_cpu_override(settings.cpu_override)
        return last
    _last_runtime = Runtime(host, settings, _recorder)
    return _last_runtime


def disable() -> None:
    """Stop redirecting and restore torch exactly as it was. Idempotent.

    Every change torchdevice made outside itself is in the :mod:`~torchdevice.ledger`,
    which undoes them newest first; then the mode leaves this thread's stack (other
    threads' exit guards take it off theirs) and stops redirecting.
    """
    global _mode, _options
    with _lock:
        if _mode is None:
            return
        active = _mode
        try:
            ledger.undo()
        finally:
            runtime_module.set_active(None)
            mode.remove(active)
            active.retire()
            _mode, _options = None, {}


def is_enabled() -> bool:
    """Whether redirection is on."""
    return runtime_module.active() is not None


@contextmanager
def redirect(**options: Unpack[Options]) -> Iterator[Runtime]:
    """Redirect inside a ``with`` block; nests; the previous state returns on exit.

    Options are :func:`enable`'s, and add to those of an enclosing ``redirect``/``enable``.
    The scope is in time, not per thread: while the block runs, every covered thread is
    redirected.
    """
    with _lock:
        saved = (runtime_module.active(), _options)
        merged = {**_options, **options}
        enable(**merged)
        runtime = runtime_module.active()
    assert runtime is not None
    try:
        yield runtime
    finally:
        with _lock:
            previous, previous_options = saved
            if previous is None:
                disable()
            elif previous is not runtime_module.active():
                _activate(previous, previous_options)


redirect.__signature__ = _options_signature("Iterator[Runtime]")  # type: ignore[attr-defined]


def set_cpu_override(on: bool) -> None:
    """Turn the ``cpu:-1`` CPU override on or off from code."""
    with _lock:
        rt = runtime_module.active()
        if rt is None:
            raise RuntimeError(
                "torchdevice is not enabled: call torchdevice.enable() before set_cpu_override()"
            )
        rt.set_cpu_override(on)


def _own_report() -> MigrationReport:
    """This process's own records (all activations), without other processes' parts."""
    rt = runtime_module.active()
    if rt is not None:
        return rt.report()
    host = probe_host()
    return _recorder.report(f"{host.kind} host, {host.device_name()}")


def report() -> MigrationReport:
    """The migration report so far: this process's, all activations.

    In the process that started a run (see :mod:`torchdevice.reporting.parts`), the report
    of every process of the run that has exited so far is merged in: counts of a call
    site add up, and ``processes``/``ranks`` count them.
    """
    return report_parts.combined(_own_report())


def reset_report() -> None:
    """Start a new migration report (the other processes' parts collected so far too)."""
    _recorder.clear()
    report_parts.reset()

"""Run an unmodified script (or module) redirected: ``python -m torchdevice SCRIPT``.

The script runs as ``__main__`` with the ``sys.argv``, ``__file__`` and ``sys.path[0]`` it
would have had if started directly; its exit code and exceptions come through unchanged.
The migration report is printed to stderr (or written to a file) when it ends, whichever
way it ends; it includes the reports of the child processes of the run that have ended
(:mod:`torchdevice.reporting.parts`). A launcher started by another redirected process
leaves the reporting to that process.

With a gate (``--max-redirected-lines N``, :mod:`torchdevice.tools.gate`), the run ends
with status :data:`GATE_STATUS` when the whole run's report holds more than ``N`` of the
user's lines, and the script itself succeeded. A native run (``--native``) switches
nothing on: the script runs as ``python SCRIPT`` would, beside the accelerator the host
setting started (the simulated MPS device, for its ``--host`` choice).
"""

from __future__ import annotations

import builtins
import functools
import importlib.machinery
import importlib.util
import io
import os
import runpy
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from torchdevice import activation, announce, logs, program
from torchdevice.reporting import file as report_file
from torchdevice.reporting import parts as report_parts
from torchdevice.tools import gate as ci_gate

__all__ = ["GATE_STATUS", "LaunchError", "gate_report", "run_module", "run_script", "script_status"]

#: The exit status of a run that succeeded but redirected more lines than the gate allows.
GATE_STATUS = ci_gate.STATUS
#: What the script's own exit status was (``None``: it has not ended, or was interrupted).
_script_status: int | None = None


@contextmanager
def _argv(argv: list[str], path0: str) -> Iterator[None]:
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv[:] = argv
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    try:
        yield
    finally:
        sys.argv[:] = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0


#: torchdevice's own files (the whole package, not only this module's folder) and runpy's
#: (a frozen module on 3.11+: its frames name ``<frozen runpy>``).
_OWN_FILES = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    runpy.__file__,
    "<frozen runpy>",
)


class LaunchError(Exception):
    """What stops a run before the script starts (no such module): a usage error."""


def _script_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the launcher's and runpy's frames: what a direct run would show.

    A traceback that reached the top of the process starts with the frames that led to
    the launcher (runpy's, the console script's): they go up to :func:`_run`'s, then
    torchdevice's and runpy's own frames up to the script's first.
    """
    start = tb
    while start is not None and start.tb_frame.f_code is not _run.__code__:
        start = start.tb_next
    tb = tb if start is None else start
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_FILES):
        tb = tb.tb_next
    return tb


def _show_script_frames_only() -> None:
    """Make ``sys.excepthook`` print an exception reaching the top with the script's frames.

    For ``KeyboardInterrupt``, which must leave the process the way Python's own handling
    does (printed, ``atexit`` handlers run, then death by ``SIGINT``: status 130 in a
    shell), so the exception itself goes on up; only what is printed is trimmed.
    """
    hook = sys.excepthook

    def excepthook(
        kind: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        tb = _script_traceback(tb)
        hook(kind, value.with_traceback(tb), tb)

    sys.excepthook = excepthook


def _run(
    target: Any,
    argv: list[str],
    path0: str,
    options: dict[str, Any],
    read_program: Callable[[], program.Reading],
    report_path: Path | None,
    quiet: bool,
) -> None:
    """Run ``target`` redirected, then fail the way a direct run fails.

    Redirection stays on until the process ends, as the device the script was written
    for stays there: threads still running when the script's main code returns, daemon
    threads and ``atexit`` handlers all run redirected. The report is printed by
    :mod:`torchdevice.reporting.file`'s ``atexit`` handler, so it comes after the
    interpreter has joined those threads and counts what they redirected. An uncaught
    exception goes to ``sys.excepthook`` with the script's own frames only and ends the
    process with status 1, as the interpreter does; ``SystemExit`` passes through
    untouched, and so does ``KeyboardInterrupt``, printed with the script's frames only.
    ``quiet`` (``--no-report``) leaves out the report, not the line that says
    torchdevice is on.
    """
    _enable(options, read_program)
    # The launcher's report (or, quiet, none), whatever the script's activations ask; the
    # one exit handler of torchdevice.reporting.file delivers it.
    report_file.take(None if quiet else report_path, activation.report, speak=not quiet)
    if report_parts.role() != "writer":  # started by a redirected run: silent
        print(announce.start_line(), file=sys.stderr, flush=True)
    _run_as_main(target, argv, path0)


def _run_as_main(target: Any, argv: list[str], path0: str) -> None:
    """Run ``target`` with the script's ``argv`` and ``sys.path[0]``, and end as a direct
    run ends (see :func:`_run`); note its exit status for the gate."""
    global _script_status
    try:
        with _argv(argv, path0):
            target()
    except SystemExit as exc:
        _script_status = _status_of(exc.code)
        raise
    except Exception as exc:  # reported below exactly as Python would
        # Also set on the exception: 3.11+ print ``exc.__traceback__``, not the argument.
        tb = _script_traceback(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        _script_status = 1
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        _show_script_frames_only()
        raise
    _script_status = 0


def _status_of(code: object) -> int:
    """The exit status ``SystemExit(code)`` gives, as the interpreter reads it."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def script_status() -> int | None:
    """The script's exit status once it has ended (``None``: not yet, or interrupted)."""
    return _script_status


def gate_report() -> Any:
    """The whole run's report for the CI gate, or ``None`` in a launcher that a redirected
    run started (that run judges)."""
    return None if report_parts.role() == "writer" else activation.report()


def _run_native(target: Any, argv: list[str], path0: str, beside: str | None) -> None:
    """Run ``target`` as ``python SCRIPT`` would, torchdevice off in this process and in
    the processes it starts, beside the accelerator ``beside`` describes (if any), which
    the host setting started."""
    for variable in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"):
        os.environ.pop(variable, None)  # nothing the script starts is redirected either
    said = f", beside {beside}" if beside else ""
    print(f"torchdevice: off (--native), running natively{said}", file=sys.stderr, flush=True)
    _run_as_main(target, argv, path0)


def _enable(options: dict[str, Any], read_program: Callable[[], program.Reading]) -> None:
    """Switch redirection on for the program ``read_program`` reads (the script: what it
    is written for, unless an option says); torchdevice's warnings (and records at the
    level asked for) go to stderr, which the launcher owns, until the script configures
    logging."""
    logs.show_on_stderr()
    activation.enable_for(read_program, options)


def _exec_main(filename: str) -> None:
    """Run a script file as ``__main__`` the way the interpreter does.

    ``runpy.run_path`` would also rewrite ``sys.argv[0]`` to the path it is given; a
    direct run keeps ``argv[0]`` as typed and gives ``__file__`` the absolute path.
    """
    with io.open_code(filename) as handle:
        code = compile(handle.read(), filename, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=filename,
        __cached__=None,
        __builtins__=builtins,
        __loader__=importlib.machinery.SourceFileLoader("__main__", filename),
    )
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def run_script(
    script: str,
    args: Sequence[str] = (),
    *,
    options: dict[str, Any] | None = None,
    report_path: Path | None = None,
    quiet: bool = False,
    native: bool = False,
    beside: str | None = None,
) -> None:
    """Run ``script`` as ``__main__`` with ``args``, redirected; report at the end.

    The CI gate is registered by the caller, before torch's import
    (:func:`torchdevice.tools.gate.fail_at_exit`, with :func:`gate_report` and
    :func:`script_status`). ``native``: run it without torchdevice (``beside``: the
    accelerator it runs beside, as the start line names it).

    As a direct run: ``sys.argv[0]`` is the path as given, ``__file__`` is absolute, and
    ``sys.path[0]`` is the script's directory with symlinks resolved.
    """
    path = Path(script)
    if not path.exists():
        raise FileNotFoundError(
            f"can't open file {os.path.abspath(script)!r}: [Errno 2] No such file or directory"
        )
    argv = [script, *args]
    path0 = str(path.resolve().parent) if path.is_file() else str(path.resolve())
    absolute = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    target = (
        (lambda: _exec_main(absolute))
        if path.is_file() and path.suffix != ".zip"
        else (lambda: runpy.run_path(absolute, run_name="__main__"))  # dir or zip app
    )
    if native:
        _run_native(target, argv, path0, beside)
        return
    _run(
        target,
        argv,
        path0,
        options or {},
        lambda: program.of_script(absolute),
        report_path,
        quiet,
    )


def run_module(
    module: str,
    args: Sequence[str] = (),
    *,
    options: dict[str, Any] | None = None,
    report_path: Path | None = None,
    quiet: bool = False,
    native: bool = False,
    beside: str | None = None,
) -> None:
    """Run ``python -m module args`` redirected; report at the end (``native``,
    ``beside``: as :func:`run_script`).

    A module that cannot be found raises :class:`LaunchError` before anything runs (and
    nothing is reported). It is looked up once redirection is on: finding ``pkg.mod``
    imports ``pkg``, whose code must run redirected as the module's does.
    """
    read_program = functools.partial(program.of_module, module)
    target = functools.partial(runpy.run_module, module, run_name="__main__", alter_sys=True)
    argv = [module, *args]  # runpy replaces argv[0] with the module's file
    if native:
        problem = _module_problem(module)
        if problem is not None:
            raise LaunchError(problem)
        _run_native(target, argv, os.getcwd(), beside)
        return
    _enable(options or {}, read_program)
    problem = _module_problem(module)
    if problem is not None:
        raise LaunchError(problem)
    _run(
        target,
        argv,
        os.getcwd(),
        options or {},
        read_program,
        report_path,
        quiet,
    )


def _module_problem(module: str) -> str | None:
    """Why ``python -m module`` would not start, in runpy's words (``None``: it would)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:  # a parent package that is missing or fails
        return (
            f"Error while finding module specification for {module!r} ({type(exc).__name__}: {exc})"
        )
    if spec is None:
        return f"No module named {module}"
    if spec.submodule_search_locations is not None:  # a package runs its __main__
        main = f"{module}.__main__"
        if module == "__main__" or module.endswith(".__main__"):
            return "Cannot use package as __main__ module"
        if _module_problem(main) is not None:
            return (
                f"No module named {main}; {module!r} is a package and cannot be directly executed"
            )
    return None

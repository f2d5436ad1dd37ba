"""Run an unmodified script (or module) redirected: ``python -m torchdevice SCRIPT``.

The script runs as ``__main__`` with the ``sys.argv``, ``__file__`` and ``sys.path[0]`` it
would have had if started directly; its exit code and exceptions come through unchanged.
The migration report is printed to stderr (or written to a file) when it ends, whichever
way it ends.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from torchdevice import activation

__all__ = ["run_module", "run_script"]


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


def _emit_report(report_path: Path | None, stream: TextIO) -> None:
    report = activation.report()
    if report_path is not None:
        report.write(report_path)
        print(f"torchdevice: migration report written to {report_path}", file=stream)
    else:
        print(report.to_text(), file=stream)


def _run(target: Any, argv: list[str], path0: str, options: dict[str, Any],
         report_path: Path | None, quiet: bool) -> None:  # fmt: skip
    activation.enable(**options)
    try:
        with _argv(argv, path0):
            target()
    finally:
        activation.disable()
        if not quiet:
            _emit_report(report_path, sys.stderr)


def run_script(
    script: str,
    args: Sequence[str] = (),
    *,
    options: dict[str, Any] | None = None,
    report_path: Path | None = None,
    quiet: bool = False,
) -> None:
    """Run ``script`` as ``__main__`` with ``args``, redirected; report at the end."""
    path = Path(script)
    if not path.exists():
        raise FileNotFoundError(f"torchdevice: can't open file {script!r}: no such file")
    argv = [script, *args]
    path0 = str(path.resolve().parent) if path.is_file() else str(path.resolve())
    _run(
        lambda: runpy.run_path(script, run_name="__main__"),
        argv, path0, options or {}, report_path, quiet,
    )  # fmt: skip


def run_module(
    module: str,
    args: Sequence[str] = (),
    *,
    options: dict[str, Any] | None = None,
    report_path: Path | None = None,
    quiet: bool = False,
) -> None:
    """Run ``python -m module args`` redirected; report at the end."""
    argv = [module, *args]  # runpy replaces argv[0] with the module's file
    _run(
        lambda: runpy.run_module(module, run_name="__main__", alter_sys=True),
        argv, os.getcwd(), options or {}, report_path, quiet,
    )  # fmt: skip

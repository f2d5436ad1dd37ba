"""One migration report for a run of many processes, the way ``coverage combine`` works.

The process that starts a run, the *root*, is the first to activate while
``TORCHDEVICE_REPORT_PARTS`` is unset. It names a private directory in that variable
(through the :mod:`~torchdevice.ledger`, so ``disable()`` unsets it again), and the
processes it starts inherit it. The directory is made by the first part writer, not by
the root: a root killed by a signal (a scheduler's SIGTERM, which runs no ``atexit``)
then leaves nothing behind unless a child of it had already written its part. Its name
carries the root's pid, and a writer makes it only while the root is alive, so a child
that outlives the root does not leave a directory that nobody reads.

Every process that activates with the variable set is a *part writer*: when it exits
(the exit sequence of :mod:`torchdevice.reporting.file`, after the interpreter has joined
its threads) or disables, it writes its own report there, atomically (a temporary file,
then ``os.replace``), under a name made of its pid and a random suffix. The root's report
is its own merged with every part present (:func:`combined`); the root collects the parts
and removes the directory at exit (:func:`finish`, the exit sequence's first step, before
it builds the report) or at ``disable()``, keeping the parts it had read.

Files rather than a pipe or a socket: a part needs no listener and survives its writer,
so a child that crashes (an exception still runs ``atexit``) loses nothing, a child
killed by a signal loses only its own part, and writers need not know how many they are.

Nothing here is on the redirect hot path: this module runs at activation, at exit and
when a report is asked for. It imports no torch.

Not covered: a process that ends without running ``atexit`` writes no part, which includes
``os.fork`` children (``multiprocessing``'s fork workers end with ``os._exit``; a forked
copy of the root or of a writer also leaves the directory and the part to the process it
was copied from).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from torchdevice import ledger
from torchdevice.logs import report_logger as logger
from torchdevice.reporting.report import MigrationReport, merge

__all__ = ["ENV", "GROUP", "combined", "detach", "finish", "reset", "role", "start"]

#: The variable naming the directory where a run's processes leave their reports.
ENV = "TORCHDEVICE_REPORT_PARTS"
#: The ledger group of what :func:`start` changes (the variable, the finish at ``disable()``).
GROUP = "report parts"
_PART_SUFFIX = ".json"
#: The start of a run's directory name: ``torchdevice-report-<root pid>-<random>``.
_PREFIX = "torchdevice-report-"

Role = Literal["root", "writer"]


@dataclass
class _Run:
    """This process's place in the run, from its first activation on."""

    role: Role
    directory: Path
    #: The process this was set up in: a forked copy leaves files alone.
    pid: int
    #: This process's own report (its recorder), read when the part is written.
    own: Callable[[], MigrationReport]
    #: A part writer's file name: one per process, overwritten by each later write.
    part_name: str = ""


_lock = threading.RLock()
_run: _Run | None = None
#: Root: the parts read from a directory it has since removed (``disable()``).
_collected: list[MigrationReport] = []
#: A writer's part name, kept across its activations so that each write replaces the last.
_part_name: tuple[int, str] | None = None
#: The pid whose report reaches the root another way (:func:`detach`): it writes no part.
_detached_pid: int | None = None


def _rank() -> int | None:
    """This process's rank when a launcher set one (torchrun sets both; ``RANK`` is global)."""
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _stamped(report: MigrationReport) -> MigrationReport:
    """``report`` with this process's rank, when it has one."""
    rank = _rank()
    return report if rank is None else replace(report, ranks=(rank,))


def _own_part_name() -> str:
    global _part_name
    pid = os.getpid()
    if _part_name is None or _part_name[0] != pid:
        _part_name = (pid, f"part-{pid}-{secrets.token_hex(4)}{_PART_SUFFIX}")
    return _part_name[1]


def start(own: Callable[[], MigrationReport]) -> None:
    """Take this process's place in the run; called when redirection is switched on.

    Root when :data:`ENV` is unset (it names the directory and sets the variable), part
    writer otherwise. Either way the exit sequence finishes the job (:func:`finish`), and
    ``disable()`` finishes it early through the ledger. Idempotent while active.
    """
    global _run
    with _lock:
        if ledger.has(GROUP):
            return
        inherited = os.environ.get(ENV, "")
        if inherited:
            run = _Run("writer", Path(inherited), os.getpid(), own, _own_part_name())
        else:
            name = f"{_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
            directory = Path(tempfile.gettempdir(), name)  # made by its first writer
            run = _Run("root", directory, os.getpid(), own)
            ledger.set_env(GROUP, ENV, str(directory))
        _run = run
        ledger.hook(GROUP, "the migration report parts' exit handler", lambda: _stop(run))


def _stop(run: _Run) -> None:
    """``disable()``: finish now, and no longer at exit."""
    global _run
    with _lock:
        if _run is run:
            _run = None
    _finish(run)


def finish() -> None:
    """The exit sequence's first step (:func:`torchdevice.reporting.file._at_exit`): a part
    writer writes its part; the root collects the parts present and removes the directory,
    so the report it builds next has them all. Nothing while this process takes no part."""
    with _lock:
        run = _run
    if run is not None:
        _finish(run)


def _finish(run: _Run) -> None:
    """Write this writer's part, or collect the root's parts and remove the directory."""
    if run.pid != os.getpid():
        return  # a forked copy: the process it was copied from finishes
    if run.role == "writer":
        if _detached_pid != run.pid:
            _write_part(run)
        return
    with _lock:
        _collected.extend(_read_parts(run.directory))
        shutil.rmtree(run.directory, ignore_errors=True)


def _write_part(run: _Run) -> None:
    """Write this process's report into the run's directory, atomically."""
    data = _stamped(run.own()).to_dict()
    data["pid"] = os.getpid()
    final = run.directory / run.part_name
    temporary = run.directory / f".{run.part_name}.{secrets.token_hex(4)}.tmp"
    try:
        _make_directory(run.directory)
        temporary.write_text(json.dumps(data), encoding="utf-8")
        os.replace(temporary, final)
    except OSError as exc:  # the root has already exited and removed the directory
        temporary.unlink(missing_ok=True)
        logger.warning(
            "this process's migration report (pid %d) was not merged: cannot write to %s "
            "(%s); the process that started the run had probably exited",
            os.getpid(),
            run.directory,
            exc,
        )


def _make_directory(directory: Path) -> None:
    """Make the run's directory, private to this user, unless it is there already.

    Raises :class:`FileNotFoundError` when the root that named it has exited (it removed
    the directory, or never needed it): a part written then would never be read.
    """
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(f"{directory} is not a directory of this user")
        return
    root = directory.name.removeprefix(_PREFIX).split("-")[0]
    if not root.isdigit() or not _pid_exists(int(root)):
        raise FileNotFoundError(f"no directory {directory} and its run's root has exited")
    with contextlib.suppress(FileExistsError):  # another writer made it first
        os.mkdir(directory, 0o700)


def _pid_exists(pid: int) -> bool:
    """Whether process ``pid`` exists (``os.kill(pid, 0)``; this module imports no psutil)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        return True
    return True


def _read_parts(directory: Path) -> list[MigrationReport]:
    """The parts present in ``directory`` (written ones only: temporaries start with a dot)."""
    parts = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    for name in names:
        if name.startswith(".") or not name.endswith(_PART_SUFFIX):
            continue
        try:
            raw = json.loads((directory / name).read_text(encoding="utf-8"))
            parts.append(MigrationReport.from_dict(raw))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("skipped an unreadable migration report part %s: %s", name, exc)
    return parts


def role() -> Role | None:
    """``"root"``, ``"writer"``, or ``None`` while this process takes no part."""
    run = _run
    return None if run is None or run.pid != os.getpid() else run.role


def combined(own: MigrationReport) -> MigrationReport:
    """``own`` (this process's report) merged with the parts this process collects.

    In the root: every part written so far, and those read before a ``disable()``. In a
    part writer or an inactive process with nothing collected: ``own``, with its rank.
    """
    with _lock:
        run = _run
        parts = list(_collected)
        if run is not None and run.role == "root" and run.pid == os.getpid():
            parts += _read_parts(run.directory)
    own = _stamped(own)
    return merge([own, *parts]) if parts else own


def detach() -> None:
    """This process's report reaches the root another way: write no part for it.

    For good: a part it wrote already (at a ``disable()``) is removed, and none is written
    at a later ``disable()`` or at exit, which would count its records twice.
    """
    global _detached_pid
    with _lock:
        _detached_pid = os.getpid()
        directory = os.environ.get(ENV, "")
        if _part_name is not None and _part_name[0] == _detached_pid and directory:
            (Path(directory) / _part_name[1]).unlink(missing_ok=True)


def reset() -> None:
    """A new report starts (``reset_report()``): forget the parts collected so far."""
    with _lock:
        _collected.clear()
        run = _run
        if run is not None and run.role == "root" and run.pid == os.getpid():
            for name in os.listdir(run.directory) if run.directory.is_dir() else ():
                (run.directory / name).unlink(missing_ok=True)

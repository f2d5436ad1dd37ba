"""``torchdevice port``: the migration report's rows turned into a patch.

The rules that rewrite one file are :func:`.calls.port_source` (pure functions over a
file's text, which the report's advice reads too); :func:`patch_for` applies them to every
user file of a report's rows, with ``static=True`` also to calls that did not run
(:func:`static_entries`, ported under an "unverified" comment), and makes the patch: a first
line saying which torch the patched code needs (:func:`minimum_torch`), then a unified diff
per file. It takes the rows, not a report: reading report files is the command line's.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torchdevice.port.calls import port_source
from torchdevice.port.source import (
    MARK,
    STATIC_REASON,
    PortEntry,
    dotted,
    is_device_literal,
    keyword_of,
)
from torchdevice.port.table import SINCE
from torchdevice.sites import CallSite, Position, origin

__all__ = [
    "FilePort",
    "PortResult",
    "StaticEntry",
    "library_of",
    "minimum_torch",
    "needs_line",
    "older_torch",
    "patch_for",
    "static_entries",
    "unified_diff",
]


@dataclass(frozen=True)
class FilePort:
    """One file ported: its old and new text and the comments the port left in it."""

    path: str
    old: str
    new: str
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """Whether the port changes this file."""
        return self.old != self.new


@dataclass(frozen=True)
class PortResult:
    """A report ported: the patch, the files in it, and the files it left alone (why)."""

    patch: str
    files: tuple[FilePort, ...]
    skipped: tuple[tuple[str, str], ...]
    #: The oldest torch the patched files run on (``(0, 0)``: no change), and the APIs
    #: that need it; the patch's first line says so (:func:`needs_line`).
    needs: tuple[tuple[int, int], tuple[str, ...]] = ((0, 0), ())


@dataclass(frozen=True)
class StaticEntry:
    """A row ``port --static`` found by reading a file (:func:`static_entries`): what the
    port reads of a report row (:class:`.source.PortEntry`), for a call that did not run."""

    site: CallSite
    kind: str
    api: str
    requested: str
    reason: str
    positions: tuple[Position, ...]


_BACKEND_CALLS = frozenset({"init_process_group", "new_group"})
#: Calls that take a device as their first positional argument, and their report names.
_POSITIONAL = {
    "to": "Tensor.to",
    "autocast": "torch.autocast",
    "GradScaler": "torch.amp.GradScaler",
}


def _static_api(call: ast.Call) -> tuple[str, str, str] | None:
    """(kind, api, requested) of a call written for one device, read from the source alone;
    ``None`` for any other call."""
    name = dotted(call.func)
    if name.startswith(("torch.cuda.", "torch.mps.")):
        kind = "redirect" if ".amp." in name else "device-api"
        return kind, name, name.split(".")[1]
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda":
        return "redirect", "Tensor.cuda", "cuda"
    if name == "torch.device" and is_device_literal(call):
        return "redirect", "torch.device", "cuda"
    called = call.func.attr if isinstance(call.func, ast.Attribute) else name
    if called in _BACKEND_CALLS:
        backend = keyword_of(call, "backend")
        node = backend.value if backend is not None else (call.args[0] if call.args else None)
        if isinstance(node, ast.Constant) and node.value == "nccl":
            return "redirect", f"torch.distributed.{called}", "nccl"
        return None
    for keyword in ("device", "map_location", "device_type"):
        found = keyword_of(call, keyword)
        if found is not None and is_device_literal(found.value):
            named = {"map_location": "torch.load", "device_type": "torch.autocast"}
            api = named.get(keyword) or (name if name.startswith("torch.") else f"torch.{called}")
            return "redirect", api, "cuda"
    first = call.args[0] if call.args else None
    if called in _POSITIONAL and isinstance(first, ast.Constant) and is_device_literal(first):
        return "redirect", _POSITIONAL[called], str(first.value)
    return None


def static_entries(filename: str, text: str, known: Iterable[PortEntry]) -> list[StaticEntry]:
    """Rows for the calls in ``text`` written for one device that no row of ``known`` covers:
    lines the run did not execute (a branch not taken, a script that stopped early).

    Each is marked :data:`STATIC_REASON`, and the port leaves a comment that it is
    unverified above it. Found with :mod:`ast`, the way Ascend's transfer tool reads a
    project: the same calls a run reports, without their arguments' values.
    """
    tree = ast.parse(text)
    covered = {span for entry in known for span in entry.positions}
    covered_lines = {entry.site.lineno for entry in known if not entry.positions}
    rows: list[StaticEntry] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node.end_lineno is None:
            continue
        span = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset or 0)
        if span in covered or node.lineno in covered_lines:
            continue
        found = _static_api(node)
        if found is None:
            continue
        kind, api, requested = found
        site = CallSite(filename, node.lineno, "?")
        rows.append(StaticEntry(site, kind, api, requested, STATIC_REASON, (span,)))
    return rows


def unified_diff(label: str, old: str, new: str) -> str:
    """A ``git apply``-able diff of one file, ``label`` relative to the repository root."""
    import difflib  # noqa: PLC0415 - only a patch needs it, not the report's advice

    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        f"a/{label}",
        f"b/{label}",
    )
    text = ""
    for line in lines:
        text += line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
    return f"diff --git a/{label} b/{label}\n{text}" if text else ""


#: torchdevice's own package directory, wherever it lives (editable installs too): the
#: directory above this package's.
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def library_of(path: str) -> str | None:
    """The library ``path`` belongs to (``None``: it is the user's own file).

    The report's own reading (:func:`torchdevice.sites.origin`: the standard library and
    installed packages, torch included), plus torchdevice itself wherever it lives, and
    code that is no file at all (``<string>``, ``<stdin>``).
    """
    if path.startswith("<") or not os.path.isfile(path):
        return "no file"
    package = origin(path)
    if package is not None:
        return package
    return "torchdevice" if os.path.abspath(path).startswith(_OWN) else None


def patch_for(entries: Iterable[PortEntry], root: Path, *, static: bool = False) -> PortResult:
    """Port every user file of a report's rows ``entries`` below ``root``; the patch's paths
    are relative to it.

    A relative file name (a portable report, :func:`torchdevice.reporting.relocate`) is read
    relative to ``root``.
    """
    root = root.resolve()
    by_file: dict[str, list[PortEntry]] = {}
    for entry in entries:
        filename = entry.site.filename
        if not filename.startswith("<") and not os.path.isabs(filename):
            filename = str(root / filename)  # a portable report: relative to the root
        by_file.setdefault(filename, []).append(entry)
    files: list[FilePort] = []
    skipped: list[tuple[str, str]] = []
    for filename in sorted(by_file):
        library = library_of(filename)
        if library is not None:
            skipped.append((filename, f"not yours ({library})"))
            continue
        path = Path(filename).resolve()
        try:
            label = path.relative_to(root).as_posix()
        except ValueError:
            skipped.append((filename, f"outside {root}"))
            continue
        try:
            old = path.read_text(encoding="utf-8")
            rows: list[PortEntry] = by_file[filename]
            if static:
                rows = [*rows, *static_entries(filename, old, rows)]
            new, notes = port_source(old, rows)
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            skipped.append((filename, f"cannot be ported: {exc}"))
            continue
        files.append(FilePort(label, old, new, notes))
    needs = max(
        (minimum_torch(file.old, file.new) for file in files if file.changed),
        default=((0, 0), ()),
    )
    diffs = "".join(unified_diff(file.path, file.old, file.new) for file in files)
    patch = needs_line(*needs) + diffs if diffs else ""
    return PortResult(patch, tuple(files), tuple(skipped), needs)


def needs_line(version: tuple[int, int], apis: tuple[str, ...]) -> str:
    """The patch's first line: which torch the patched code needs, and for what (``git
    apply`` reads past it to the first diff)."""
    if version == (0, 0):
        return f"{MARK} the patched code needs no newer torch than the original\n"
    return (
        f"{MARK} the patched code needs torch {version[0]}.{version[1]} or later "
        f"(for {', '.join(apis)})\n"
    )


def minimum_torch(old: str, new: str) -> tuple[tuple[int, int], tuple[str, ...]]:
    """The oldest torch that runs what the port wrote into ``old`` to make ``new``, and the
    APIs that need it (:data:`.table.SINCE`)."""

    def used(text: str) -> set[str]:
        return {
            name
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Attribute) and (name := dotted(node)) in SINCE
        }

    added = used(new) - used(old)
    if not added:
        return (0, 0), ()
    version = max(SINCE[name] for name in added)
    return version, tuple(sorted(name for name in added if SINCE[name] == version))


def older_torch(needed: tuple[int, int]) -> str | None:
    """The installed torch's version when it is older than ``needed`` (``None``: it is
    not, or cannot be read), without importing torch."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        installed = version("torch")
    except PackageNotFoundError:
        return None
    parts = installed.split("+")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None
    return installed if (major, minor) < needed else None

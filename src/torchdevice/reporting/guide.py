"""The migration report as a porting guide: each line to change, and what to change it to.

A row of the report is a call the code made for one device. Read as a porting guide it
says, at the user's line, with the line's source text, how the same call is written for
any device with today's PyTorch (``torch.accelerator``, ``torch.Event``,
``torch.amp.autocast(device_type)``, ``.to(device)`` with one ``device`` chosen once).
:func:`advice` is that table; :func:`render_text` the report as a person reads it at the
end of a run: the user's own files first, grouped by file and line, then the libraries'
call sites apart (a library that hard-codes ``"cuda"`` is worth knowing, but it is not a
line the user wrote), and on a big run only the most frequent lines, the rest being in
the JSON report. A row whose file can be read gets the port's own rewrite of that call
(:func:`torchdevice.port.calls.advise`: the call's own arguments, the comment the patch
leaves), so advice and patch say the same; a row whose file cannot be read (a report read
elsewhere) gets the general form from :mod:`torchdevice.port.table`, the table
``docs/porting.md`` shows for porting by hand.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from torchdevice.port import calls as port_rules
from torchdevice.port.table import DEVICE_EXPRESSION, GUARD, rewrite_for
from torchdevice.sites import origin

__all__ = [
    "CHOOSE_DEVICE",
    "advice",
    "display_path",
    "render_text",
    "source_line",
    "to_change",
]


class GuideEntry(port_rules.PortEntry, Protocol):
    """What the guide reads of a report row (:class:`torchdevice.reporting.entries.Entry`):
    what the port reads, and what was decided, how often. A protocol, so that the rows,
    which give their advice from here, sit above the guide and the package's imports run
    one way."""

    @property
    def decided(self) -> str: ...
    @property
    def count(self) -> int: ...


#: The one line that chooses the device, which every device argument then names.
CHOOSE_DEVICE: Final = f"device = {DEVICE_EXPRESSION}"
_DEVICE_ARG: Final = "pass `device` (chosen once, as above)"

#: Other APIs the report names, by name.
_APIS: Final[dict[str, str]] = {
    "Tensor.cuda": "`.to(device)` (keep `non_blocking=` if given)",
    "Module.cuda": "`.to(device)`",
    "torch.device": "`device` itself (chosen once, as above)",
    "torch.autocast": "`torch.autocast(device.type)` (keep the call's other arguments)",
    "torch.amp.GradScaler": "`torch.amp.GradScaler(device.type)`",
    "torch.load": "`map_location=device`",
    "torch.distributed.init_process_group": "`backend=torch.distributed."
    "get_default_backend_for_device(device)`",
    "torch.distributed.new_group": "`backend=torch.distributed."
    "get_default_backend_for_device(device)`",
}


def _device_specific(requested: str) -> bool:
    """Whether a request names one device type (``cuda``, ``mps:0``, an index)."""
    kind = requested.split(":", maxsplit=1)[0]
    return kind in ("cuda", "mps") or kind.isdigit()


def _distributed(entry: GuideEntry) -> bool:
    """Whether ``entry`` is a torch.distributed call written for NCCL or CUDA devices."""
    return entry.api.startswith(("torch.distributed.", "torch.nn.parallel."))


def to_change(entry: GuideEntry) -> bool:
    """Whether ``entry`` is a line to change: code written for one device.

    A ``"cpu"`` request kept on an accelerator, a device-less factory, an op that fell back
    to the CPU or a dtype narrowed for MPS are the host's business, not the code's.
    """
    if entry.kind == "device-api":
        return True
    if entry.kind == "override":
        return True  # "cpu:-1" is torchdevice's own: remove it
    if entry.kind == "redirect" and _distributed(entry):
        return True  # a NCCL backend, CUDA device_ids
    return entry.kind == "redirect" and _device_specific(entry.requested)


def advice(entry: GuideEntry) -> str:
    """What the call of ``entry`` becomes in device-agnostic code (one line): the port's
    rewrite of the call where its file can be read, else the general form."""
    ported = _ported(entry)
    if ported is not None:
        return ported
    if entry.kind == "override":
        return "`cpu:-1` is torchdevice's CPU override: use `cpu`"
    if entry.kind == "fallback":
        return "no change: the op ran on the CPU because the device lacks it"
    if entry.kind == "dtype":
        return "no change needed; MPS has no float64, so use float32 where the device is MPS"
    if entry.api == "Tensor.pin_memory":
        return f"`(x.pin_memory() if {GUARD} else x)` (pinned memory needs an accelerator)"
    if entry.requested == "pin_memory=True":
        return f"`pin_memory={GUARD}` (pinned memory needs an accelerator)"
    if entry.kind == "device-api":
        return rewrite_for(entry.api).advice(entry.api)
    if _distributed(entry):
        return _APIS.get(entry.api, '`device_ids=[rank] if device.type == "cuda" else None`')
    if not _device_specific(entry.requested):
        return "no change: device-agnostic already"
    if entry.api.startswith(("torch.cuda.", "torch.mps.")):  # legacy typed tensors
        return "a factory with `dtype=` and `device=device`"
    return _APIS.get(entry.api, _DEVICE_ARG)


def _ported(entry: GuideEntry) -> str | None:
    """The port's rewrite of ``entry``'s call in the user's file (``None``: a library's
    file, or one that cannot be read or no longer holds the call)."""
    filename = entry.site.filename
    if filename.startswith("<") or origin(filename) is not None:
        return None
    text = "".join(linecache.getlines(filename))
    return port_rules.advise(text, entry) if text else None


#: Lines of the user's code shown in the text report; the JSON has every row.
TEXT_LIMIT: Final = 25


def _row(entry: GuideEntry) -> str:
    site = entry.site
    return (
        f"  {display_path(site.filename)}:{site.lineno} in {site.function}(): "
        f"{entry.api}({entry.requested}) -> {entry.decided} "
        f"x{entry.count} [{entry.kind}: {entry.reason}]"
    )


def display_path(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it (the name a
    person reads in every format of the report)."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith(os.pardir) else relative


def source_line(entry: GuideEntry) -> str:
    """The text of ``entry``'s line, stripped (empty where the file cannot be read)."""
    return linecache.getline(entry.site.filename, entry.site.lineno).strip()


def render_text(entries: Sequence[GuideEntry], header: str, limit: int = TEXT_LIMIT) -> str:
    """A report's ``entries`` as a porting guide under ``header`` (see the module
    docstring)."""
    if not entries:
        return header
    own = [e for e in entries if origin(e.site.filename) is None]
    libraries: dict[str, list[GuideEntry]] = {}
    for entry in entries:
        package = origin(entry.site.filename)
        if package is not None:
            libraries.setdefault(package, []).append(entry)
    lines = [header]
    shown = sorted(own, key=lambda e: -e.count)[:limit]
    lines.extend(
        _own_section(shown, len({(e.site.filename, e.site.lineno) for e in own if to_change(e)}))
    )
    if libraries:
        lines.append(
            "Library call sites (not your lines; listed so you know where a "
            "library hard-codes a device):"
        )
        for package, found in sorted(libraries.items()):
            calls = sum(e.count for e in found)
            lines.append(f"  {package}: {len(found)} call site(s), {calls} call(s)")
            lines.extend("  " + _row(e) for e in sorted(found, key=lambda e: -e.count)[:3])
    hidden = len(own) - len(shown) + sum(max(len(v) - 3, 0) for v in libraries.values())
    if hidden:
        lines.append(
            f"... and {hidden} more call site(s): the JSON report lists every one "
            "(--report PATH.json)."
        )
    return "\n".join(lines)


def _own_section(entries: Iterable[GuideEntry], changes: int) -> list[str]:
    """Two lines per row: where and what happened; then the line's source with what to
    change it to beside it, as a comment (``change:`` alone where the source cannot be
    read or a second row shares the line)."""
    rows = sorted(entries, key=lambda e: (e.site.filename, e.site.lineno, -e.count))
    if not rows:
        return []
    lines = [
        f"Your code: {changes} line(s) to change (`torchdevice port` writes the patch). "
        "Choose the device once,",
        f"    {CHOOSE_DEVICE}",
        "  and pass it:",
    ]
    previous: tuple[str, int] | None = None
    for entry in rows:
        lines.append(_row(entry))
        here = (entry.site.filename, entry.site.lineno)
        source = source_line(entry) if here != previous else ""
        previous = here
        if source:
            lines.append(f"      {source}  # change: {advice(entry)}")
        else:
            lines.append(f"      change: {advice(entry)}")
    return lines

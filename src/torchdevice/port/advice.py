"""The advice the report gives at each line: what its call becomes in device-agnostic code.

Read as a porting guide, a row of the report says, at the user's line, how the same call
is written for any device with today's PyTorch (``torch.accelerator``, ``torch.Event``,
``torch.amp.autocast(device_type)``, ``.to(device)`` with one ``device`` chosen once).
:func:`advice_for` is that one line: where the row's file can be read, the port's own
rewrite of that call (:func:`advise`: the call's own arguments, the comment the patch
leaves), so advice and patch say the same; where it cannot (a report read elsewhere), the
general form from :mod:`.table`, the table ``docs/porting.md`` shows for porting by hand.
:func:`to_change` says which rows are lines to change at all.
"""

from __future__ import annotations

import linecache
from typing import Final

from torchdevice.port.calls import ported_call
from torchdevice.port.source import PortEntry
from torchdevice.port.table import DEVICE_EXPRESSION, GUARD, rewrite_for
from torchdevice.sites import origin

__all__ = ["CHOOSE_DEVICE", "advice_for", "advise", "to_change"]


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


def _distributed(entry: PortEntry) -> bool:
    """Whether ``entry`` is a torch.distributed call written for NCCL or CUDA devices."""
    return entry.api.startswith(("torch.distributed.", "torch.nn.parallel."))


def to_change(entry: PortEntry) -> bool:
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


def advice_for(entry: PortEntry) -> str:
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


def _ported(entry: PortEntry) -> str | None:
    """The port's rewrite of ``entry``'s call in the user's file (``None``: a library's
    file, or one that cannot be read or no longer holds the call)."""
    filename = entry.site.filename
    if filename.startswith("<") or origin(filename) is not None:
        return None
    text = "".join(linecache.getlines(filename))
    return advise(text, entry) if text else None


def advise(text: str, entry: PortEntry) -> str | None:
    """:func:`ported_call` as the report's one line of advice: the ported code in
    backquotes, then the comments; ``None`` where :func:`ported_call` has no answer."""
    ported = ported_call(text, entry)
    if ported is None:
        return None
    code, notes = ported
    said = "; ".join(notes)
    if code is None:
        return said or "no change: device-agnostic already"
    if not code:
        return said or "remove it"
    return f"`{code}`" + (f" ({said})" if said else "")

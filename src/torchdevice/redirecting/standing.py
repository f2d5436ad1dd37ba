"""What a tensor stands for, and the copy semantics of moving it (docs/policy.md).

Under redirection, host tensors and device tensors can share one real device: on a
CPU-only host a ``"cuda"`` tensor is a CPU tensor, and on an accelerator host a ``"cpu"``
tensor lives on the accelerator. Code written for a real GPU still relies on the GPU's
rules: a host<->device transfer (``.cpu()``, ``.cuda()``, ``.to(...)``,
``torch.as_tensor(array, device="cuda")``) gives an independent copy, and a transfer to
where a tensor already is returns that very tensor (an ``nn.Parameter`` stays itself).

The rule: every tensor *stands for* the host or the device.

* A tensor stands for what its real device is (``cpu``: the host; an accelerator: the
  device), unless its storage is marked otherwise.
* A redirect that puts a tensor on a real device other than the one it stands for marks
  the tensor's storage: ``torch.zeros(3, device="cuda")`` and ``x.cuda()`` on a CPU-only
  host, ``x.cpu()``, ``torch.zeros(3, device="cpu")`` and ``torch.zeros(3)`` (factories
  create on the CPU natively) on an accelerator host.
* The mark is one attribute on the storage's Python object, which PyTorch keeps for as
  long as the storage lives: views share it, ``Module.to`` (which swaps ``param.data``)
  hands it to the parameter, and it costs a lookup only on transfers.
* Results of other ops carry no mark and stand for their real device: on a CPU-only host
  ``(x_cuda * 2).cpu()`` returns its input, where a GPU would copy.

Device *objects* read as written (``torch.device("cuda")`` is of type ``"cuda"``), so
their type says what they stand for. Where torchdevice itself hands a device on with a
standing its type does not say (``Module.cuda``'s move, the ``"cpu:-1"`` override), it
uses an equal, distinct object this module remembers. A device read off a tensor
(``x.device``) is its real device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import torch

from torchdevice.redirecting.compiling import compiler, is_tracing
from torchdevice.redirecting.policy import Standing

__all__ = [
    "HOST_CPU",
    "MARK",
    "READ_CPU",
    "REMEMBERED",
    "device_object",
    "host_memory",
    "mark",
    "mark_placed",
    "moved",
    "requested",
    "standing_of",
]

#: Attribute of a storage's Python object naming what its tensors stand for, when that is
#: not what their real device is.
MARK: Final = "_torchdevice_stands_for"

#: The C type, bound at import: the entry-points tier puts a stand-in at ``torch.device``.
_DEVICE: Final = torch.device

#: Device objects handed out for a request that stands for something other than its real
#: device: one per (type, index, standing), kept alive so that their ids stay theirs.
_objects: dict[tuple[str, int | None, Standing], torch.device] = {}
_standing_of_object: dict[int, tuple[torch.device, Standing]] = {}
#: The ids of those objects, for the hot paths' "is this one of them?" (read only).
REMEMBERED: Mapping[int, tuple[torch.device, Standing]] = _standing_of_object


with torch._C.DisableTorchFunction():  # torch.device itself reaches function modes
    #: The CPU as read off a tensor that really is on the CPU (``audio.device`` of a
    #: ``torch.from_numpy`` tensor), handed out on accelerator hosts instead of an equal
    #: ``torch.device("cpu")``: ``window.to(audio.device)`` asks for where that tensor is,
    #: not for the host, which the policy would send to the accelerator (whisper's
    #: ``log_mel_spectrogram``). The runtime places it on the CPU, unreported.
    READ_CPU: Final = torch.device("cpu")
    #: The CPU as a CPU tensor reports its device (``x.device``), to compare requests with.
    HOST_CPU: Final = torch.device("cpu")


def _real(device: torch.device) -> Standing:
    return "host" if device.type == "cpu" else "device"


def device_object(
    device: torch.device, stands_for: Standing | None, *, distinct: bool = False
) -> torch.device:
    """``device`` as the object to hand to user code for a request standing for ``stands_for``.

    The same object where the real device is what the request stands for; else an equal,
    distinct object that :func:`requested` recognises. ``distinct`` asks for the remembered
    object in every case, for a device handed on inside torchdevice whose type the policy
    may not know (a simulated accelerator's), so its standing is not read off its value.
    """
    if stands_for is None or (not distinct and _real(device) == stands_for):
        return device
    key = (device.type, device.index, stands_for)
    found = _objects.get(key)
    if found is None:
        with torch._C.DisableTorchFunction():  # torch.device itself reaches function modes
            found = (
                torch.device(device.type)
                if device.index is None
                else torch.device(device.type, device.index)
            )
        _objects.setdefault(key, found)
        found = _objects[key]
        _standing_of_object[id(found)] = (found, stands_for)
    return found


def requested(request: object, parsed: Standing | None) -> Standing | None:
    """What ``request`` stands for; ``parsed`` is what its parsed value stands for.

    A device object from :func:`device_object` remembers; any other request is read by
    its value (``stands_for`` of the policy).
    """
    if type(request) is _DEVICE:
        hit = _standing_of_object.get(id(request))
        if hit is not None and hit[0] is request:
            return hit[1]
    return parsed


def standing_of(tensor: torch.Tensor) -> Standing:
    """What ``tensor`` stands for: its storage's mark, else its real device."""
    try:
        marked: Standing | None = getattr(tensor.untyped_storage(), MARK, None)
    except (RuntimeError, NotImplementedError):  # sparse, nested: no plain storage
        marked = None
    if marked is not None:
        return marked
    return "host" if tensor.is_cpu else "device"


def mark_placed(tensor: torch.Tensor, stands_for: Standing | None) -> torch.Tensor:
    """Mark a factory's fresh result (outside dynamo) as standing for ``stands_for``.

    The factory path's form of :func:`mark`: the caller has ruled out tracing, and the
    real device is read as ``tensor.is_cpu`` (``device.type`` builds a string each read,
    several times the cost).
    """
    if stands_for is not None and tensor.is_cpu is (stands_for != "host"):
        # The mark: the storage's Python object (built here) and one attribute on it.
        try:  # noqa: SIM105 - building a contextlib.suppress costs more than the mark
            setattr(tensor.untyped_storage(), MARK, stands_for)
        except (RuntimeError, NotImplementedError):  # sparse, nested: no plain storage
            pass
    return tensor


def mark(tensor: torch.Tensor, stands_for: Standing) -> torch.Tensor:
    """Record that ``tensor``, a fresh result, stands for ``stands_for``; returns it."""
    if not (is_tracing() or compiler._is_compiling_flag):
        mark_placed(tensor, stands_for)
    return tensor


def moved(source: torch.Tensor, result: torch.Tensor, target: Standing) -> torch.Tensor:
    """The result of moving ``source`` to ``target``, with the target device's semantics.

    ``result`` is what torch returned for the rewritten call. Already there: ``source``
    itself. Crossing between host and device: an independent copy, even where torch
    returned ``source`` because the real device is the same. Eager code only (compiled
    code's fake tensors keep their storages untouched): ``target`` is a standing from
    :meth:`Runtime.place <torchdevice.redirecting.runtime.Runtime.place>`, which is ``None`` while
    torch compiles, so the caller skips this then without asking again.
    """
    if result is source:  # torch found nothing to do: the real device is the same
        if standing_of(source) == target:
            return source
        result = source.clone()
    # else: ``Tensor.to`` returns its input or a fresh tensor, never another alias
    return mark_placed(result, target)


def host_memory(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in real host memory where the code holds it as a host tensor.

    On an accelerator host a tensor the code moved to the host (``state.cpu()``) lives on
    the accelerator; C++ that takes host memory only (``Generator.set_state``: "RNG state
    must be a torch.ByteTensor") would refuse it where the code's own machine accepts it.
    Such a tensor comes back to the CPU here; any other value, a tensor that stands for the
    device included, is returned as is, for torch to accept or refuse as it would.
    """
    if (
        isinstance(tensor, torch.Tensor)  # torch's own check is the C++ one, after this
        and not tensor.is_cpu
        and not tensor.is_meta
        and standing_of(tensor) == "host"
    ):
        with torch._C.DisableTorchFunction():  # the real CPU, past the policy
            return tensor.cpu()
    return tensor

"""Find the line of user code that made a torch call.

Redirects are logged with the user's file, line and function, not torch's frames or ours.
A handler reached through the function mode starts the walk above the door frame, the mode's
own (:func:`caller`), which it finds by its code object: user code calling ``torch.zeros``
directly costs two frame objects and two dict lookups; only calls that arrive through
torch's own Python code (``Module.to`` reaching ``_parse_to``) walk further up the stack.
"""

from __future__ import annotations

import dis
import os
import sys
import threading
from types import CodeType, FrameType

from torchdevice.sites import position_of

__all__ = [
    "add_door",
    "caller",
    "entered",
    "first_user",
    "is_internal",
    "past_overrides",
    "set_door",
    "torch_names_cpu",
    "user_frame",
]


def _package_dir(module_name: str) -> str:
    module = sys.modules[module_name]
    return os.path.dirname(os.path.abspath(module.__file__ or "")) + os.sep


_INTERNAL_PREFIXES: tuple[str, ...] = ()
# Keyed by id(code): a code object's hash is recomputed on every lookup, an int's is itself
# (the cost: benchmarks/README.md). The code objects are kept alive in _seen so their ids
# are never reused.
internal_cache: dict[int, bool] = {}
_seen: list[CodeType] = []
_lock = threading.Lock()


def _prefixes() -> tuple[str, ...]:
    global _INTERNAL_PREFIXES
    if not _INTERNAL_PREFIXES:
        import torch  # noqa: PLC0415, F401 - ensure torch is loaded before reading its path

        stdlib = os.path.dirname(threading.__file__)
        prefixes = [
            _package_dir("torch"),
            _package_dir("torchdevice"),
            os.path.join(stdlib, "contextlib.py"),
            # The wrappers of @deprecated (torch marks torch.cuda.amp.GradScaler with
            # typing_extensions'; 3.13 has one in warnings) sit between torch and the
            # user's line.
            os.path.join(stdlib, "warnings.py"),
        ]
        extensions = sys.modules.get("typing_extensions")
        if extensions is not None and extensions.__file__:
            prefixes.append(os.path.abspath(extensions.__file__))
        _INTERNAL_PREFIXES = tuple(prefixes)
    return _INTERNAL_PREFIXES


def is_internal(code: CodeType) -> bool:
    """True for code inside torch, torchdevice, contextlib or a ``@deprecated`` wrapper
    (cached per code object)."""
    internal = internal_cache.get(id(code))
    if internal is None:
        name = code.co_filename
        internal = name.startswith("<frozen ") or os.path.abspath(name).startswith(_prefixes())
        with _lock:
            _seen.append(code)
            internal_cache[id(code)] = internal
    return internal


def user_frame(depth: int) -> FrameType | None:
    """The first frame at or above ``depth`` (relative to the caller) that is user code.

    Walks up one frame at a time: one cached dict lookup by code id per frame, and (on
    3.11+, where frame objects are made on demand) one frame object built per frame.
    """
    return first_user(sys._getframe(depth + 1))


def first_user(frame: FrameType | None) -> FrameType | None:
    """``frame`` or the first frame above it that is user code."""
    known = internal_cache
    while frame is not None:
        internal = known.get(id(frame.f_code))
        if internal is None:
            internal = is_internal(frame.f_code)
        if not internal:
            break
        frame = frame.f_back
    return frame


def past_overrides(frame: FrameType | None, method: str) -> FrameType | None:
    """``frame``, or the first user frame above the overrides of ``method`` it is in.

    A class that overrides ``Module.cuda``/``Module.to`` and calls ``super()``
    (Transformers' ``PreTrainedModel`` does) passes the user's call on: the line to port
    is where ``model.cuda()`` was written, not the override's ``super().cuda()``.
    """
    while frame is not None and frame.f_code.co_name == method:
        frame = first_user(frame.f_back)
    return frame


#: The doors: the code through which torch calls enter torchdevice, the function mode's
#: ``__torch_function__`` first (set by :mod:`torchdevice.redirecting.mode`), then the
#: entry-points tier's wrappers (:mod:`torchdevice.redirecting.entry_points`). Everything
#: below such a frame (a door frame) is torchdevice's own handler code; the frame above it
#: called torch.
_doors: tuple[CodeType, ...] = ()
_mode_door: tuple[CodeType, ...] = ()
_other_doors: tuple[CodeType, ...] = ()
#: How many frames lie between the function that asked :func:`caller` (or :func:`entered`)
#: and the door frame, per path key, as found by walking up once; 0 where that path does
#: not come through a door (a wrapper of torchdevice.patches on torch).
_depths: dict[object, int] = {}


def set_door(code: CodeType) -> None:
    """Name the function mode's code through which torch calls into torchdevice, its door
    (see :func:`caller`)."""
    global _doors, _mode_door
    _mode_door = (code,)
    _doors = (*_mode_door, *_other_doors)
    _depths.clear()


def add_door(code: CodeType) -> None:
    """Name another code through which torch calls reach a handler (a wrapper of the
    entry-points tier), after the mode's."""
    global _doors, _other_doors
    if not any(code is known for known in _other_doors):
        _other_doors = (*_other_doors, code)
    _doors = (*_mode_door, *_other_doors)
    _depths.clear()


def caller(key: object) -> FrameType | None:
    """The user frame that made the torch call the asking function is serving.

    Found above the door frame (:func:`set_door`, :func:`add_door`) when the call came
    through a door; otherwise, from a wrapper outside them, the first user frame above the
    asking function. ``key`` names the path from the door to the asking function: the
    same key is always asked from the same depth (a handler's ``func``, a wrapper's API
    name). That depth is found once, by walking up frame by frame (:func:`_learn`), and
    then read with one ``sys._getframe`` that builds no frame object for the handler
    frames in between (each one built would cost the redirect hot path). The door's code
    object is checked every time: a key met at another depth is walked again.
    """
    depth = _depths.get(key)
    if depth:
        try:
            frame: FrameType | None = sys._getframe(depth + 1)
        except ValueError:  # the stack is shallower than that path's
            frame = None
        if frame is not None and frame.f_code in _doors:
            frame = frame.f_back
            if frame is not None and internal_cache.get(id(frame.f_code)) is False:
                return frame  # user code called torch directly: the common case, no walk
            return first_user(frame)
    door = None if depth == 0 else _learn(key)
    return first_user(sys._getframe(1) if door is None else door.f_back)


def entered(key: object) -> FrameType | None:
    """The frame that made the torch call the asking function is serving (user code or
    torch's own), or ``None`` when the call did not come through the mode (``key``: as
    for :func:`caller`)."""
    depth = _depths.get(key)
    if depth:
        try:
            frame: FrameType | None = sys._getframe(depth + 1)
        except ValueError:
            frame = None
        if frame is not None and frame.f_code in _doors:
            return frame.f_back
    door = None if depth == 0 else _learn(key)
    return None if door is None else door.f_back


def _learn(key: object) -> FrameType | None:
    """Walk up from the function that asked :func:`caller` or :func:`entered` to the
    door frame, and remember how far it was for ``key`` (0: not through a door, a user
    frame came first)."""
    doors, depth = _doors, 0
    if not doors:
        return None
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code not in doors:
        if not is_internal(frame.f_code):  # user code below any door: not through one
            frame = None
            break
        frame, depth = frame.f_back, depth + 1
    _depths[key] = 0 if frame is None else depth
    return frame


#: Per call (``id(code)``, ``f_lasti``): whether torch's own code names the CPU in it. The
#: code objects are kept alive in ``_seen``, as for :data:`internal_cache`.
_names_cpu: dict[tuple[int, int], bool] = {}


def torch_names_cpu(frame: FrameType | None) -> bool:
    """Whether ``frame`` is torch's own code making a call that names the CPU itself.

    ``torch.optim`` counts its steps in ``torch.tensor(0.0, device="cpu")``,
    ``pack_padded_sequence`` keeps its lengths in ``torch.as_tensor(..., device="cpu")``:
    torch asks for the CPU there because it needs the CPU on every device, and on a GPU
    those tensors are CPU tensors. Such a request is no line of the user's and stays where
    torch put it (docs/policy.md). A request torch only passes on (``nn.Linear(...,
    device="cpu")`` reaching ``torch.empty(**factory_kwargs)``) names no CPU in torch's
    call and follows the policy. Read from the bytecode (a constant ``"cpu"`` inside the
    call's source span; on 3.10, on its line), once per call site.
    """
    if frame is None:
        return False
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    found = _names_cpu.get(key)
    if found is None:
        found = _is_torch(code) and _cpu_constant_in_call(frame)
        with _lock:
            _seen.append(code)
            _names_cpu[key] = found
    return found


def _is_torch(code: CodeType) -> bool:
    """Whether ``code`` is torch's own (not torchdevice's, not the user's)."""
    return os.path.abspath(code.co_filename).startswith(_package_dir("torch"))


def _cpu_constant_in_call(frame: FrameType) -> bool:
    """Whether the call ``frame`` is making loads the constant ``"cpu"`` among its
    arguments (``device="cpu"``, ``device=torch.device("cpu")``)."""
    code = frame.f_code
    span = position_of(frame)
    line: int | None = None
    starts = dict(dis.findlinestarts(code))
    for instruction in dis.get_instructions(code):
        line = starts.get(instruction.offset, line)
        if instruction.opname != "LOAD_CONST" or instruction.argval != "cpu":
            continue
        if span is None:  # 3.10: no columns
            if line == frame.f_lineno:
                return True
            continue
        where = getattr(instruction, "positions", None)
        if where is None or where.lineno is None or where.col_offset is None:
            continue
        if where.end_lineno is None or where.end_col_offset is None:
            continue
        first, last, column, end_column = span
        if (first, column) <= (where.lineno, where.col_offset) and (
            where.end_lineno,
            where.end_col_offset,
        ) <= (last, end_column):
            return True
    return False

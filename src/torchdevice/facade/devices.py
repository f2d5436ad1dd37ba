"""``torch.cuda`` device queries and RNG, answered by the device tensors really live on.

Every ``cuda:n`` lands on the host's single redirect target (the MPS device or the CPU),
so there is one device: ``device_count()`` is 1, ``current_device()`` is 0, and selecting
another index (``set_device``, ``with torch.cuda.device(i)``) is accepted wherever the
policy accepts ``cuda:i`` and changes nothing.

Whether ``is_available()`` answers true is an option (``cuda_available`` in the
activation's settings, true by default while redirecting): true lets CUDA-first code take
its CUDA branch, which torchdevice then redirects; false makes it take its CPU branch
(``device_count()`` is then 0), which matters to launchers such as Accelerate that pick
multi-GPU and NCCL when CUDA is available.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import torch

from torchdevice.errors import UnsupportedFeatureError
from torchdevice.facade import call_counts, real_device
from torchdevice.facade.properties import DeviceProperties, properties_of
from torchdevice.redirecting.compiling import constant_for_dynamo, is_tracing
from torchdevice.redirecting.standing import host_memory

__all__ = [
    "device",
    "device_count",
    "device_of",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]

_COMPILER = "torch._inductor"


def advertised() -> bool:
    """Whether the facades report their device as available (the ``cuda_available`` option)."""
    return real_device.runtime().settings.cuda_available


def asked_by_compiler(depth: int = 2) -> bool:
    """Whether the caller ``depth`` frames up is torch's code generator (inductor).

    Inductor enumerates GPU backends (``getattr(torch, t).is_available()``, asserting at
    most one) to pick the code generator for the device tensors really live on, so it
    must see the truth. Dynamo's constant folding of user code is not inductor: it sees
    what the user sees, so compiled and eager code branch alike.
    """
    if is_tracing():  # dynamo tracing user code: never its frames
        return False
    frame: FrameType | None = sys._getframe(depth)
    caller: object = ""
    while frame is not None:  # past torchdevice's own frames (the report's wrapper)
        caller = frame.f_globals.get("__name__", "")
        if not (isinstance(caller, str) and caller.startswith("torchdevice.")):
            break
        frame = frame.f_back
    return isinstance(caller, str) and (caller == _COMPILER or caller.startswith(_COMPILER + "."))


def is_available() -> bool:
    """True while redirecting (unless ``cuda_available=False``): CUDA requests land on a
    real device. Torch's inductor gets the real answer (see
    :func:`asked_by_compiler`)."""
    if asked_by_compiler():
        return bool(real_device.REAL_CUDA.is_available())
    return advertised()


def is_initialized() -> bool:
    """The redirect target needs no initialisation: always ready."""
    return True


def init() -> None:
    """Nothing to initialise: the real device initialises itself on first use."""


def _lazy_init() -> None:
    """torch's own lazy-CUDA-init hook: nothing to do on the real device.

    Torch's Python bindings call it (through ``sys.modules["torch.cuda"]``) before a CUDA
    request that reaches them with function modes off, and then remember CUDA as
    initialised; :func:`forget_lazy_init` takes that back on disable.
    """


#: torch::utils::set_requires_device_init(c10::DeviceType, bool), exported by
#: libtorch_python (Itanium mangling: Linux and macOS); torch calls it in a forked child.
_SET_REQUIRES_DEVICE_INIT = "_ZN5torch5utils24set_requires_device_initEN3c1010DeviceTypeEb"
_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA


def forget_lazy_init() -> bool:
    """Tell torch's bindings that CUDA needs its lazy init again (on disable).

    Once the facade's :func:`_lazy_init` has answered, torch skips the real one for the rest
    of the process, so a native CUDA request after ``disable()`` would fail in the
    dispatcher (``NotImplementedError: Could not run 'aten::empty.memory_format' with
    arguments from the 'CUDA' backend``) instead of torch's own check (``AssertionError:
    Torch not compiled with CUDA enabled``, or the real initialisation on a CUDA build).
    Torch has no Python binding for this; its C++ one is the call it makes in a forked
    child, found by name in libtorch_python. Where it is not there, returns False and the
    trace stays (docs/limitations.md). Harmless when CUDA really is initialised: the real
    ``torch.cuda._lazy_init`` returns at once.
    """
    library = next(iter(Path(torch.__file__).parent.glob("lib/libtorch_python.*")), None)
    if library is None:
        return False
    try:
        reset = getattr(ctypes.CDLL(str(library)), _SET_REQUIRES_DEVICE_INIT)
    except (OSError, AttributeError):
        return False
    reset.argtypes = [ctypes.c_int8, ctypes.c_bool]
    reset.restype = None
    reset(_CUDA_DEVICE_TYPE, True)
    return True


def device_count() -> int:
    """How many devices CUDA indices address: one (the MPS device or the CPU), 0 if hidden."""
    return real_device.runtime().host.device_count if advertised() else 0


def current_device() -> int:
    """Always 0: every ``cuda:n`` lands on the host's single redirect target."""
    return 0


def set_device(device: Any) -> None:
    """Accept any index the policy accepts; there is one device, so nothing changes."""
    real_device.checked(device)


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """torch's helper: the index of ``device`` on the single target, 0."""
    return real_device.checked(device)


def _exchange_device(device: int) -> int:
    """Select ``device`` and return the previous index (both 0)."""
    real_device.checked(device)
    return 0


def _maybe_exchange_device(device: int) -> int:
    """As :func:`_exchange_device`."""
    return _exchange_device(device)


class device:
    """``with torch.cuda.device(i):`` selects device ``i`` for the block (one device: 0)."""

    def __init__(self, device: Any) -> None:
        if type(self) is __class__:  # type: ignore[name-defined]  # device_of is not this call
            call_counts.count_call("torch.cuda.device")  # a line to port, as the functions are
        self.idx = real_device.checked(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = current_device()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class device_of(device):
    """``with torch.cuda.device_of(tensor):`` the device of ``tensor`` (the single one)."""

    def __init__(self, obj: Any) -> None:
        super().__init__(None)


def get_device_name(device: Any = None) -> str:
    """The real name of the device CUDA requests land on."""
    real_device.checked(device)
    return real_device.runtime().host.device_name(0)


def get_device_properties(device: Any = None) -> DeviceProperties:
    """The real device's properties under CUDA's field names (see facade.properties)."""
    real_device.checked(device)
    return properties_of(real_device.current(), get_device_name())


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """``(0, 0)``: the real device has no CUDA compute capability (see facade.properties)."""
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether bfloat16 runs on the real device."""
    return real_device.current().bf16_supported(including_emulation)


def is_tf32_supported() -> bool:
    """TF32 is an NVIDIA tensor-core format: neither CPUs nor Apple GPUs have it."""
    return False


def is_current_stream_capturing() -> bool:
    """No CUDA graph is ever being captured here (torch's optimizers ask)."""
    return False


def ipc_collect() -> None:
    """No CUDA IPC handle can exist off CUDA, so there is nothing to collect."""


# Fixed for an activation, and their bodies (psutil, sysfs) cannot be traced: compiled
# code calls them for real, at trace time, and uses the result as a constant.
for _function in (
    get_device_name,
    get_device_properties,
    get_device_capability,
    is_bf16_supported,
    device_count,
):
    constant_for_dynamo(_function)


def _nvml_unsupported(name: str) -> Any:
    def query(device: Any = None) -> Any:
        raise UnsupportedFeatureError(
            f"torch.cuda.{name} (an NVML query of an NVIDIA GPU)",
            "Read host load and memory with psutil (psutil.cpu_percent(), "
            "psutil.virtual_memory()) instead.",
        )

    query.__name__ = query.__qualname__ = name
    query.__doc__ = f"``torch.cuda.{name}`` asks NVML: CUDA-only."
    return query


utilization = _nvml_unsupported("utilization")
temperature = _nvml_unsupported("temperature")
power_draw = _nvml_unsupported("power_draw")
clock_rate = _nvml_unsupported("clock_rate")
memory_usage = _nvml_unsupported("memory_usage")
device_memory_used = _nvml_unsupported("device_memory_used")


# -- RNG: the generator of the device CUDA tensors really land on --------------------------
# Implemented on the generator object, never through torch.manual_seed, which itself
# calls torch.cuda.manual_seed_all (it would recurse).
def generator() -> torch.Generator:
    """The generator of the device CUDA (or MPS) tensors really land on."""
    return real_device.current().generator()


def default_generators() -> tuple[torch.Generator, ...]:
    """``torch.cuda.default_generators``: the real device's generator, one device."""
    return (generator(),)


def manual_seed(seed: int) -> None:
    """Seed the real device's default generator (lazily on CUDA, as ``torch.cuda`` does)."""
    real_device.current().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device: there is one."""
    manual_seed(seed)


def seed() -> None:
    """Seed the real device's generator non-deterministically (lazily on CUDA)."""
    real_device.current().seed()


def seed_all() -> None:
    """Seed every device non-deterministically: there is one."""
    seed()


def initial_seed() -> int:
    """The real device generator's initial seed."""
    return int(generator().initial_seed())


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    """The real device generator's state (a CPU uint8 tensor, as CUDA's is)."""
    real_device.checked(device)
    return generator().get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    """Restore the real device generator's state."""
    real_device.checked(device)
    generator().set_state(host_memory(new_state))  # a CPU state, wherever the code keeps it


def get_rng_state_all() -> list[torch.Tensor]:
    """One state per device, as torch's: ``[]`` when the facade hides the device."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Any) -> None:
    """Restore the states of every device, as torch's: state ``i`` to device ``i``.

    An empty list restores nothing (Lightning's ``isolate_rng`` passes the ``[]`` it read
    with CUDA hidden); a state for an index past the count raises as that index does.
    """
    for index, state in enumerate(new_states):
        set_rng_state(state, index)

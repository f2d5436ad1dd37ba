"""``torch.cuda.tunable`` (TunableOp) off CUDA: switches that keep their values and tune
nothing, said once in the log.

TunableOp picks the fastest GEMM kernel of the CUDA/ROCm BLAS libraries for each shape; it
changes how fast a matrix product runs, never its result. Without CUDA there is no such
kernel to pick, so, as with ``pin_memory`` and NVTX ranges, the calls succeed and do
nothing: the setters keep what they are given and the getters read it back (a script
that checks ``is_enabled()`` after ``enable(True)`` sees ``True``), results and
validators are empty, and no file is read or written. The first call logs once, at
INFO on the ``torchdevice`` logger, that TunableOp is off here; the migration report
lists each call as a line written for CUDA.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = [
    "enable",
    "get_filename",
    "get_max_tuning_duration",
    "get_max_tuning_iterations",
    "get_results",
    "get_rotating_buffer_size",
    "get_validators",
    "is_enabled",
    "mgpu_tune_gemm_in_file",
    "read_file",
    "record_untuned_enable",
    "record_untuned_is_enabled",
    "set_filename",
    "set_max_tuning_duration",
    "set_max_tuning_iterations",
    "set_numerical_check_tolerances",
    "set_rotating_buffer_size",
    "tune_gemm_in_file",
    "tuning_enable",
    "tuning_is_enabled",
]

logger = logging.getLogger("torchdevice")

#: The values PyTorch starts with, as ``torch/cuda/tunable.py``'s documentation gives them
#: (off, 100 iterations or 30 ms, 'tunableop_results.csv'); the rotating buffer, whose
#: default is the GPU's L2 size, starts at 0 (off): there is no L2 to match.
_DEFAULTS: dict[str, Any] = {
    "enabled": False,
    "tuning": True,
    "record_untuned": False,
    "duration": 30,
    "iterations": 100,
    "filename": "tunableop_results.csv",
    "rotating_buffer_size": 0,
}
_values = dict(_DEFAULTS)
_lock = threading.Lock()
_said: list[bool] = []


def _set(key: str, value: Any) -> None:
    """Keep ``value`` for its getter, and say once that TunableOp tunes nothing here."""
    with _lock:
        _values[key] = value
        if _said:
            return
        _said.append(True)
    logger.info(
        "torch.cuda.tunable: TunableOp picks CUDA/ROCm GEMM kernels and there are none on "
        "this host; its switches keep their values and change nothing (results are the same)"
    )


def enable(val: bool = True) -> None:
    """``torch.cuda.tunable.enable``: kept, tunes nothing."""
    _set("enabled", bool(val))


def is_enabled() -> bool:
    """What :func:`enable` was last given (``False`` at start, as in PyTorch)."""
    return bool(_values["enabled"])


def tuning_enable(val: bool = True) -> None:
    """``torch.cuda.tunable.tuning_enable``: kept, tunes nothing."""
    _set("tuning", bool(val))


def tuning_is_enabled() -> bool:
    """What :func:`tuning_enable` was last given (``True`` at start)."""
    return bool(_values["tuning"])


def record_untuned_enable(val: bool = True) -> None:
    """``torch.cuda.tunable.record_untuned_enable``: kept; nothing is recorded."""
    _set("record_untuned", bool(val))


def record_untuned_is_enabled() -> bool:
    """What :func:`record_untuned_enable` was last given."""
    return bool(_values["record_untuned"])


def set_max_tuning_duration(duration: int) -> None:
    """Kept for :func:`get_max_tuning_duration`."""
    _set("duration", int(duration))


def get_max_tuning_duration() -> int:
    """The tuning time budget, in ms, last set (30 at start)."""
    return int(_values["duration"])


def set_max_tuning_iterations(iterations: int) -> None:
    """Kept for :func:`get_max_tuning_iterations`."""
    _set("iterations", int(iterations))


def get_max_tuning_iterations() -> int:
    """The tuning iteration budget last set (100 at start)."""
    return int(_values["iterations"])


def set_filename(filename: str, insert_device_ordinal: bool = False) -> None:
    """Kept for :func:`get_filename`; no file is written."""
    _set("filename", str(filename))


def get_filename() -> str:
    """The results file name last set."""
    return str(_values["filename"])


def get_results() -> tuple[Any, ...]:
    """The tuned GEMMs: none, nothing was tuned."""
    return ()


def get_validators() -> tuple[Any, ...]:
    """The validators of tuned results: none."""
    return ()


def read_file(filename: str | None = None) -> bool:
    """No results apply on this host: ``False``, nothing read."""
    _set("filename", _values["filename"] if filename is None else str(filename))
    return False


def tune_gemm_in_file(filename: str) -> None:
    """The GEMMs of an untuned-results file: no CUDA kernel here to tune them with."""
    _set("filename", _values["filename"])


def mgpu_tune_gemm_in_file(filename_pattern: str, num_gpus: int) -> None:
    """As :func:`tune_gemm_in_file`, over several GPUs: none here."""
    _set("filename", _values["filename"])


def set_rotating_buffer_size(buffer_size: int) -> None:
    """Kept for :func:`get_rotating_buffer_size`."""
    _set("rotating_buffer_size", int(buffer_size))


def get_rotating_buffer_size() -> int:
    """The rotating buffer size, in MB, last set."""
    return int(_values["rotating_buffer_size"])


def set_numerical_check_tolerances(enable: bool, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Kept; nothing is tuned, so nothing is checked."""
    _set("numerical_check", (bool(enable), float(atol), float(rtol)))

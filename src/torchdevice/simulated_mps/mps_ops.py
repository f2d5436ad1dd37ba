"""What the MPS backend of the installed PyTorch implements, read from PyTorch's own files.

Why: the simulated accelerator (:mod:`torchdevice.simulated_mps`) stands in for MPS in
CI, so the CPU fallback is only as well tested as the simulated device is faithful. A list
of "missing" ops typed in by hand drifts from PyTorch at every release (``erfinv``, long
missing on MPS, has had a kernel for several releases). The torch wheel ships the file its
kernels are generated from, ``torchgen/packaged/ATen/native/native_functions.yaml``; its
``dispatch:`` keys say, per operator overload, which backends have a kernel. This module
reads it at run time, for the torch that is installed, once per process.

Read the way torchgen reads it:

* ``dispatch:`` keys are comma-separated lists (``CPU, CUDA, MPS: erfinv_out``);
* ``structured_delegate: erfinv.out`` gives the functional and in-place overloads a kernel on
  every backend the delegate's ``dispatch:`` names (torchgen generates them from the ``out=``
  kernel);
* an overload with no ``dispatch:`` and no delegate is ``CompositeImplicitAutograd``: it
  decomposes into other ops and runs on every backend, so it is never "missing".

What the file does not say, and is added here with the PyTorch source it comes from:

* the ops MPS registers by hand in ``aten/src/ATen/mps/MPSFallback.mm`` to run on the CPU
  (:data:`MPS_CPU_FALLBACK_OPS`);
* the dtypes MPS has (:data:`MPS_DTYPES`, from ``getMPSDataType``), and its error texts
  (:func:`not_implemented_message`, :func:`float64_message`, :func:`dtype_message`).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import torch

__all__ = [
    "MPS_CPU_FALLBACK_OPS",
    "MPS_DTYPES",
    "dtype_message",
    "float64_message",
    "mps_kernels",
    "native_functions_file",
    "not_implemented_message",
    "parse_native_functions",
    "scalar_type_name",
]

#: Where the wheel keeps the kernel registry, relative to the ``torchgen`` package.
_NATIVE_FUNCTIONS: Final = ("packaged", "ATen", "native", "native_functions.yaml")

#: Ops MPS registers directly with a kernel that reruns them on the CPU (``mps_fallback``),
#: so they work on MPS even with ``PYTORCH_ENABLE_MPS_FALLBACK`` unset. From the
#: ``TORCH_LIBRARY_IMPL(aten, MPS, m)`` block of ``aten/src/ATen/mps/MPSFallback.mm``
#: (pytorch/pytorch 035290b7); the YAML does not list them because they are not generated.
MPS_CPU_FALLBACK_OPS: Final = frozenset(
    {
        "aten::embedding_renorm_",
        "aten::linalg_svd",
        "aten::linalg_svd.U",
        "aten::col2im",
        "aten::upsample_nearest3d.vec",
    }
)

#: The dtypes an MPS kernel accepts: the cases of ``getMPSDataType`` in
#: ``aten/src/ATen/native/mps/OperationUtils.mm``. ``Double`` raises there ("Cannot convert
#: a float64 Tensor to MPS..."), and so does every dtype not listed (complex128, the float8
#: types, quantized types): "Trying to convert ComplexDouble to the MPS backend but it does
#: not have support for that dtype." (a ``TypeError``: ``TORCH_CHECK_TYPE``).
MPS_DTYPES: Final = frozenset(
    {
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int32,
        torch.int64,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex32,
        torch.complex64,
        torch.uint64,
        torch.uint32,
        torch.uint16,
    }
)

#: c10's names for the dtypes whose Python name differs, as PyTorch's C++ errors print them.
_SCALAR_TYPE_NAMES: Final = {
    torch.float64: "Double",
    torch.float32: "Float",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.bool: "Bool",
    torch.complex128: "ComplexDouble",
    torch.complex64: "ComplexFloat",
    torch.complex32: "ComplexHalf",
    torch.int64: "Long",
    torch.int32: "Int",
    torch.int16: "Short",
    torch.int8: "Char",
    torch.uint8: "Byte",
    torch.uint16: "UInt16",
    torch.uint32: "UInt32",
    torch.uint64: "UInt64",
    torch.qint8: "QInt8",
    torch.quint8: "QUInt8",
    torch.qint32: "QInt32",
}


def scalar_type_name(dtype: torch.dtype) -> str:
    """The name c10 prints for ``dtype`` (``ComplexDouble`` for ``torch.complex128``)."""
    name = _SCALAR_TYPE_NAMES.get(dtype)
    if name is not None:
        return name
    text = str(dtype).removeprefix("torch.")
    return text[:1].upper() + text[1:]  # float8_e5m2 -> Float8_e5m2, as c10 spells it


def not_implemented_message(operator: str, name: str) -> str:
    """MPS's own text, with the device's name for "MPS": ``mps_error_fallback`` in
    ``aten/src/ATen/mps/MPSFallback.mm``, with the commit hash torch was built from."""
    return (
        f"The operator '{operator}' is not currently implemented for the {name} device. If you "
        "want this op to be considered for addition please comment on "
        "https://github.com/pytorch/pytorch/issues/141287 and mention use-case, that resulted "
        f"in missing op as well as commit hash {torch.version.git_version}. As a temporary fix, "
        "you can set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU "
        f"as a fallback for this op. WARNING: this will be slower than running natively on "
        f"{name}."
    )


def float64_message(name: str) -> str:
    """``MPS_ERROR_DOUBLE_NOT_SUPPORTED`` of ``aten/src/ATen/mps/EmptyTensor.cpp``, raised by
    ``empty_mps`` and ``empty_strided_mps`` for every float64 allocation."""
    return (
        f"Cannot convert a {name} Tensor to float64 dtype as the {name} framework doesn't "
        "support float64. Please use float32 instead."
    )


def dtype_message(dtype: torch.dtype, name: str) -> str:
    """``getMPSDataType``'s refusal (``aten/src/ATen/native/mps/OperationUtils.mm``)."""
    return (
        f"Trying to convert {scalar_type_name(dtype)} to the {name} backend but it does not "
        "have support for that dtype."
    )


def native_functions_file() -> Path:
    """The installed torch's ``native_functions.yaml`` (``torchgen`` ships in the torch wheel).

    Located without importing ``torchgen``: only the file is needed.
    """
    spec = importlib.util.find_spec("torchgen")
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise FileNotFoundError(
            "torchgen is not installed beside torch, so native_functions.yaml cannot be read; "
            "it ships in the torch wheel: reinstall torch from a wheel"
        )
    return Path(next(iter(locations)), *_NATIVE_FUNCTIONS)


def parse_native_functions(text: str) -> dict[str, frozenset[str]]:
    """Each operator overload's dispatch keys, structured delegates resolved.

    Keys are ``aten::name.overload`` (``aten::name`` for the default overload), as the
    dispatcher prints them. The file is regular YAML written by hand in one layout (``- func:``
    at column 0, fields at 2 spaces, dispatch keys at 4), which is parsed line by line:
    a YAML library would add a dependency and take 100 times as long (the test suite checks
    this parse against PyYAML's).
    """
    own: dict[str, set[str]] = {}
    delegates: dict[str, str] = {}
    current: str | None = None
    in_dispatch = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()  # no schema or kernel name contains '#'
        if not line.strip():
            continue
        if line.startswith("- func:"):
            schema = line.removeprefix("- func:").strip()
            if "(" not in schema:
                raise ValueError(f"unexpected schema line in native_functions.yaml: {raw!r}")
            current = f"aten::{schema.split('(', 1)[0]}"
            own[current] = set()
            in_dispatch = False
            continue
        indent = len(line) - len(line.lstrip())
        if current is None or indent == 0:
            raise ValueError(f"unexpected line in native_functions.yaml: {raw!r}")
        field = line.strip()
        if indent == 2:
            in_dispatch = field == "dispatch:"
            if field.startswith("structured_delegate:"):
                delegate = field.removeprefix("structured_delegate:").strip()
                delegates[current] = f"aten::{delegate}"
        elif in_dispatch and indent == 4:
            keys, _, _ = field.partition(":")
            own[current].update(key.strip() for key in keys.split(","))
    resolved = {name: frozenset(keys) for name, keys in own.items()}
    for name, delegate in delegates.items():
        resolved[name] = resolved[name] | resolved[delegate]
    return resolved


@functools.cache
def dispatch_keys() -> Mapping[str, frozenset[str]]:
    """:func:`parse_native_functions` of the installed torch's file, read once."""
    return parse_native_functions(native_functions_file().read_text(encoding="utf-8"))


@functools.cache
def mps_kernels() -> frozenset[str]:
    """Every ``aten::`` overload MPS has a kernel for, in the installed torch.

    Composite overloads are not in it (they need no backend kernel); the ops MPS reruns on
    the CPU by itself (:data:`MPS_CPU_FALLBACK_OPS`) are.
    """
    kernels = {name for name, keys in dispatch_keys().items() if "MPS" in keys}
    return frozenset(kernels | MPS_CPU_FALLBACK_OPS)


@functools.cache
def mps_sparse_kernels() -> frozenset[str]:
    """Every ``aten::`` overload MPS has a sparse COO kernel for (``SparseMPS``), in the
    installed torch: building, converting, coalescing and reading sparse tensors, and their
    arithmetic."""
    return frozenset(name for name, keys in dispatch_keys().items() if "SparseMPS" in keys)

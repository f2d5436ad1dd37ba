"""What MPS implements, read from the installed torch's native_functions.yaml.

The simulated accelerator's op set comes from here, so the parse is checked against a YAML
library's reading of the same file, and against facts of torch 2.13's MPS backend.
"""

from __future__ import annotations

import pytest
import torch

from torchdevice.simulated_mps import mps_ops

SAMPLE = """\
# A comment at column 0
- func: erfinv(Tensor self) -> Tensor
  device_check: NoCheck   # TensorIterator
  structured_delegate: erfinv.out
  variants: method, function
  dispatch:
    SparseCPU, SparseCUDA: erfinv_sparse
  tags: pointwise

- func: erfinv.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
  structured: True
  dispatch:
    CPU, CUDA, MPS: erfinv_out   # a trailing comment
    SparseCPU: erfinv_sparse_out

- func: linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor
  python_module: nn
  dispatch:
    CompositeImplicitAutograd: linear
    MPS: _mps_linear

- func: flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)
  variants: function, method
"""


def test_parse_reads_dispatch_keys_and_resolves_structured_delegates():
    keys = mps_ops.parse_native_functions(SAMPLE)
    assert keys == {
        "aten::erfinv": {"SparseCPU", "SparseCUDA", "CPU", "CUDA", "MPS"},
        "aten::erfinv.out": {"CPU", "CUDA", "MPS", "SparseCPU"},
        "aten::linear": {"CompositeImplicitAutograd", "MPS"},
        "aten::flatten.using_ints": set(),  # no dispatch: CompositeImplicitAutograd
    }


@pytest.mark.parametrize(
    "text",
    ["  dispatch:\n    CPU: f\n", "- func: broken\n", "- func: f(Tensor a) -> Tensor\nstray\n"],
    ids=["field-before-func", "schema-without-arguments", "line-at-column-0"],
)
def test_parse_refuses_a_layout_it_does_not_know(text):
    with pytest.raises(ValueError, match=r"native_functions\.yaml"):
        mps_ops.parse_native_functions(text)


def test_parse_of_the_installed_file_matches_pyyaml():
    """The line parser reads the wheel's file as a YAML library does (PyYAML comes with the
    test dependencies through transformers; torchdevice itself does not need it)."""
    yaml = pytest.importorskip("yaml")
    text = mps_ops.native_functions_file().read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(text, Loader=loader)
    own = {}
    delegates = {}
    for entry in entries:
        name = "aten::" + entry["func"].split("(", 1)[0]
        own[name] = {key.strip() for keys in entry.get("dispatch", {}) for key in keys.split(",")}
        if "structured_delegate" in entry:
            delegates[name] = "aten::" + entry["structured_delegate"]
    expected = {name: own[name] | own.get(delegates.get(name, ""), set()) for name in own}
    assert mps_ops.dispatch_keys() == expected
    assert len(expected) > 2500


def test_mps_kernels_of_torch_2_13():
    kernels = mps_ops.mps_kernels()
    assert mps_ops.mps_kernels() is kernels  # read once per process
    # Kernels MPS has (the functional and in-place erfinv through their delegate).
    assert {
        "aten::erfinv",
        "aten::erfinv_",
        "aten::erfinv.out",
        "aten::add.out",
        "aten::_copy_from",
        "aten::mm",
        "aten::_fft_r2c",
    } <= kernels
    # Ops MPS reruns on the CPU by itself (MPSFallback.mm), not in the YAML.
    assert kernels >= mps_ops.MPS_CPU_FALLBACK_OPS
    assert "MPS" not in mps_ops.dispatch_keys()["aten::embedding_renorm_"]
    # Ops it lacks; composite ops need no kernel of their own.
    assert (
        not {
            "aten::heaviside.out",
            "aten::linalg_eig",
            "aten::special_ndtri.out",
            "aten::logspace.out",
            "aten::flatten.using_ints",
        }
        & kernels
    )
    if torch.__version__.startswith("2.13."):
        assert len(kernels) == 894  # 890 from the YAML, 4 more from MPSFallback.mm


def test_scalar_type_names_are_c10s():
    assert mps_ops.scalar_type_name(torch.complex128) == "ComplexDouble"
    assert mps_ops.scalar_type_name(torch.float64) == "Double"
    assert mps_ops.scalar_type_name(torch.bfloat16) == "BFloat16"
    assert mps_ops.scalar_type_name(torch.float8_e4m3fn) == "Float8_e4m3fn"
    assert torch.float64 not in mps_ops.MPS_DTYPES
    assert torch.complex128 not in mps_ops.MPS_DTYPES
    assert {
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.complex64,
        torch.bool,
    } <= mps_ops.MPS_DTYPES

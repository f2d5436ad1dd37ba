// Autocast on the simulated accelerator, as on MPS.
//
// Why: without these kernels torch.autocast on the device cast nothing, and fp16 code that
// feeds half inputs to float32 weights (Lightning Fabric's "16-mixed") failed where a Mac
// runs it. The rules are those PyTorch shares between its backends (the op lists of
// ATen/autocast_mode.h: matmuls and convolutions in the lower precision, reductions, losses and
// transcendentals in float32, promotion for cat/stack), which MPS's own list (AutocastMPS in
// autocast_mode.cpp) follows. Every other op passes through autocast uncast (the fallthrough
// registered from Python, registration.py).

#include <ATen/autocast_mode.h>
#include <torch/library.h>

// (The op lists name types as ATen's own autocast_mode.cpp sees them: inside at::autocast.)
namespace at::autocast {
namespace {
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TORCHDEVICE_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TORCHDEVICE_LOWER)
#undef TORCHDEVICE_LOWER
#define TORCHDEVICE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TORCHDEVICE_FP32)
#undef TORCHDEVICE_FP32
#define TORCHDEVICE_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCHDEVICE_FP32_SET_OPT_DTYPE)
#undef TORCHDEVICE_FP32_SET_OPT_DTYPE
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define TORCHDEVICE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TORCHDEVICE_PROMOTE)
#undef TORCHDEVICE_PROMOTE
}
} // namespace
} // namespace at::autocast

// The operators the Python half of the simulated accelerator calls (torch.ops.torchdevice_simulated).
//
// Why: Python registers the kernels (install_kernels), wraps CPU results as device tensors
// without a copy (adopt), reads the memory counters and the default generator of the device
// module; this library exposes exactly those, and nothing else, to Python.

#include "simulated.h"

#include <torch/library.h>

namespace torchdevice_simulated {
namespace {

// A copy of the handle (a library operator returns by value).
at::Generator get_default_generator() {
  return default_generator();
}

} // namespace
} // namespace torchdevice_simulated

TORCH_LIBRARY(torchdevice_simulated, m) {
  m.def("adopt(Tensor host) -> Tensor", &torchdevice_simulated::adopt);
  m.def("default_generator() -> Generator?", &torchdevice_simulated::get_default_generator);
  m.def("memory_allocated() -> int", &torchdevice_simulated::memory_allocated);
  m.def("max_memory_allocated() -> int", &torchdevice_simulated::max_memory_allocated);
  m.def("reset_peak_memory_stats() -> ()", &torchdevice_simulated::reset_peak_memory_stats);
  m.def(
      "install_kernels(str[] overloads, bool[] cross_device, bool[] any_dtype, Tensor[] dtypes, "
      "bool sparse=False) -> ()",
      &torchdevice_simulated::install_kernels);
}

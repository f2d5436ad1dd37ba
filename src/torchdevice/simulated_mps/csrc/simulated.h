// What the C++ files of torchdevice's simulated accelerator share (torchdevice/simulated_mps).
//
// Why a header: PyTorch asks a device for its pieces through separate C++ interfaces
// (c10::Allocator, DeviceGuardImplInterface, a generator type, PrivateUse1HooksInterface,
// HostAllocator), and each piece has a file of its own here, as PyTorch's own out-of-tree
// example backend (OpenReg) splits them. The pieces meet in a few places: the hooks hand out
// the allocators and generators, the kernels adopt CPU memory through the device allocator.
// This header declares those meeting points; everything else stays inside its file.
//
// Device memory is ordinary CPU memory, there is one device (index 0), streams are labels and
// events are host-clock timestamps. native.py compiles every .cpp file of this directory into
// one library; loading it registers the allocator, guard and hooks at static initialisation.

#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <cstdint>

namespace torchdevice_simulated {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

inline c10::Device the_device() {
  return {kType, 0};
}

// There is one device; -1 is PyTorch's "the current one".
inline void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index == 0 || index == -1,
      "Invalid device ordinal ",
      static_cast<int>(index),
      ": ",
      c10::get_privateuse1_backend(),
      " has one device, ",
      c10::get_privateuse1_backend(),
      ":0");
}

// ---- allocator.cpp: device memory and its accounting ----------------------------------------

// The device allocator (a c10::DeviceAllocator: torch.accelerator's memory API asks it).
c10::Allocator* device_allocator();
// torch.<name>.memory_allocated / max_memory_allocated / reset_peak_memory_stats.
int64_t memory_allocated();
int64_t max_memory_allocated();
void reset_peak_memory_stats();
// A device storage over a CPU storage's memory, without a copy (it keeps the CPU storage alive).
c10::Storage adopt_storage(const c10::Storage& source);
// A device tensor (uint8, one dimension) over the whole storage of a CPU tensor, without a copy.
at::Tensor adopt(const at::Tensor& host);

// ---- host_allocator.cpp: pinned host memory -------------------------------------------------

at::HostAllocator* pinned_allocator();
bool is_pinned(const void* data);

// ---- generator.cpp: the device's random generators ------------------------------------------

const at::Generator& default_generator();
at::Generator new_generator();

// ---- kernels.cpp: the common kernel ---------------------------------------------------------

// Register the common kernel for each overload, with its flags (see kernels.cpp).
void install_kernels(
    const c10::List<std::string>& overloads,
    const c10::List<bool>& cross_device,
    const c10::List<bool>& any_dtype,
    at::TensorList dtypes,
    bool sparse);

} // namespace torchdevice_simulated

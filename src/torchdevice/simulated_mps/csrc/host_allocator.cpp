// The simulated accelerator's pinned host memory: CPU memory the allocator remembers.
//
// Why: tensor.pin_memory(), DataLoader(pin_memory=True) and is_pinned() ask the accelerator's
// host allocator (at::HostAllocator, registered for PrivateUse1 by hooks.cpp). Remembering
// each block's address range is all that is_pinned() needs to answer as on a real device.

#include "simulated.h"

#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

namespace torchdevice_simulated {
namespace {

// Pinned memory is CPU memory the allocator remembers, so is_pinned() can answer for it.
std::mutex& pinned_mutex() {
  static auto* mutex = new std::mutex(); // leaked: may be used while statics are destroyed
  return *mutex;
}

std::map<uintptr_t, size_t>& pinned_blocks() {
  static auto* blocks = new std::map<uintptr_t, size_t>();
  return *blocks;
}

void release_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex());
    pinned_blocks().erase(reinterpret_cast<uintptr_t>(data));
  }
  c10::free_cpu(data);
}

} // namespace

bool is_pinned(const void* data) {
  if (data == nullptr) {
    return false;
  }
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(pinned_mutex());
  auto& blocks = pinned_blocks();
  auto after = blocks.upper_bound(address);
  if (after == blocks.begin()) {
    return false;
  }
  --after;
  return address < after->first + std::max<size_t>(after->second, 1);
}

struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = c10::alloc_cpu(std::max<size_t>(nbytes, 1)); // a distinct address each time
    {
      std::lock_guard<std::mutex> lock(pinned_mutex());
      pinned_blocks()[reinterpret_cast<uintptr_t>(data)] = nbytes;
    }
    return {data, data, &release_pinned, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release_pinned;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // Copies are synchronous: nothing can still be using the memory when it is freed.
  bool record_event(void*, void*, c10::Stream) override {
    return true;
  }

  void empty_cache() override {}

  at::HostStats get_stats() override {
    return {};
  }

  void reset_accumulated_stats() override {}

  void reset_peak_stats() override {}
};
at::HostAllocator* pinned_allocator() {
  static auto* allocator = new PinnedAllocator(); // leaked: may be used while statics are destroyed
  return allocator;
}

} // namespace torchdevice_simulated

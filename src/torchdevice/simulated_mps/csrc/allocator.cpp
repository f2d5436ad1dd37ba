// The simulated accelerator's device memory: an allocator whose memory is CPU memory, and the
// accounting behind torch.<name>.memory_allocated.
//
// Why: PyTorch allocates, copies, serialises and resizes device storages through the device's
// c10::Allocator; without one, torch.UntypedStorage(n, device=...), deepcopy and torch.load
// onto the device fail. A kernel's CPU result also becomes device memory here without a copy
// (adopt): the device storage holds a reference to the CPU one.

#include "simulated.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include <unistd.h>

namespace torchdevice_simulated {
namespace {

// ---- memory accounting (torch.<name>.memory_allocated) ------------------------------------

std::atomic<int64_t> allocated_now{0};
std::atomic<int64_t> allocated_peak{0};

void count_allocation(int64_t nbytes) {
  const int64_t now = allocated_now.fetch_add(nbytes) + nbytes;
  int64_t peak = allocated_peak.load();
  while (now > peak && !allocated_peak.compare_exchange_weak(peak, now)) {
  }
}

void count_free(int64_t nbytes) {
  allocated_now.fetch_sub(nbytes);
}

// ---- the device allocator -----------------------------------------------------------------

// What a device DataPtr's context holds: either memory of its own or a CPU storage whose
// memory it adopted (a CPU kernel's result, which becomes a device tensor without a copy).
struct Block {
  void* data;
  int64_t nbytes;
  c10::Storage adopted; // empty for memory of its own
};

void release_block(void* context) {
  auto* block = static_cast<Block*>(context);
  count_free(block->nbytes);
  if (!block->adopted) {
    c10::free_cpu(block->data);
  }
  delete block;
}

// A c10::DeviceAllocator, as CUDA's, MPS's and XPU's are: torch.accelerator's memory API
// (memory_allocated, max_memory_allocated, memory_stats, empty_cache, get_memory_info...)
// asks the device's allocator through it, so code ported to torch.accelerator runs here.
// Memory is host memory: allocated = reserved = active, and get_memory_info answers the
// host's free and total physical memory.
struct DeviceAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    auto* block = new Block{data, static_cast<int64_t>(nbytes), c10::Storage()};
    count_allocation(block->nbytes);
    return {data, block, &release_block, the_device()};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override {
    return true;
  }

  // Nothing is cached: freed memory goes back to the host at once.
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}

  // Work is synchronous: no stream can still be using freed memory.
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_index(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    for (auto* stat : {&stats.allocated_bytes[all], &stats.reserved_bytes[all],
                       &stats.active_bytes[all], &stats.requested_bytes[all]}) {
      stat->current = allocated_now.load();
      stat->peak = allocated_peak.load();
    }
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_index(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_index(device);
    allocated_peak.store(allocated_now.load());
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_index(device);
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const auto total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page;
#ifdef _SC_AVPHYS_PAGES
    const auto free = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
#else
    const auto used = static_cast<size_t>(std::max<int64_t>(allocated_now.load(), 0));
    const auto free = total > used ? total - used : 0;
#endif
    return {free, total};
  }
};

} // namespace

c10::Allocator* device_allocator() {
  static auto* allocator = new DeviceAllocator(); // leaked: may be used while statics are destroyed
  return allocator;
}

int64_t memory_allocated() {
  return allocated_now.load();
}

int64_t max_memory_allocated() {
  return allocated_peak.load();
}

void reset_peak_memory_stats() {
  allocated_peak.store(allocated_now.load());
}

// A device storage over a CPU storage's memory, without a copy the device storage keeps the
// CPU storage alive, and is resizable like any other.
c10::Storage adopt_storage(const c10::Storage& source) {
  void* data = const_cast<void*>(source.data());
  auto* block = new Block{data, static_cast<int64_t>(source.nbytes()), source};
  count_allocation(block->nbytes);
  c10::DataPtr pointer(data, block, &release_block, the_device());
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(),
      source.nbytes(),
      std::move(pointer),
      device_allocator(),
      /*resizable=*/true));
}

// A device tensor (uint8, one dimension) over the whole storage of a CPU tensor, without a
// copy (Python's kernels wrap their CPU results with it).
at::Tensor adopt(const at::Tensor& host) {
  TORCH_CHECK(host.device().is_cpu(), "adopt() takes a CPU tensor, got one on ", host.device());
  auto result = at::detail::make_tensor<c10::TensorImpl>(
      adopt_storage(host.storage()),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::Make<uint8_t>());
  result.unsafeGetTensorImpl()->set_sizes_contiguous(
      {static_cast<int64_t>(host.storage().nbytes())});
  return result;
}

} // namespace torchdevice_simulated

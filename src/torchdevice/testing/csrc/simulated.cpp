// The C++ half of torchdevice's simulated accelerator (torchdevice/testing/simulated.py).
//
// Why C++: PyTorch asks a device for memory, a device guard, random generators, pinned host
// memory and storage resizing through C++ interfaces only (c10::Allocator,
// DeviceGuardImplInterface, PrivateUse1HooksInterface, HostAllocator). A backend written in
// Python has none of them, so deepcopy, torch.load onto the device, pickling, pin_memory and
// torch.Generator(device=...) crash or fail on it. This file gives the PrivateUse1 device
// those pieces, small and synchronous: device memory is ordinary CPU memory, there is one
// device (index 0), streams are labels and events are host-clock timestamps.
//
// The kernels stay in Python (simulated.py): they run the CPU's kernels on CPU aliases of the
// device memory, with MPS's op set. Loading this library registers everything at static
// initialisation; the operators of the torchdevice_simulated library are what Python calls.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

namespace torchdevice_simulated {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

c10::Device the_device() {
  return {kType, 0};
}

// There is one device; -1 is PyTorch's "the current one".
void check_index(c10::DeviceIndex index) {
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

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    auto* block = new Block{data, static_cast<int64_t>(nbytes), c10::Storage()};
    count_allocation(block->nbytes);
    return {data, block, &release_block, the_device()};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

DeviceAllocator device_allocator;

// ---- pinned host memory -------------------------------------------------------------------

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

PinnedAllocator pinned_allocator;

// ---- generators ---------------------------------------------------------------------------

// The CPU's Mersenne Twister, labelled as the device's: its state is a CPU generator's state
// (a uint8 CPU tensor), which the Python kernels lend to the CPU kernels they run.
struct DeviceGenerator final : at::CPUGeneratorImpl {
  explicit DeviceGenerator(uint64_t seed = c10::default_rng_seed_val)
      : at::CPUGeneratorImpl(seed) {
    device_ = the_device();
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }

  // A Mersenne Twister has no Philox offset; pickling asks for one on every non-CPU device,
  // so the offset reads 0 and only 0 can be set back.
  uint64_t get_offset() const override {
    return 0;
  }

  void set_offset(uint64_t offset) override {
    TORCH_CHECK(
        offset == 0,
        c10::get_privateuse1_backend(),
        " generators are Mersenne Twisters, which have no offset; got ",
        offset);
  }

 private:
  DeviceGenerator* clone_impl() const override {
    auto* copy = new DeviceGenerator();
    copy->set_state(*get_state());
    return copy;
  }
};

const at::Generator& default_generator() {
  static auto* generator = new at::Generator(at::make_generator<DeviceGenerator>());
  return *generator;
}

// ---- the device guard: one device, streams as labels, events as timestamps ---------------

struct Event {
  std::chrono::steady_clock::time_point at;
};

thread_local c10::StreamId current_stream_id = 0;
std::atomic<c10::StreamId> next_stream_id{1};

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kType;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    check_index(device.index());
    return the_device();
  }

  c10::Device getDevice() const override {
    return the_device();
  }

  void setDevice(c10::Device device) const override {
    check_index(device.index());
  }

  void uncheckedSetDevice(c10::Device) const noexcept override {}

  c10::Stream getStream(c10::Device) const override {
    return c10::Stream(c10::Stream::UNSAFE, the_device(), current_stream_id);
  }

  c10::Stream getDefaultStream(c10::Device) const override {
    return c10::Stream(c10::Stream::UNSAFE, the_device(), 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return getNewStream(device, 0);
  }

  c10::Stream getNewStream(c10::Device, int) const override {
    return c10::Stream(c10::Stream::UNSAFE, the_device(), next_stream_id.fetch_add(1));
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    const c10::StreamId previous = current_stream_id;
    current_stream_id = stream.id();
    return c10::Stream(c10::Stream::UNSAFE, the_device(), previous);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return 1;
  }

  void record(void** event, const c10::Stream&, const c10::DeviceIndex index, const c10::EventFlag)
      const override {
    check_index(index);
    if (*event == nullptr) {
      *event = new Event();
    }
    static_cast<Event*>(*event)->at = std::chrono::steady_clock::now();
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<Event*>(event);
  }

  // Work is done when it is issued: nothing to wait for, every event has happened.
  void block(void*, const c10::Stream&) const override {}

  bool queryEvent(void*) const override {
    return true;
  }

  void synchronizeEvent(void*) const override {}

  bool queryStream(const c10::Stream&) const override {
    return true;
  }

  void synchronizeStream(const c10::Stream&) const override {}

  void synchronizeDevice(const c10::DeviceIndex) const override {}

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(
        start != nullptr && end != nullptr,
        "Both events must be recorded before calculating elapsed time.");
    const auto span = static_cast<Event*>(end)->at - static_cast<Event*>(start)->at;
    return std::chrono::duration<double, std::milli>(span).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

// ---- the hooks PyTorch asks a PrivateUse1 backend ---------------------------------------

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return true;
  }

  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return true;
  }

  void init() const override {}

  c10::DeviceIndex deviceCount() const override {
    return 1;
  }

  void setCurrentDevice(c10::DeviceIndex index) const override {
    check_index(index);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return 0;
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    check_index(index);
    return 0;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override {
    return 0;
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    check_index(index);
    return default_generator();
  }

  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    check_index(index);
    return at::make_generator<DeviceGenerator>();
  }

  at::Device getDeviceFromPtr(void*) const override {
    return the_device();
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned(data);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return &pinned_allocator;
  }

  // UntypedStorage.resize_ on the device: a new block, the old bytes copied over, for every
  // tensor and view on the storage at once (as a real device grows its storages).
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::DataPtr fresh = device_allocator.allocate(nbytes);
    const size_t kept = std::min(nbytes, impl->nbytes());
    if (kept != 0) {
      std::memcpy(fresh.get(), impl->data(), kept);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(nbytes);
  }
};

struct Registration {
  Registration() {
    c10::SetAllocator(kType, &device_allocator);
    at::setHostAllocator(kType, &pinned_allocator);
    at::RegisterPrivateUse1HooksInterface(new Hooks()); // leaked, as PyTorch expects
  }
};

Registration registration;

// ---- what the Python half calls --------------------------------------------------------

// A device tensor (uint8, one dimension) over the whole storage of a CPU tensor, without a
// copy: the device storage keeps the CPU storage alive, and is resizable like any other.
at::Tensor adopt(const at::Tensor& host) {
  TORCH_CHECK(host.device().is_cpu(), "adopt() takes a CPU tensor, got one on ", host.device());
  const c10::Storage& source = host.storage();
  void* data = const_cast<void*>(source.data());
  auto* block = new Block{data, static_cast<int64_t>(source.nbytes()), source};
  count_allocation(block->nbytes);
  c10::DataPtr pointer(data, block, &release_block, the_device());
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(),
      source.nbytes(),
      std::move(pointer),
      &device_allocator,
      /*resizable=*/true);
  auto result = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(std::move(storage)),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::Make<uint8_t>());
  result.unsafeGetTensorImpl()->set_sizes_contiguous({static_cast<int64_t>(source.nbytes())});
  return result;
}

at::Generator get_default_generator() {
  return default_generator();
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

} // namespace
} // namespace torchdevice_simulated

TORCH_LIBRARY(torchdevice_simulated, m) {
  m.def("adopt(Tensor host) -> Tensor", &torchdevice_simulated::adopt);
  m.def("default_generator() -> Generator?", &torchdevice_simulated::get_default_generator);
  m.def("memory_allocated() -> int", &torchdevice_simulated::memory_allocated);
  m.def("max_memory_allocated() -> int", &torchdevice_simulated::max_memory_allocated);
  m.def("reset_peak_memory_stats() -> ()", &torchdevice_simulated::reset_peak_memory_stats);
}

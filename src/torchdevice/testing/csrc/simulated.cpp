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
// The kernels run the CPU's kernels on CPU aliases of the device memory, with MPS's op set
// (chosen in simulated.py). The common kernel is here (alias_kernel below): one boxed function,
// registered by Python for every plain op, that costs a few microseconds where a Python kernel
// costs hundreds, so whole test suites can run on the device. Kernels that are not plain (random
// ops, copies between devices, resize_, set_) stay in Python. Loading this library registers
// the allocator, guard and hooks at static initialisation; the operators of the
// torchdevice_simulated library are what Python calls.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Operators.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

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
      &device_allocator,
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

// ---- the common kernel: the CPU's kernel on CPU aliases of the device memory ------------

// The dtypes MPS kernels accept (simulated.py passes MPS_DTYPES once, at installation).
std::array<bool, static_cast<size_t>(c10::ScalarType::NumOptions)> accepted_dtypes{};

// Device storages by the address of their memory: a CPU result on an input's memory (a view)
// becomes a device tensor on that input's storage; results sharing memory share a storage.
// `keys` is the key set of the device tensor the storage came from (empty for a storage a
// result adopted): a view takes its base's, as PyTorch's own view kernels do (TensorImpl's
// VIEW constructor), so a view of an ordinary tensor made under torch.inference_mode() is an
// ordinary tensor that autograd can give its base's version counter.
struct Known {
  c10::Storage storage;
  c10::DispatchKeySet keys;
};
using Storages = std::unordered_map<const void*, Known>;

std::string device_name() {
  return c10::get_privateuse1_backend();
}

// A CPU tensor on the same memory as a device tensor, with its geometry. The CPU storage does
// not own the memory and cannot be resized: a CPU kernel can neither free nor move it.
at::Tensor host_alias(const at::Tensor& tensor, Storages& storages) {
  const c10::Storage& storage = tensor.storage();
  c10::Storage host;
  if (storage.nbytes() != 0) {
    void* data = const_cast<void*>(storage.data());
    host = c10::Storage(
        c10::Storage::use_byte_size_t(),
        storage.nbytes(),
        c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)),
        /*allocator=*/nullptr,
        /*resizable=*/false);
    storages.emplace(data, Known{storage, tensor.key_set()});
  } else {
    host = c10::Storage(
        c10::Storage::use_byte_size_t(), 0, c10::GetCPUAllocator()->allocate(0),
        c10::GetCPUAllocator(), /*resizable=*/true);
  }
  auto alias = at::detail::make_tensor<c10::TensorImpl>(
      std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU), tensor.dtype());
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(
      tensor.sizes(), tensor.strides(), tensor.storage_offset());
  alias._set_conj(tensor.is_conj());
  alias._set_neg(tensor.is_neg());
  return alias;
}

// A CPU kernel's result as a device tensor: on the input storage it is a view of, else on a
// storage adopting its memory. MPS allocates every result with empty_mps, which refuses float64.
at::Tensor from_host(const at::Tensor& host, Storages& storages) {
  TORCH_CHECK_TYPE(
      host.scalar_type() != c10::ScalarType::Double,
      "Cannot convert a ", device_name(), " Tensor to float64 dtype as the ", device_name(),
      " framework doesn't support float64. Please use float32 instead.");
  const c10::Storage& source = host.storage();
  c10::Storage storage;
  c10::DispatchKeySet base_keys;
  if (source.nbytes() != 0) {
    auto found = storages.find(source.data());
    if (found != storages.end()) {
      storage = found->second.storage;
      base_keys = found->second.keys;
    } else {
      storage = adopt_storage(source);
      storages.emplace(source.data(), Known{storage, c10::DispatchKeySet()});
    }
  } else {
    storage = adopt_storage(source);
  }
  auto result = base_keys.empty()
      ? at::detail::make_tensor<c10::TensorImpl>(
            std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.dtype())
      : at::detail::make_tensor<c10::TensorImpl>(
            c10::TensorImpl::VIEW, std::move(storage), base_keys, host.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(
      host.sizes(), host.strides(), host.storage_offset());
  result._set_conj(host.is_conj());
  result._set_neg(host.is_neg());
  return result;
}

// ---- sparse COO tensors ------------------------------------------------------------------

// MPS has sparse COO tensors (the SparseMPS kernels of native_functions.yaml: construction,
// to_sparse/to_dense, coalesce, indices/values, copies, arithmetic). A sparse tensor is its
// sizes, dimensions, coalesced flag and two dense tensors, indices and values: its alias on
// the CPU is a SparseCPU tensor over CPU aliases of those two, and a CPU result comes back
// the same way, so the dense machinery above does the memory.
at::SparseTensorImpl* sparse_impl(const at::Tensor& tensor) {
  return static_cast<at::SparseTensorImpl*>(tensor.unsafeGetTensorImpl());
}

// Give `target` the sparse geometry of `like` over `indices` and `values` (no copy).
void set_sparse(
    const at::Tensor& target, const at::Tensor& like, const at::Tensor& indices,
    const at::Tensor& values) {
  at::SparseTensorImpl* impl = sparse_impl(target);
  const at::SparseTensorImpl* source = sparse_impl(like);
  impl->raw_resize_(source->sparse_dim(), source->dense_dim(), like.sizes());
  impl->set_indices_and_values_unsafe(indices, values);
  impl->set_coalesced(source->coalesced());
}

at::Tensor make_sparse(
    c10::DispatchKey key, const at::Tensor& like, const at::Tensor& indices,
    const at::Tensor& values) {
  auto result =
      at::detail::make_tensor<at::SparseTensorImpl>(c10::DispatchKeySet(key), like.dtype());
  set_sparse(result, like, indices, values);
  return result;
}

at::Tensor sparse_host_alias(const at::Tensor& tensor, Storages& storages) {
  const at::SparseTensorImpl* impl = sparse_impl(tensor);
  return make_sparse(
      c10::DispatchKey::SparseCPU, tensor, host_alias(impl->indices(), storages),
      host_alias(impl->values(), storages));
}

at::Tensor sparse_from_host(const at::Tensor& host, Storages& storages) {
  const at::SparseTensorImpl* impl = sparse_impl(host);
  return make_sparse(
      c10::DispatchKey::SparsePrivateUse1, host, from_host(impl->indices(), storages),
      from_host(impl->values(), storages));
}

// After a CPU kernel wrote into the alias of a sparse device tensor (coalesce in place,
// resize_and_clear, copy_, add_), the device tensor takes the alias's new state: unlike dense
// memory, a sparse tensor's indices and values are replaced, not written through.
void write_back_sparse(const at::Tensor& device, const at::Tensor& host, Storages& storages) {
  const at::SparseTensorImpl* impl = sparse_impl(host);
  set_sparse(device, host, from_host(impl->indices(), storages), from_host(impl->values(), storages));
}

// Refuse a tensor from another device, as TensorIterator does (CPU scalars pass), and device
// tensors of a dtype MPS kernels refuse (getMPSDataType's TypeError).
void check_tensor(
    const at::Tensor& tensor, const c10::OperatorHandle& op, bool cross_device, bool any_dtype) {
  if (!tensor.defined()) {
    return;
  }
  if (tensor.device().type() != kType) {
    TORCH_CHECK(
        cross_device || (tensor.device().is_cpu() && tensor.dim() == 0),
        "Expected all tensors to be on the same device, but found at least two devices, ",
        the_device(), " and ", tensor.device(), "! (when checking arguments for ",
        op.operator_name(), ")");
    return;
  }
  TORCH_CHECK_TYPE(
      any_dtype || accepted_dtypes[static_cast<size_t>(tensor.scalar_type())],
      "Trying to convert ", tensor.scalar_type(), " to the ", device_name(),
      " backend but it does not have support for that dtype.");
}

// An argument as the CPU kernel takes it: device tensors (alone or in lists) as CPU aliases, the
// device as the CPU.
c10::IValue to_host(
    const c10::IValue& value, const c10::OperatorHandle& op, bool cross_device, bool any_dtype,
    Storages& storages) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    check_tensor(tensor, op, cross_device, any_dtype);
    if (tensor.defined() && tensor.device().type() == kType) {
      return tensor.is_sparse() ? sparse_host_alias(tensor, storages)
                                : host_alias(tensor, storages);
    }
    return value;
  }
  if (value.isList()) {
    auto list = value.toList();
    bool has_tensor = false;
    for (const c10::IValue& element : list) {
      has_tensor = has_tensor || element.isTensor();
    }
    if (!has_tensor) {
      return value;
    }
    c10::impl::GenericList host(list.elementType());
    host.reserve(list.size());
    for (const c10::IValue& element : list) {
      host.push_back(to_host(element, op, cross_device, any_dtype, storages));
    }
    return host;
  }
  if (value.isDevice() && value.toDevice().type() == kType) {
    check_index(value.toDevice().index());
    return c10::Device(c10::DeviceType::CPU);
  }
  return value;
}

c10::IValue to_device(const c10::IValue& value, Storages& storages) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined()) {
      return value;
    }
    return tensor.is_sparse() ? sparse_from_host(tensor, storages) : from_host(tensor, storages);
  }
  if (value.isList()) {
    auto list = value.toList();
    c10::impl::GenericList device(list.elementType());
    device.reserve(list.size());
    for (const c10::IValue& element : list) {
      device.push_back(to_device(element, storages));
    }
    return device;
  }
  return value;
}

// The argument a return writes into (Tensor(a!): add_, out=), or -1.
int written_argument(const c10::FunctionSchema& schema, size_t return_index) {
  const c10::AliasInfo* alias = schema.returns()[return_index].alias_info();
  if (alias == nullptr || !alias->isWrite()) {
    return -1;
  }
  const auto& arguments = schema.arguments();
  for (size_t index = 0; index < arguments.size(); ++index) {
    const c10::AliasInfo* info = arguments[index].alias_info();
    if (info == nullptr) {
      continue;
    }
    for (const auto& set : info->beforeSets()) {
      if (alias->beforeSets().count(set) != 0) {
        return static_cast<int>(index);
      }
    }
  }
  return -1;
}

// The kernel for every plain op (no generator, no cross-device copy of its own): the CPU kernel
// on CPU aliases of the inputs, so views stay views and in-place ops write in place. out=
// arguments get a fresh CPU tensor instead, because a CPU kernel may resize them; the result is
// copied into the device tensor, resized first, as PyTorch's own cpu_fallback does. Returns that
// are an argument written in place are that very argument, as on a real backend. `Sparse`
// kernels are registered at SparsePrivateUse1 and run the SparseCPU kernel; a sparse argument
// they write into takes the CPU alias's new indices and values afterwards.
template <bool CrossDevice, bool AnyDtype, bool Sparse>
void alias_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // Below Python dispatch modes, as a Python kernel under no_dispatch() is: the CPU work that
  // implements the device is not the program's own.
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t count = arguments.size();
  std::vector<c10::IValue> originals(stack->end() - count, stack->end());
  Storages storages;
  std::vector<std::pair<at::Tensor, at::Tensor>> outs; // (device out, CPU out)
  std::vector<std::pair<at::Tensor, at::Tensor>> written_sparse; // (device, its CPU alias)
  for (size_t index = 0; index < count; ++index) {
    c10::IValue& slot = (*stack)[stack->size() - count + index];
    const c10::Argument& argument = arguments[index];
    const c10::AliasInfo* alias = argument.alias_info();
    const bool writes = alias != nullptr && alias->isWrite();
    if (argument.kwarg_only() && writes && slot.isTensor() && slot.toTensor().defined()) {
      const at::Tensor device_out = slot.toTensor();
      check_tensor(device_out, op, CrossDevice, AnyDtype);
      at::Tensor host_out = at::empty({0}, device_out.options().device(c10::kCPU));
      outs.emplace_back(device_out, host_out);
      slot = host_out;
      continue;
    }
    slot = to_host(slot, op, CrossDevice, AnyDtype, storages);
    if (Sparse && writes && slot.isTensor()) {
      const at::Tensor& original = originals[index].toTensor();
      if (original.defined() && original.is_sparse() && original.device().type() == kType) {
        written_sparse.emplace_back(original, slot.toTensor());
      }
    }
  }
  op.redispatchBoxed(
      c10::DispatchKeySet(Sparse ? c10::DispatchKey::SparseCPU : c10::DispatchKey::CPU), stack);
  for (auto& [device, host] : written_sparse) {
    write_back_sparse(device, host, storages);
  }
  for (auto& [device_out, host_out] : outs) {
    if (device_out.is_sparse()) {
      write_back_sparse(device_out, host_out, storages);
      continue;
    }
    if (device_out.sizes() != host_out.sizes()) {
      device_out.resize_(host_out.sizes());
    }
    Storages ignored;
    host_alias(device_out, ignored).copy_(host_out);
  }
  const size_t returns = schema.returns().size();
  for (size_t index = 0; index < returns; ++index) {
    c10::IValue& slot = (*stack)[stack->size() - returns + index];
    const int written = written_argument(schema, index);
    slot = written >= 0 ? originals[written] : to_device(slot, storages);
  }
}

// The kernels Python installed, by flavour; the libraries live as long as the process.
std::vector<std::unique_ptr<torch::Library>>& libraries() {
  static auto* kept = new std::vector<std::unique_ptr<torch::Library>>();
  return *kept;
}

template <bool Sparse>
torch::CppFunction kernel_for(bool cross_device, bool any_dtype) {
  if (cross_device) {
    return any_dtype
        ? torch::CppFunction::makeFromBoxedFunction<&alias_kernel<true, true, Sparse>>()
        : torch::CppFunction::makeFromBoxedFunction<&alias_kernel<true, false, Sparse>>();
  }
  return any_dtype
      ? torch::CppFunction::makeFromBoxedFunction<&alias_kernel<false, true, Sparse>>()
      : torch::CppFunction::makeFromBoxedFunction<&alias_kernel<false, false, Sparse>>();
}

// Register alias_kernel for each overload ("add.Tensor"; a bare name for .default), with the
// flags that apply to it, at PrivateUse1 (or SparsePrivateUse1 for `sparse`), and accept the
// dtypes of `dtypes` (one sample tensor per dtype MPS kernels accept).
void install_kernels(
    const c10::List<std::string>& overloads,
    const c10::List<bool>& cross_device,
    const c10::List<bool>& any_dtype,
    at::TensorList dtypes,
    bool sparse) {
  TORCH_CHECK(
      overloads.size() == cross_device.size() && overloads.size() == any_dtype.size(),
      "install_kernels: one flag of each kind per overload");
  for (const at::Tensor& sample : dtypes) {
    accepted_dtypes[static_cast<size_t>(sample.scalar_type())] = true;
  }
  auto library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten",
      sparse ? c10::DispatchKey::SparsePrivateUse1 : c10::DispatchKey::PrivateUse1, __FILE__,
      __LINE__);
  for (size_t index = 0; index < overloads.size(); ++index) {
    library->impl(
        overloads.get(index).c_str(),
        sparse ? kernel_for<true>(cross_device.get(index), any_dtype.get(index))
               : kernel_for<false>(cross_device.get(index), any_dtype.get(index)));
  }
  libraries().push_back(std::move(library));
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
  m.def(
      "install_kernels(str[] overloads, bool[] cross_device, bool[] any_dtype, Tensor[] dtypes, "
      "bool sparse=False) -> ()",
      &torchdevice_simulated::install_kernels);
}

// Autocast on the device, as on MPS: the casting rules PyTorch shares between its backends
// (the op lists of ATen/autocast_mode.h: matmuls and convolutions in the lower precision,
// reductions, losses and transcendentals in float32, promotion for cat/stack), which MPS's
// own list (AutocastMPS in autocast_mode.cpp) follows. Without them torch.autocast on the
// device cast nothing, and fp16 code that feeds half inputs to float32 weights (Lightning
// Fabric's "16-mixed") failed where a Mac runs it.
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

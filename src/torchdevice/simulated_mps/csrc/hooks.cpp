// The hooks PyTorch asks a PrivateUse1 backend, and the registration of the device's pieces.
//
// Why: PyTorch reaches an out-of-tree device's generators, pinned memory, current device and
// storage resizing through at::PrivateUse1HooksInterface; its allocators through
// c10::SetAllocator and at::setHostAllocator. Loading the library runs Registration below, at
// static initialisation: after that the device's memory, pinning and generators work under
// whatever name Python gives PrivateUse1.

#include "simulated.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace torchdevice_simulated {
namespace {

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
    return new_generator();
  }

  at::Device getDeviceFromPtr(void*) const override {
    return the_device();
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned(data);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_allocator();
  }

  // UntypedStorage.resize_ on the device: a new block, the old bytes copied over, for every
  // tensor and view on the storage at once (as a real device grows its storages).
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::DataPtr fresh = device_allocator()->allocate(nbytes);
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
    c10::SetAllocator(kType, device_allocator());
    at::setHostAllocator(kType, pinned_allocator());
    at::RegisterPrivateUse1HooksInterface(new Hooks()); // leaked, as PyTorch expects
  }
};

Registration registration;

} // namespace
} // namespace torchdevice_simulated

// The simulated accelerator's device guard: one device, streams as labels, events as
// host-clock timestamps.
//
// Why: PyTorch switches devices and streams, records events and synchronises through the
// device type's c10::impl::DeviceGuardImplInterface (torch.Stream, torch.Event, device
// context managers, autograd's stream handling). Work on this device is synchronous, so every
// event has happened and every stream is idle; elapsed time between events is real time.

#include "simulated.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <chrono>

namespace torchdevice_simulated {
namespace {

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

} // namespace
} // namespace torchdevice_simulated

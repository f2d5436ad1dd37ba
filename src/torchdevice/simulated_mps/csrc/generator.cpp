// The simulated accelerator's random generators: torch.Generator(device=name) and the
// device's default generator (torch.<name>.default_generator, seeded by torch.manual_seed).
//
// Why: random ops on a device draw from a generator of that device, and PyTorch builds one
// through the PrivateUse1 hooks (hooks.cpp); a CPU generator is refused, as CUDA and MPS
// refuse it. Each is the CPU's Mersenne Twister labelled as the device's, so the Python
// kernels can lend its state to the CPU kernels they run.

#include "simulated.h"

#include <ATen/CPUGeneratorImpl.h>

namespace torchdevice_simulated {
namespace {

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

} // namespace

const at::Generator& default_generator() {
  static auto* generator = new at::Generator(at::make_generator<DeviceGenerator>());
  return *generator;
}

at::Generator new_generator() {
  return at::make_generator<DeviceGenerator>();
}

} // namespace torchdevice_simulated

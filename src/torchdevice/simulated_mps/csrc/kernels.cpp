// The simulated accelerator's common kernel: the CPU's kernel on CPU aliases of the device
// memory, registered by Python (kernels.py) for every plain op of MPS's op set.
//
// Why C++: one boxed function that costs a few microseconds where a Python kernel costs
// hundreds, so whole test suites can run on the device. Views stay views and in-place ops
// write in place, because the CPU kernel runs on the device tensors' own memory; results come
// back as device tensors on that memory (a view's on its base's storage, a new result's on a
// storage adopting the CPU one: allocator.cpp). Kernels that are not plain (random ops,
// copies between devices, resize_, set_) stay in Python.

#include "simulated.h"

#include <ATen/Operators.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torchdevice_simulated {
namespace {

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

} // namespace

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

} // namespace torchdevice_simulated

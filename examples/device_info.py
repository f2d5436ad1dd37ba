"""Print what ``torch.cuda`` says about the GPU, the way CUDA users ask it.

Availability and count, the current device and ``with torch.cuda.device(i)``, name,
properties, compute capability, bf16 support, free/total memory, memory statistics and
the RNG, then checks that the answers agree with each other and with where tensors really
land. Under torchdevice on a machine without CUDA, the answers describe the real device
(an Apple GPU, or the CPU and its memory). Exits non-zero if an answer is inconsistent.
Natively it needs an NVIDIA GPU; anywhere else::

    python -m torchdevice examples/device_info.py
"""

import sys

import torch

if not torch.cuda.is_available():
    sys.exit("This script requires a CUDA GPU.")

GIB = 2**30
failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def describe() -> None:
    count = torch.cuda.device_count()
    current = torch.cuda.current_device()
    print(f"CUDA available: {torch.cuda.is_available()}, {count} device(s), current {current}")
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        print(f"device {index}: {torch.cuda.get_device_name(index)}")
        print(f"  compute capability  {props.major}.{props.minor}")
        print(f"  total memory        {props.total_memory / GIB:.1f} GiB")
        print(f"  multiprocessors     {props.multi_processor_count}")
        print(f"  bf16 supported      {torch.cuda.is_bf16_supported()}")
    free, total = torch.cuda.mem_get_info()
    print(f"memory: {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB")
    print(f"cuDNN enabled: {torch.backends.cudnn.enabled}")


def consistency() -> None:
    print("consistency checks")
    count = torch.cuda.device_count()
    current = torch.cuda.current_device()
    check(count >= 1, "device_count() >= 1 when is_available()")
    check(0 <= current < count, "current_device() is a valid index")
    props = torch.cuda.get_device_properties(current)
    check(props.name == torch.cuda.get_device_name(current), "properties and name agree")
    check(props.total_memory > 0, "total_memory is positive")
    check(
        (props.major, props.minor) == torch.cuda.get_device_capability(current),
        "get_device_capability() matches the properties",
    )
    free, total = torch.cuda.mem_get_info()
    check(0 < free <= total, "mem_get_info() gives (free, total)")

    x = torch.ones(1024, 1024, device="cuda")
    on_current = torch.ones(1, device=torch.device("cuda", current)).device
    check(x.device == on_current, "a 'cuda' tensor is on the current device")
    check(x.get_device() == x.device.index or x.device.type == "cpu", "Tensor.get_device()")
    with torch.cuda.device(current):
        check(torch.cuda.current_device() == current, "with torch.cuda.device(i) selects i")
    torch.cuda.set_device(current)
    check(torch.cuda.current_device() == current, "set_device() selects the device")
    check(torch.cuda.memory_allocated() >= 0, "memory_allocated() answers")
    check(
        torch.cuda.memory_reserved() >= torch.cuda.memory_allocated(),
        "memory_reserved() >= memory_allocated()",
    )
    stats = torch.cuda.memory_stats()
    check("allocated_bytes.all.current" in stats, "memory_stats() has the usual keys")
    del x

    torch.cuda.manual_seed(1234)
    first = torch.randn(4, device="cuda")
    state = torch.cuda.get_rng_state()
    second = torch.randn(4, device="cuda")
    torch.cuda.manual_seed(1234)
    check(torch.equal(first, torch.randn(4, device="cuda")), "manual_seed() repeats a draw")
    torch.cuda.set_rng_state(state)
    check(torch.equal(second, torch.randn(4, device="cuda")), "set_rng_state() rewinds")
    check(torch.cuda.initial_seed() == 1234, "initial_seed() is the seed set")
    torch.cuda.synchronize()


def main() -> int:
    describe()
    consistency()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

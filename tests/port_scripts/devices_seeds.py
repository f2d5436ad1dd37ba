"""Device indices, names, seeds and device strings the CUDA way."""

import sys

import torch

assert torch.cuda.is_available(), "needs CUDA"


def main() -> int:
    torch.cuda.set_device(0)
    index = torch.cuda.current_device()
    with torch.cuda.device(0):
        inside = torch.zeros(2, device=f"cuda:0")  # noqa: F541 - written so on purpose
    name = torch.cuda.get_device_name(0)
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    a = torch.rand(3, device="cuda")
    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    b = torch.rand(3, device=torch.device("cuda", 0))
    torch.cuda.synchronize()
    checks = {
        "a device index": isinstance(index, int) and index >= 0,
        "a device name": isinstance(name, str) and bool(name),
        "the same seed gives the same numbers": torch.equal(a, b),
        "tensors land on one device": inside.device.type == a.device.type == b.device.type,
        "the count is consistent": torch.cuda.device_count() >= 0,
        "the initial seed is the seed": torch.cuda.initial_seed() == 0,
    }
    for what, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

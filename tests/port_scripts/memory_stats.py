"""Memory statistics the CUDA way; the checks are the invariants every device keeps."""

import sys

import torch

if not torch.cuda.is_available():
    sys.exit("needs CUDA")

MIB = 2**20


def main() -> int:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    before = torch.cuda.memory_allocated()
    buffer = torch.zeros(4 * MIB // 4, device="cuda")
    during = torch.cuda.memory_allocated(0)
    peak = torch.cuda.max_memory_allocated()
    reserved, max_reserved = torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved()
    stats = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    del buffer
    torch.cuda.empty_cache()
    checks = {
        "allocated never falls below 0": min(before, during) >= 0,
        "the peak is at least what was allocated": peak >= during,
        "reserved covers allocated": reserved >= during or reserved == 0,
        "max reserved covers reserved": max_reserved >= reserved,
        "memory_stats is a mapping": isinstance(stats, dict),
        "free memory is at most the total": 0 <= free <= total,
        "the buffer is on the device": buffer_device().type in ("cuda", "mps", "cpu"),
    }
    for what, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    return 0 if all(checks.values()) else 1


def buffer_device() -> torch.device:
    return torch.ones(1).cuda().device


if __name__ == "__main__":
    sys.exit(main())

"""Events and streams the CUDA way: timing a sleep, a side stream, waits and queries."""

import sys
import time

import torch

if not torch.cuda.is_available():
    raise SystemExit("needs CUDA")


def main() -> int:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(1000, device="cuda") * 2
    torch.cuda.current_stream().wait_stream(side)
    done = torch.cuda.Event()
    done.record(side)
    torch.cuda.default_stream().wait_event(done)
    side.synchronize()
    torch.cuda.synchronize()
    checks = {
        "a 50 ms sleep reads as about 50 ms": 40.0 <= elapsed <= 2000.0,
        "the side stream's work is done": side.query() and done.query(),
        "the side stream computed": x.sum().item() == 2000.0,
    }
    for what, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

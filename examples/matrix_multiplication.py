"""Matrix multiplication on the GPU, timed with CUDA events, written for CUDA.

Multiplies matrices on "cuda" (``@``, ``torch.mm``, batched ``torch.bmm``, ``einsum``,
under ``torch.autocast("cuda")`` too), times them with ``torch.cuda.Event`` and checks
every product against NumPy on the host. Exits non-zero if a result is wrong. Natively it
needs an NVIDIA GPU; anywhere else::

    python -m torchdevice examples/matrix_multiplication.py [--size 256]
"""

import argparse
import sys

import numpy as np
import torch

if not torch.cuda.is_available():
    sys.exit("This script requires a CUDA GPU.")

failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def close(result: torch.Tensor, expected: np.ndarray, rtol: float = 1e-4) -> bool:
    got = result.float().cpu().numpy()
    return got.shape == expected.shape and np.allclose(got, expected, rtol=rtol, atol=rtol)


def timed(fn, repeats: int = 5) -> tuple[torch.Tensor, float]:
    """Run ``fn`` once to warm up, then time ``repeats`` runs with CUDA events (ms each)."""
    result = fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        result = fn()
    end.record()
    torch.cuda.synchronize()
    return result, start.elapsed_time(end) / repeats


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    n = args.size

    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n).cuda()
    a_np, b_np = a.cpu().numpy().astype(np.float64), b.cpu().numpy().astype(np.float64)
    print(f"{n}x{n} float32 matrices on {a.device} ({torch.cuda.get_device_name()})")

    product, ms = timed(lambda: a @ b)
    gflops = 2 * n**3 / (ms / 1e3) / 1e9 if ms > 0 else float("inf")
    print(f"  a @ b: {ms:.3f} ms per product, {gflops:.1f} GFLOP/s")
    check(product.device == a.device, "the product stays on the device")
    check(close(product, a_np @ b_np), "a @ b matches NumPy")
    check(close(torch.mm(a, b.t()), a_np @ b_np.T), "torch.mm(a, b.t()) matches NumPy")
    check(ms > 0, "CUDA events time the product")

    vector = torch.arange(n, dtype=torch.float32, device="cuda") / n
    check(close(torch.mv(a, vector), a_np @ (np.arange(n) / n)), "torch.mv matches NumPy")

    batch_a = torch.randn(8, n // 4, n // 8, device="cuda")
    batch_b = torch.randn(8, n // 8, n // 2, device="cuda")
    expected = np.matmul(batch_a.cpu().numpy(), batch_b.cpu().numpy())
    check(close(torch.bmm(batch_a, batch_b), expected), "torch.bmm matches NumPy")
    check(
        close(torch.einsum("bij,bjk->bik", batch_a, batch_b), expected),
        "torch.einsum('bij,bjk->bik') matches NumPy",
    )

    with torch.autocast("cuda"):
        low = a @ b
    print(f"  under torch.autocast('cuda') the product is {low.dtype}")
    check(low.dtype in (torch.float16, torch.bfloat16), "autocast multiplies in low precision")
    exact = a_np @ b_np
    relative = float(np.abs(low.float().cpu().numpy() - exact).max() / np.abs(exact).max())
    check(relative < 0.05, f"the low-precision product is close (max error {relative:.4f})")

    identity = torch.eye(n, device="cuda")
    check(torch.equal(a @ identity, a), "a @ I == a exactly")
    inverse = torch.linalg.inv(a @ a.t() + n * identity)
    check(torch.allclose(inverse @ (a @ a.t() + n * identity), identity, atol=1e-4), "linalg.inv")

    if failures:
        print(f"{len(failures)} check(s) failed: {failures}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tensor basics on the GPU, written the way CUDA users write them.

Creates tensors on "cuda" every usual way (``device=``, ``.cuda()``, ``.to("cuda")``,
``torch.device``), does arithmetic, indexing, reductions and in-place updates there, and
reads results back with ``.item()``, ``.tolist()`` and ``.cpu().numpy()``. Every result is
checked against a value worked out by hand; the script exits non-zero if one is wrong.
Natively it needs an NVIDIA GPU; anywhere else::

    python -m torchdevice examples/basic_tensors.py
"""

import sys

import torch

if not torch.cuda.is_available():
    sys.exit("This script requires a CUDA GPU.")

failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def create() -> None:
    print("creating tensors on the GPU")
    device = torch.device("cuda")
    a = torch.zeros(2, 3, device="cuda")
    b = torch.ones(2, 3).cuda()
    c = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("cuda")
    d = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=device)
    e = torch.full((2, 3), 7.0, device=torch.device("cuda", 0))
    tensors = {"zeros": a, "ones": b, "arange": c, "tensor": d, "full": e}
    for name, t in tensors.items():
        print(f"    {name:7s} {tuple(t.shape)} {t.dtype} on {t.device}")
    devices = {t.device for t in tensors.values()}
    check(len(devices) == 1, f"every way of asking for 'cuda' gives one device: {devices}")
    check(c.device == d.device == b.device, "tensors made differently can be combined")
    check(c.is_cuda == (c.device.type == "cuda"), "Tensor.is_cuda agrees with Tensor.device")
    check(a.sum().item() == 0.0 and b.sum().item() == 6.0, "zeros and ones hold what they say")
    check(e.tolist() == [[7.0] * 3] * 2, "full() fills")


def arithmetic() -> None:
    print("arithmetic, indexing and reductions")
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device="cuda")
    y = torch.tensor([[6.0, 5.0, 4.0], [3.0, 2.0, 1.0]]).cuda()
    check((x + y).tolist() == [[7.0] * 3] * 2, "x + y")
    check((x * y).tolist() == [[6.0, 10.0, 12.0], [12.0, 10.0, 6.0]], "x * y (elementwise)")
    check((x - y).abs().max().item() == 5.0, "(x - y).abs().max()")
    check(x.sum().item() == 21.0, "x.sum()")
    check(x.mean(dim=0).tolist() == [2.5, 3.5, 4.5], "x.mean(dim=0)")
    check(x.argmax(dim=1).tolist() == [2, 2], "x.argmax(dim=1)")
    check(x[1, 2].item() == 6.0 and x[:, 0].tolist() == [1.0, 4.0], "indexing and slicing")
    check(x[x > 3].tolist() == [4.0, 5.0, 6.0], "boolean mask")
    check(x.t().shape == (3, 2) and x.t()[2, 1].item() == 6.0, "transpose")
    check(torch.cat([x, y]).shape == (4, 3), "torch.cat")
    check(torch.where(x > y, x, y).tolist() == [[6.0, 5.0, 4.0], [4.0, 5.0, 6.0]], "where")
    check(x.exp().log().allclose(x), "exp then log gives x back")


def in_place_and_dtypes() -> None:
    print("in-place updates and dtypes")
    x = torch.ones(4, device="cuda")
    x.mul_(3).add_(1)
    check(x.tolist() == [4.0] * 4, "x.mul_(3).add_(1)")
    x[::2] = 0
    check(x.tolist() == [0.0, 4.0, 0.0, 4.0], "slice assignment")
    halves = x.half()
    ints = x.to(torch.int64)
    check(halves.dtype == torch.float16 and halves.device == x.device, ".half() stays put")
    check(ints.dtype == torch.int64 and ints.sum().item() == 8, ".to(torch.int64)")
    bf16 = torch.ones(2, 2, dtype=torch.bfloat16, device="cuda")
    check(bf16.float().sum().item() == 4.0, "bfloat16 on the device")


def back_to_the_host() -> None:
    print("reading results back on the host")
    x = torch.linspace(0, 1, 5, device="cuda")
    array = x.cpu().numpy()
    check(array.shape == (5,) and abs(float(array[-1]) - 1.0) < 1e-6, ".cpu().numpy()")
    check(x.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0], ".tolist()")
    check(round(x.sum().item(), 6) == 2.5, ".item()")
    check("tensor([" in str(x), "printing works")
    check(torch.from_numpy(array).cuda().equal(x), "numpy -> .cuda() round trip")


def main() -> int:
    print(f"GPU: {torch.cuda.get_device_name(0)}")
    create()
    arithmetic()
    in_place_and_dtypes()
    back_to_the_host()
    torch.cuda.synchronize()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What happens to CUDA-only features and to ops the device lacks, under torchdevice.

Part 1, CUDA-only features. CUDA graphs, NCCL, the jiterator, ``cudart``, NVML queries
(``torch.cuda.utilization``) and the caching allocator's internals have no counterpart on
an Apple GPU or a CPU. Off CUDA, torchdevice raises
:class:`torchdevice.UnsupportedFeatureError` for each (a ``RuntimeError``, so
``except RuntimeError`` code keeps working) naming the feature and what to use instead —
never a stub returning made-up values. Queries whose honest answer is "no"
(``torch.cuda.nccl.is_available``) answer it, and NVTX ranges are no-ops. On a CUDA host
the real features run and this part says so.

Part 2, the CPU fallback. When the accelerator cannot run an op (MPS lacks several),
torchdevice reruns it on the CPU and moves the result back, with autograd intact; float64,
which MPS lacks, is narrowed to float32 and logged. On a CPU-only host there is no
accelerator, so nothing can fall back; to show the real code path anyway, part 2 runs in
a child process on torchdevice's *simulated accelerator* (``torchdevice.simulated_mps``: a real
PyTorch backend, ``simgpu``, that holds data in CPU memory and has the ops MPS has in the
installed torch, no more: it lacks ``torch.special.ndtri``, for one), which torchdevice treats
as an MPS host. It runs in its own process because
registering a backend with PyTorch is permanent. In the entry-points tier
(``--intercept entry-points``), which sees no op that takes no device, the fallback is
PyTorch's own, ``PYTORCH_ENABLE_MPS_FALLBACK=1`` (torchdevice sets it on macOS; the simulated
device honours it as MPS does), counted in the report from PyTorch's warning.

Run it with::

    python -m torchdevice examples/unsupported_functions.py

It checks every behaviour it shows and exits non-zero if one is wrong.
"""

import os
import subprocess
import sys

import torch

import torchdevice

failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def expect_unsupported(what: str, call) -> None:
    """Call a CUDA-only feature; off CUDA it must raise a clear UnsupportedFeatureError."""
    try:
        call()
    except RuntimeError as error:
        first = str(error).split(". ")[0]
        print(f"    {what}: {type(error).__name__}: {first}.")
        print(f"      instead: {str(error).split('. ', 1)[1]}")
        check(isinstance(error, torchdevice.UnsupportedFeatureError), f"{what} raises clearly")
    else:
        check(torch.version.cuda is not None, f"{what} runs: this host has real CUDA")


def cuda_only_features() -> None:
    print("part 1: CUDA-only features")
    if torch.version.cuda is not None and not torchdevice.is_enabled():
        print("  running natively on CUDA: these features are real here")
    x = torch.ones(8, device="cuda")

    def capture_a_graph() -> None:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            x.mul_(2)
        graph.replay()

    expect_unsupported("torch.cuda.CUDAGraph()", capture_a_graph)
    layer = torch.nn.Linear(8, 8).cuda()
    expect_unsupported(
        "torch.cuda.make_graphed_callables", lambda: torch.cuda.make_graphed_callables(layer, (x,))
    )
    expect_unsupported("torch.cuda.nccl.all_reduce", lambda: torch.cuda.nccl.all_reduce([x]))
    expect_unsupported(
        "torch.cuda.jiterator._create_jit_fn",
        lambda: torch.cuda.jiterator._create_jit_fn(
            "template <typename T> T twice(T x) { return 2 * x; }"
        ),
    )
    expect_unsupported("torch.cuda.cudart()", torch.cuda.cudart)

    print("  what still answers")
    with torch.cuda.nvtx.range("a profiled region"):  # NVTX ranges: no-ops off CUDA
        y = torch.full((8,), 3.0, device="cuda") * 2
    check(y.sum().item() == 48.0, "torch.cuda.nvtx.range() runs the code inside it")
    nccl = torch.cuda.nccl.is_available([x])
    check(nccl == (torch.version.cuda is not None and x.is_cuda), f"nccl.is_available() -> {nccl}")
    capturing = torch.cuda.is_current_stream_capturing()
    check(capturing is False, "is_current_stream_capturing() -> False")


# -- part 2, in a child process -------------------------------------------------------
SIMULATED = "simgpu"


def close(got: list[float], expected: list[float]) -> bool:
    """Compare on the host: under an MPS-like host even ``.cpu()`` goes to the device."""
    pairs = zip(got, expected, strict=True)
    return len(got) == len(expected) and all(abs(a - b) < 1e-5 for a, b in pairs)


def fallback_on_the_simulated_accelerator() -> int:
    """Run CUDA-first code on the simulated accelerator; show fallback and dtype rule."""
    from torchdevice.simulated_mps import register  # noqa: PLC0415 - only in the child

    # Register first: PyTorch must know the device type before torchdevice redirects to it,
    # and its autograd engine sizes its device queues at the first backward pass.
    register(SIMULATED)

    # References on the CPU, before any redirection.
    grid = torch.linspace(0.05, 0.95, 7)
    expected = torch.special.ndtri(grid)
    reference = grid.clone().requires_grad_()
    torch.special.ndtri(reference).pow(2).sum().backward()

    torchdevice.enable(host=torchdevice.Host.simulated(SIMULATED))
    native_fallback = entry_points_tier()
    print(f"  device: {torch.cuda.get_device_name(0)}")
    if native_fallback:
        print("  entry-points tier: ops the device lacks run on PyTorch's own CPU fallback")

    # CUDA-first code from here on.
    x = torch.linspace(0.05, 0.95, 7, device="cuda").requires_grad_()
    print(f"  torch.linspace(..., device='cuda') is on {x.device}")
    check(x.device.type == SIMULATED, "a 'cuda' tensor lands on the accelerator")
    y = torch.special.ndtri(x)  # MPS, so simgpu, has no ndtri kernel: rerun on the CPU
    check(
        y.device == x.device,
        f"torch.special.ndtri, missing on {SIMULATED}, returns on {y.device}",
    )
    check(close(y.tolist(), expected.tolist()), "and matches the CPU result")
    y.pow(2).sum().backward()
    check(
        x.grad is not None and close(x.grad.tolist(), reference.grad.tolist()),
        "gradients flow through the op that fell back",
    )

    double = torch.zeros(3, dtype=torch.float64, device="cuda")
    print(f"  torch.zeros(3, dtype=torch.float64, device='cuda') -> {double.dtype}")
    check(double.dtype == torch.float32, "float64 on an MPS-like device is narrowed to float32")

    # PyTorch's own fallback is fixed when the device registers: no option turns it off.
    expected = (
        "with fallback=False PyTorch's own fallback still runs"
        if native_fallback
        else "with fallback=False the device's own error comes through"
    )
    with torchdevice.redirect(fallback=False):
        try:
            torch.special.ndtri(torch.linspace(0.25, 0.75, 3, device="cuda"))
        except NotImplementedError as error:
            print(f"  with fallback=False: {type(error).__name__}: {str(error).splitlines()[0]}")
            for note in getattr(error, "__notes__", []):
                print(f"    note: {note}")
            check(not native_fallback, expected)
        else:
            check(native_fallback, expected)

    kinds = {(entry.kind, entry.api) for entry in torchdevice.report().entries}
    # The mode names the torch function; PyTorch's warning names the operator.
    fell_back = "aten::special_ndtri.out" if native_fallback else "torch.special_ndtri"
    check(("fallback", fell_back) in kinds, "the fallback is in the migration report")
    check(("dtype", "torch.zeros") in kinds, "the float64 narrowing is in the migration report")
    print("  migration report of the child process:")
    for line in torchdevice.report().to_text().splitlines()[1:]:
        print(f"  {line}")
    torchdevice.disable()
    return 1 if failures else 0


def entry_points_tier() -> bool:
    """Whether this run uses the entry-points tier (``--intercept`` exports the variable)."""
    return os.environ.get("TORCHDEVICE_INTERCEPT") == "entry-points"


def run_fallback_child() -> None:
    print("part 2: the CPU fallback, on the simulated accelerator (in a child process)")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS")
    }
    if entry_points_tier():
        env.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")  # as torchdevice sets it on macOS
    sys.stdout.flush()
    child = subprocess.run([sys.executable, __file__, "--simulated"], env=env, check=False)
    check(child.returncode == 0, "the fallback demonstration passed its checks")


def main() -> int:
    if "--simulated" in sys.argv:
        return fallback_on_the_simulated_accelerator()
    if not torch.cuda.is_available():
        sys.exit("This script requires a CUDA GPU.")
    cuda_only_features()
    run_fallback_child()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

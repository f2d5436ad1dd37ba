"""A DDP rank that ends while gloo's worker still has the last backward's work to drop.

Run as one rank (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK=0``, ``WORLD_SIZE=1``):
``late_gloo_drop.py BACKEND DEVICE`` (``nccl cuda`` as CUDA-first code writes it, ``gloo
cpu`` natively). For every backward pass torch stashes a ``contextvars.Context`` in the
thread-local state (``torch.autograd.graph._engine_run_backward``); DDP's bucket all-reduce
copies that state into its gloo work, and the worker thread drops the work after
``backward()`` has returned. The script trains until a backward returns with the work not
dropped yet (the Context still has a reference besides the script's), then ends at once,
holding the GIL (a long switch interval) so that the worker must wait for it. An object
whose ``__del__`` sleeps lets go of the GIL while the interpreter finalizes: a worker that
takes it then ends inside a ``noexcept`` destructor, and the process aborts ("terminate
called without an active exception"), as a rank on a busy machine sometimes does. The
process keeps to one CPU and its gloo workers run at the lowest priority (Linux), as on a
busy machine, so that the worker is soon late.
"""

import contextvars
import os
import sys
import time

import torch
import torch.autograd.graph as autograd_graph
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

MAX_STEPS = 3000


class HoldFinalization:
    """Sleeps (the GIL released) when the interpreter clears ``sys`` at finalization."""

    def __del__(self, sleep=time.sleep) -> None:
        sleep(1.0)


class ContextsMade:
    """``contextvars`` for torch's autograd module, noting each Context it copies."""

    def __init__(self) -> None:
        self.made = []

    def __getattr__(self, name):
        return getattr(contextvars, name)

    def copy_context(self):
        context = contextvars.copy_context()
        self.made.append(context)
        return context


def slow_workers() -> None:
    """One CPU for the whole process, the lowest priority for gloo's worker threads."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as comm:
            if comm.read().strip() == "pt_gloo_runloop":
                os.setpriority(os.PRIO_PROCESS, int(tid), 19)


def main() -> None:
    backend, device = sys.argv[1], sys.argv[2]
    contexts = ContextsMade()
    autograd_graph.contextvars = contexts
    sys.setswitchinterval(60.0)  # the main thread keeps the GIL unless it blocks
    dist.init_process_group(backend)
    slow_workers()
    model = DDP(torch.nn.Linear(4, 1).to(device))
    for _ in range(MAX_STEPS):
        contexts.made.clear()
        model(torch.ones(2, 4, device=device)).sum().backward()
        context = contexts.made.pop()
        # Ours (the local, getrefcount's argument) and the work's, not dropped yet.
        if sys.getrefcount(context) > 2:
            break
    else:
        print(f"the worker was never late in {MAX_STEPS} steps", flush=True)
        return
    # Nothing more that lets go of the GIL (printing would): the worker waits for it.
    sys.modules["sys"].hold_finalization = HoldFinalization()


if __name__ == "__main__":
    main()

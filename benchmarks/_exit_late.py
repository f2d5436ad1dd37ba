"""The end of a rank, for ``exit_abort_gdb.sh``: what issue 19's abort needs, in order.

A barrier queued (as CUDA-first code writes it: ``init_process_group("nccl")``) while a
function mode is on the stack, the stack's entry rebuilt by a Python-level torch
function, a pause, the end; an object of ``sys`` whose ``__del__`` sleeps holds the
interpreter's finalization for 8 s. The gdb script holds the gloo worker at the two
moments a loaded machine can: after the work ran, and on its way into the GIL.
"""

import sys
import time

import torch
import torch.distributed as dist


class HoldFinalization:
    def __del__(self, sleep=time.sleep, err=sys.__stderr__) -> None:
        print("main: finalizing, holding 8 s", file=err, flush=True)
        sleep(8)


sys._hold_finalization = HoldFinalization()  # type: ignore[attr-defined]
dist.init_process_group("nccl")
torch.nn.functional.relu(torch.ones(1, device="cuda"))
dist.barrier()
torch.nn.functional.relu(torch.ones(1, device="cuda"))  # the stack's entry is rebuilt
time.sleep(1.0)
print("main: script done", file=sys.__stderr__, flush=True)

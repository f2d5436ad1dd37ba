"""gdb script: which Python objects gloo's worker threads release (each one takes the GIL).

A gloo worker that takes the GIL while the main thread finalizes the interpreter aborts the
process ("terminate called without an active exception"). This lists every time a
``pt_gloo_runloop`` thread releases a Python object, with the object's type and what held
it (the work's tensors, or its copy of the thread-local state), and when the main thread
enters ``Py_FinalizeEx``. ``GIL_TAKER_HOLD_US`` (microseconds) holds the worker there
before it goes on, as a loaded machine can; a hold that outlasts the rest of the run shows
whether the exit waits for it. Both ranks under gdb, as torchrun starts them:

    python -m torch.distributed.run --standalone --nproc_per_node=2 --no-python \\
        gdb -q -batch -x benchmarks/_gil_takers.gdb.py \\
        --args python -m torchdevice --no-report benchmarks/_exit_ddp.py --written-for cuda OUT
"""

import os
import time

import gdb  # type: ignore[import-not-found]

HOLD_US = int(os.environ.get("GIL_TAKER_HOLD_US", "0"))
DECREF = "'torch::detail::(anonymous namespace)::ConcretePyInterpreterVTable::decref'"

gdb.execute("set pagination off")
gdb.execute("set print thread-events off")
gdb.execute("handle SIGPIPE nostop noprint")
gdb.execute("catch load libtorch_python")
gdb.execute("catch signal SIGABRT")
gdb.execute("run")


def type_name(address: int) -> str:
    """``Py_TYPE(obj)->tp_name`` read from memory (the worker does not hold the GIL)."""
    kind = int(gdb.parse_and_eval(f"*(long*)({address}+8)"))
    return gdb.parse_and_eval(f"*(char**)({kind}+24)").string()


def holder() -> str:
    """What the released object belonged to, from the worker's stack."""
    frame = gdb.selected_frame()
    for _ in range(6):
        frame = frame.older()
        if frame is None:
            break
        name = str(frame.name())
        if "ThreadLocalState" in name:
            return "the work's thread-local state"
        if "vector" in name:
            return "the work's tensors"
    return "?"


started = time.monotonic()
placed = False
while True:
    try:
        thread = gdb.selected_thread()
        frame = gdb.selected_frame()
    except gdb.error:  # the process has exited
        break
    if thread is None:
        break
    name = str(frame.name())
    at = f"{time.monotonic() - started:6.2f}s"
    if not placed:  # libtorch_python is loaded: the breakpoints can be placed
        placed = True
        gdb.execute("delete 1")
        gdb.Breakpoint(DECREF).condition = "$_thread != 1"
        gdb.Breakpoint("Py_FinalizeEx")
    elif "decref" in name:
        if thread.name == "pt_gloo_runloop":
            released = type_name(int(gdb.parse_and_eval("$rsi")))
            print(f"=== {at} gloo worker {thread.num} releases a {released} ({holder()})")
            if HOLD_US:
                try:
                    gdb.execute(f"call (int)usleep({HOLD_US})")
                except gdb.error:  # another thread stopped meanwhile: handle that stop
                    continue
    elif name == "Py_FinalizeEx":
        print(f"=== {at} main thread: Py_FinalizeEx")
    else:
        print(f"=== {at} stop in thread {thread.num}: {name}")
        gdb.execute("bt 30")
        break
    gdb.execute("continue")

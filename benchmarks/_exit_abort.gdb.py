"""gdb script of ``exit_abort_gdb.sh``: holds the gloo worker where a loaded machine can.

It stops on three things: the gloo worker right after a work ran (held 0.3 s, so that the
main thread drops its reference first and the worker releases the work last); a non-main
thread entering ``gil_scoped_acquire`` (held 3 s, so that the interpreter is finalizing
when it asks for the GIL); ``PyThread_exit_thread`` and SIGABRT (their stacks printed).
"""

import gdb  # type: ignore[import-not-found]

RETURN_FROM_EXECUTE = "'c10d::ProcessGroupGloo::runLoop(int)'+451"  # torch 2.13.0+cpu

gdb.execute("set pagination off")
gdb.execute("set print thread-events off")
gdb.execute("handle SIGPIPE nostop noprint")
gdb.execute("set breakpoint pending on")
gdb.execute("catch load libtorch_cpu")
gdb.execute("catch signal SIGABRT")
gdb.execute("run")
after_execute = None
while True:
    try:
        thread = gdb.selected_thread()
        frame = gdb.selected_frame()
    except gdb.error:  # the process has exited
        break
    if thread is None:
        break
    name = str(frame.name())
    if after_execute is None:  # libtorch_cpu is loaded: the breakpoints can be placed
        gdb.execute("delete 1")
        after_execute = gdb.Breakpoint(f"*({RETURN_FROM_EXECUTE})")
        gil = gdb.Breakpoint("pybind11::gil_scoped_acquire::gil_scoped_acquire")
        gil.condition = "$_thread != 1"
        gdb.Breakpoint("PyThread_exit_thread")
    elif frame.pc() == int(gdb.parse_and_eval(f"(long)({RETURN_FROM_EXECUTE})")):
        print(f"=== worker {thread.num}: work executed; held 0.3 s before it releases it")
        gdb.execute("call (int)usleep(300000)")
    elif "gil_scoped_acquire" in name:
        print(f"=== worker {thread.num}: takes the GIL to release a Python object; held 3 s")
        gdb.execute("bt 8")
        gdb.execute("call (int)usleep(3000000)")
    elif name == "PyThread_exit_thread":
        print(f"=== worker {thread.num}: PyThread_exit_thread (the interpreter is finalizing)")
        gdb.execute("bt 14")
    else:
        print(f"=== stop in thread {thread.num}: {name}")
        gdb.execute("bt 30")
        break
    gdb.execute("continue")

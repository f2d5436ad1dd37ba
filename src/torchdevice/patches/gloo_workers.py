"""gloo's worker threads at exit: wait until none of them can still take the GIL.

A gloo work holds the tensors it was given and a copy of the calling thread's thread-local
state, and the worker thread that ran it drops it after the caller has been told the work is
done: the worker's drop is often the last reference. Two kinds of last reference make the
worker take the GIL: a tensor that has a Python object (torch hands the object's reference
back when the tensor's C++ count falls to one, after the count has fallen) and a Python
object in the thread-local state. torch itself puts one there for every backward pass
(``torch.autograd.graph._engine_run_backward`` stashes a ``contextvars.Context``), and the
bucket all-reduces that DDP queues during backward copy it: natively, a DDP step often leaves
a worker to take the GIL just after ``backward()`` returns. If the main thread has begun to
finalize the interpreter by then, taking the GIL ends the worker thread inside a ``noexcept``
destructor and the process aborts ("terminate called without an active exception", exit
134). It is PyTorch's own race; ``tests/scripts/late_gloo_drop.py`` makes it happen on every
run, natively and under torchdevice alike, and a busy machine makes it happen at random.

:func:`wait_until_idle` closes it for redirected runs: the distributed patch's exit handler
calls it before the interpreter finalizes. With the GIL released it waits, bounded, until
every gloo worker thread of the process sleeps and has not run at all across a pause in
which the GIL was free (a worker waiting for the GIL is woken when it is released, and takes
it then), read from ``/proc/self/task`` (Linux). Elsewhere, or with a torch whose workers
carry no name, it pauses once with the GIL released.
"""

from __future__ import annotations

import os
import time

__all__ = ["PAUSE_S", "wait_until_idle", "workers"]

#: The name (``comm``) torch gives gloo's worker threads.
_NAME = "pt_gloo_runloop"
#: How long the GIL is left free between two readings of the workers.
PAUSE_S = 0.01
#: What a worker's reading holds: its state letter and its two context-switch counts.
Reading = tuple[str, int, int]


def workers() -> dict[int, Reading] | None:
    """The gloo worker threads of this process, by thread id, each with its state and
    context-switch counts; ``None`` where ``/proc/self/task`` cannot be read."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    found: dict[int, Reading] = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/status", encoding="ascii") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except (OSError, ValueError):  # the thread ended meanwhile
            continue
        if fields.get("Name", "").strip() != _NAME:
            continue
        found[int(tid)] = (
            fields.get("State", "?").split()[0],
            int(fields.get("voluntary_ctxt_switches", "0")),
            int(fields.get("nonvoluntary_ctxt_switches", "0")),
        )
    return found


def wait_until_idle(timeout_s: float) -> bool:
    """Release the GIL until no gloo worker of this process can still want it (see the
    module docstring), at most ``timeout_s``; whether they were seen idle.

    Idle: every worker asleep (state ``S``) in two readings :data:`PAUSE_S` apart, with
    the same context-switch counts, so none ran while the GIL was free. A worker that is
    runnable, or ran in the pause, is read again after another pause.
    """
    before = workers()
    if not before:  # none, unnamed, or no way to look: one pause for what is in flight
        time.sleep(PAUSE_S)
        return before is not None
    deadline = time.monotonic() + timeout_s
    while True:
        time.sleep(PAUSE_S)  # the GIL is free: a worker waiting for it takes it now
        after = workers()
        if after == before and all(state == "S" for state, _, _ in (after or {}).values()):
            return True
        if time.monotonic() >= deadline:
            return False
        before = after

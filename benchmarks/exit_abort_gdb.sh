#!/bin/bash
# Issue 19's abort on demand, with its native stack: rank 0 of a 2-rank gloo run under gdb.
#
#   PYTHONPATH=src bash benchmarks/exit_abort_gdb.sh
#
# benchmarks/_exit_late.py (env activation) queues a barrier, rebuilds the mode stack's
# entry and ends; gdb (benchmarks/_exit_abort.gdb.py) holds the gloo worker 0.3 s after the
# work ran (so that it releases the work last) and 3 s on its way into the GIL (so that the
# interpreter is finalizing by then), as a loaded machine can. Before the fix of issue 19:
# "terminate called without an active exception" and the stack of the abort; after it: the
# worker never takes the GIL and the rank exits normally. Prints rank 0's gdb log.
set -u
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python}
out=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 \
    OMP_NUM_THREADS=1 ACTIVATE_TORCH_DEVICE=1
RANK=1 LOCAL_RANK=1 "$python" "$here/_exit_late.py" > "$out/rank1.log" 2>&1 &
RANK=0 LOCAL_RANK=0 timeout 300 gdb -q -batch -x "$here/_exit_abort.gdb.py" \
    --args "$python" "$here/_exit_late.py" > "$out/rank0.gdb.log" 2>&1
wait
grep -v '^\[\|^warning\|auto-load\|Inferior loaded\|^    /' "$out/rank0.gdb.log"
rm -rf "$out"

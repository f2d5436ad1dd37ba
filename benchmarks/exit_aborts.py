"""Count how often a finished torchrun rank fails to exit cleanly (issue 19), per launch form.

Each run launches the 2-rank DDP script ``_exit_ddp.py`` under torchrun in a fresh
directory and classifies the ending: ``ok`` (every process exit 0), ``abort`` (a rank died
of SIGABRT, "terminate called without an active exception") or ``fail`` (anything else,
the output's tail is printed). The forms:

======== ==================================================================================
env      ``ACTIVATE_TORCH_DEVICE=1 torchrun --standalone --nproc_per_node=2 SCRIPT``
launcher ``python -m torchdevice -m torch.distributed.run --standalone ... SCRIPT``
module   ``torchrun --standalone --nproc_per_node=2 -m torchdevice --no-report SCRIPT``
nodes    two torchrun "nodes" (``--nnodes 2``, c10d rendezvous on 127.0.0.1), env activation
native   the script written for gloo, no torchdevice (the baseline)
nullmode ``native`` with a do-nothing ``TorchFunctionMode`` pushed at start-up
======== ==================================================================================

The rate is only meaningful on a loaded machine (the abort is a shutdown race): run it
beside other work, or with ``--load N`` busy processes of its own. With ``--cores DIR``
each rank may dump core (``RLIMIT_CORE`` unlimited; the kernel's ``core_pattern`` decides
the file name, ``core`` in the rank's working directory by default) and the directory of
every aborted run is kept there for ``gdb``.

    python benchmarks/exit_aborts.py --forms env,native --runs 50 --jobs 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "_exit_ddp.py"
NULL_MODE = HERE / "_null_mode.py"
TORCHRUN = ("-m", "torch.distributed.run")
STANDALONE = ("--standalone", "--nproc_per_node=2")
ABORT_TEXT = "terminate called without an active exception"
FORMS = ("env", "launcher", "module", "nodes", "native", "nullmode")


@dataclass(frozen=True)
class Outcome:
    form: str
    ending: str  # "ok", "abort" or "fail"
    seconds: float
    tail: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launches(form: str, out: Path) -> tuple[list[list[str]], dict[str, str]]:
    """The command lines of one run of ``form`` (all started at once) and its extra env."""
    py = sys.executable
    cuda = [str(SCRIPT), "--written-for", "cuda", str(out)]
    cpu = [str(SCRIPT), "--written-for", "cpu", str(out)]
    activate = {"ACTIVATE_TORCH_DEVICE": "1"}
    if form == "env":
        return [[py, *TORCHRUN, *STANDALONE, *cuda]], activate
    if form == "launcher":
        return [[py, "-m", "torchdevice", *TORCHRUN, *STANDALONE, *cuda]], {}
    if form == "module":
        return [[py, *TORCHRUN, *STANDALONE, "-m", "torchdevice", "--no-report", *cuda]], {}
    if form == "nodes":
        port = _free_port()
        return [
            [
                py,
                *TORCHRUN,
                "--nnodes",
                "2",
                "--node_rank",
                str(node),
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--nproc_per_node",
                "1",
                *cuda,
            ]
            for node in (0, 1)
        ], activate
    if form == "native":
        return [[py, *TORCHRUN, *STANDALONE, *cpu]], {}
    if form == "nullmode":
        return [[py, *TORCHRUN, *STANDALONE, str(NULL_MODE), *cpu]], {}
    raise ValueError(f"unknown form {form!r}; one of {', '.join(FORMS)}")


def _allow_cores() -> None:
    """Let this process and the ranks it starts (they inherit the limit) dump core."""
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


class _Starver(threading.Thread):
    """Renices the gloo worker threads (``pt_gloo_runloop``) of a run's processes to 19.

    With the ranks pinned to one CPU beside a busy process (``--starve``), a gloo worker
    then gets a sliver of the CPU: the moment between a collective finishing and its
    worker releasing the work, the window of issue 19, grows from microseconds to many
    milliseconds, as on a heavily loaded machine.
    """

    def __init__(self, processes: list[subprocess.Popen[str]]) -> None:
        super().__init__(daemon=True)
        self.processes = processes
        self.stopped = threading.Event()
        self.done: set[int] = set()

    def run(self) -> None:
        while not self.stopped.wait(0.02):
            for root in self.processes:
                try:
                    family = [psutil.Process(root.pid), *psutil.Process(root.pid).children(True)]
                except psutil.Error:
                    continue
                for process in family:
                    self._renice(process.pid)

    def _renice(self, pid: int) -> None:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return
        for tid in map(int, tids):
            if tid in self.done:
                continue
            try:
                name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                if name.startswith("pt_gloo_runloop"):
                    os.setpriority(os.PRIO_PROCESS, tid, 19)
                    self.done.add(tid)
            except OSError:
                continue


def run_once(form: str, cores: Path | None, timeout: float, starve: bool = False) -> Outcome:
    """One launch of ``form`` in a directory of its own, removed unless it aborted."""
    work = Path(tempfile.mkdtemp(prefix=f"exit-{form}-"))
    out = work / "out"
    out.mkdir()
    (work / "tmp").mkdir()
    commands, extra = launches(form, out)
    env = {k: v for k, v in os.environ.items() if k != "ACTIVATE_TORCH_DEVICE"}
    env.update(TMPDIR=str(work / "tmp"), **extra)
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            command,
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for command in commands
    ]
    starver = _Starver(processes) if starve else None
    if starver is not None:
        for process in processes:
            os.sched_setaffinity(process.pid, {0})  # torchrun's workers inherit it
        starver.start()
    outputs = []
    try:
        for process in processes:
            try:
                outputs.append(process.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                outputs.append("timed out")
    finally:
        if starver is not None:
            starver.stopped.set()
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    seconds = time.perf_counter() - started
    text = "\n".join(outputs)
    codes = [p.returncode for p in processes]
    if all(code == 0 for code in codes):
        ending = "ok"
    elif ABORT_TEXT in text or "SIGABRT" in text:
        ending = "abort"
    else:
        ending = "fail"
    if ending == "abort" and cores is not None:
        cores.mkdir(parents=True, exist_ok=True)
        kept = cores / work.name
        shutil.move(str(work), kept)
        (kept / "output.txt").write_text(text)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return Outcome(form, ending, seconds, "" if ending == "ok" else text[-3000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forms", default="env,launcher,module,nodes,native,nullmode")
    parser.add_argument("--runs", type=int, default=20, help="runs per form")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--load", type=int, default=0, help="busy processes to start")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument(
        "--starve",
        action="store_true",
        help="pin the ranks to CPU 0 beside a busy process and renice their "
        "gloo worker threads to 19 (widens the race)",
    )
    parser.add_argument("--cores", type=Path, help="keep aborted runs (and core files) here")
    parser.add_argument("--json", type=Path, help="write the counts here")
    parser.add_argument("--quiet", action="store_true", help="no line per run")
    args = parser.parse_args(argv)
    forms = [form.strip() for form in args.forms.split(",") if form.strip()]
    for form in forms:
        launches(form, Path("."))  # rejects an unknown form before anything starts
    if args.cores is not None:
        _allow_cores()
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    if args.starve:
        busy = "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"
        load.append(subprocess.Popen([sys.executable, "-c", busy]))
    counts: dict[str, Counter[str]] = {form: Counter() for form in forms}
    seconds: dict[str, float] = dict.fromkeys(forms, 0.0)
    # Interleaved, so that every form sees the same load over time.
    order = [form for _ in range(args.runs) for form in forms]
    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = pool.map(
                lambda form: run_once(form, args.cores, args.timeout, args.starve), order
            )
            for outcome in outcomes:
                counts[outcome.form][outcome.ending] += 1
                seconds[outcome.form] += outcome.seconds
                if not args.quiet:
                    done = sum(counts[outcome.form].values())
                    print(
                        f"{outcome.form:9} #{done:<4} {outcome.ending:6} {outcome.seconds:6.1f}s",
                        flush=True,
                    )
                if outcome.ending != "ok":
                    print(outcome.tail, flush=True)
    finally:
        for process in load:
            process.kill()
            process.wait()
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    print("| form | runs | ok | abort | fail | abort rate | s/run |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    results = {}
    for form in forms:
        c = counts[form]
        runs = sum(c.values())
        rate = c["abort"] / runs if runs else 0.0
        results[form] = {"runs": runs, "ok": c["ok"], "abort": c["abort"], "fail": c["fail"]}
        print(
            f"| {form} | {runs} | {c['ok']} | {c['abort']} | {c['fail']} | {rate:.1%} | "
            f"{seconds[form] / max(runs, 1):.1f} |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

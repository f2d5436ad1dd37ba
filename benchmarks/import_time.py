"""What ``import torchdevice`` adds to ``import torch``, measured in fresh interpreters.

Usage::

    python benchmarks/import_time.py [--quick] [--repeats N] [--json PATH] [--check]

Two kinds of fresh subprocess run alternately (A, B, A, B, ...), ``--repeats`` times each:

* ``torch``: ``import torch``;
* ``torch+torchdevice``: ``import torch; import torchdevice``.

Each child times its own imports with ``time.perf_counter`` (and, through ``gc.callbacks``,
the garbage collections that run during ``import torchdevice``) and prints them; the parent
also times the whole child (interpreter start-up included). The target reads the cost of
``import torchdevice`` after ``import torch`` inside the child (median over repeats): it is
what torchdevice adds, without the start-up noise of two separate processes. The difference
of the wall-clock medians is printed beside it as a cross-check. One more child runs with
``python -X importtime`` (GC off after torch) to show where the time goes: the self times of
the modules torchdevice loads that torch did not, summed per package.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGET_MS = 50.0

_CHILD = """
import gc
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
gc_s, gc_start = 0.0, 0.0
def on_gc(phase, info):
    global gc_s, gc_start
    if phase == "start":
        gc_start = time.perf_counter()
    else:
        gc_s += time.perf_counter() - gc_start
gc.callbacks.append(on_gc)
{extra}
t2 = time.perf_counter()
gc.callbacks.remove(on_gc)
print(f"{{t1 - t0:.6f}} {{t2 - t1:.6f}} {{gc_s:.6f}}")
"""

VARIANTS = {
    "torch": "",
    "torch+torchdevice": "import torchdevice",
}


def _env() -> dict[str, str]:
    """The environment without the variables that switch torchdevice on at import."""
    env = dict(os.environ)
    for name in ("ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"):
        env.pop(name, None)
    return env


Sample = tuple[float, float, float, float]


def run_child(extra: str) -> Sample:
    """(wall, ``import torch``, the extra import, GC during it) in s, of a fresh interpreter."""
    code = _CHILD.format(extra=extra)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True
    )
    wall = time.perf_counter() - start
    torch_s, extra_s, gc_s = (float(x) for x in done.stdout.split())
    return wall, torch_s, extra_s, gc_s


def importtime_breakdown(top: int) -> list[tuple[str, float, int]]:
    """Where ``import torchdevice`` spends its time: (group, self ms, modules), heaviest first.

    Self times (``-X importtime``'s first column) add up; they are summed per torchdevice
    module and per other top-level package (``pydantic``, ``pydantic_core``...).
    """
    # GC off for torchdevice's part: a collection would be charged to whichever module
    # happened to trigger it (see the "of which GC" column instead).
    code = "import gc; import torch; gc.disable(); import torchdevice"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    pattern = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")
    rows = [m.groups() for m in map(pattern.match, done.stderr.splitlines()) if m]
    # Everything after the last line of torch's own import is torchdevice's doing.
    start = max(i for i, (_, name) in enumerate(rows) if name == "torch") + 1
    groups: dict[str, tuple[float, int]] = {}
    for self_us, name in rows[start:]:
        group = name if name.startswith("torchdevice") else name.split(".")[0]
        ms, count = groups.get(group, (0.0, 0))
        groups[group] = (ms + int(self_us) / 1000, count + 1)
    ranked = sorted(groups.items(), key=lambda item: -item[1][0])
    return [(group, ms, count) for group, (ms, count) in ranked[:top]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    parser.add_argument("--repeats", type=int, help="children per variant (default 7)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target fails")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)

    run_child("import torchdevice")  # warm the file cache: the first import reads the disk
    samples: dict[str, list[Sample]] = {name: [] for name in VARIANTS}
    started = time.perf_counter()
    for i in range(repeats):
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            samples[name].append(run_child(VARIANTS[name]))

    def med(name: str, column: int) -> float:
        return statistics.median(s[column] for s in samples[name]) * 1000

    added = med("torch+torchdevice", 2)
    added_gc = med("torch+torchdevice", 3)
    added_no_gc = statistics.median(s[2] - s[3] for s in samples["torch+torchdevice"]) * 1000
    wall_delta = med("torch+torchdevice", 0) - med("torch", 0)
    passed = added <= TARGET_MS
    breakdown = importtime_breakdown(12)
    elapsed = time.perf_counter() - started

    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPU(s), "
        f"{repeats} fresh interpreters per variant, interleaved\n"
    )
    print(
        "| variant | wall ms (median) | `import torch` ms | `import torchdevice` ms "
        "| of which GC ms |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, statement in VARIANTS.items():
        extra = f"{med(name, 2):.1f} | {med(name, 3):.1f}" if statement else "- | -"
        print(f"| {name} | {med(name, 0):.1f} | {med(name, 1):.1f} | {extra} |")
    print(
        f"\n`import torchdevice` without the garbage collections it happened to trigger: "
        f"{added_no_gc:.1f} ms (a collection of torch's objects that falls due during the "
        "import; without torchdevice it comes at the program's next allocations instead)"
    )
    print(f"\nwall-clock difference of medians (cross-check, noisy): {wall_delta:+.1f} ms")
    if breakdown:
        print(
            "\nwhere `import torchdevice` spends its time (python -X importtime, one run, GC "
            "off;\nself times summed per torchdevice module / per other top-level package):\n"
        )
        print("| module or package | self ms | modules |")
        print("|---|---:|---:|")
        for group, self_ms, count in breakdown:
            print(f"| {group} | {self_ms:.1f} | {count} |")
    print("\n| target | measured | limit | result |\n|---|---:|---:|---|")
    verdict = "PASS" if passed else "FAIL"
    label = f"import torchdevice after import torch <= {TARGET_MS:.0f} ms"
    print(f"| {label} | {added:.1f} ms | {TARGET_MS:.0f} ms | {verdict} |")
    print(f"\nmeasured in {elapsed:.1f} s")
    print(f"{verdict}: {label}: {added:.1f} ms")

    if args.json:
        out: dict[str, Any] = {
            "meta": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "repeats": repeats,
                "seconds": elapsed,
            },
            "variants": {
                name: {
                    "wall_ms": med(name, 0),
                    "import_torch_ms": med(name, 1),
                    "extra_import_ms": med(name, 2) if statement else None,
                    "samples_s": samples[name],
                }
                for name, statement in VARIANTS.items()
            },
            "wall_delta_ms": wall_delta,
            "import_torchdevice_gc_ms": added_gc,
            "import_torchdevice_without_gc_ms": added_no_gc,
            "breakdown": [{"group": g, "self_ms": ms, "modules": n} for g, ms, n in breakdown],
            "target": {"label": label, "measured_ms": added, "limit_ms": TARGET_MS},
            "passed": passed,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.check and not passed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

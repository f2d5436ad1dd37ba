#!/usr/bin/env bash
# All benchmarks on a CUDA host, in one command, within about 7 minutes (16 cores, one H100).
#
#   PYTHONPATH=src bash benchmarks/gpu.sh        # from the repository root
#
# Every step writes $OUT/NAME.json and $OUT/NAME.log ($OUT defaults to /tmp/gpubench). A step
# that fails or runs out of time is reported and the next one runs. The whole run keeps to
# BUDGET_S seconds (default 420): a step gets min(its own cap, what is left), and is skipped
# when less than 20 s is left. A summary table of every JSON comes last.
# On the GPU the native side is the CUDA-first code run natively, the redirected side the same
# code under torchdevice (cuda -> cuda): every ratio is torchdevice's overhead there.
set -u

OUT="${OUT:-/tmp/gpubench}"
PYTHON="${PYTHON:-python}"
BUDGET_S="${BUDGET_S:-420}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 2
start=$SECONDS
results=()

# step NAME CAP_SECONDS SCRIPT ARGS...: run one benchmark with --json, tee its log.
step() {
    local name=$1 cap=$2
    shift 2
    local left=$((BUDGET_S - (SECONDS - start)))
    local limit=$((cap < left ? cap : left))
    if ((limit < 20)); then
        echo "=== $name: SKIPPED (only ${left} s of the ${BUDGET_S} s budget left)"
        results+=("$name|skipped|0")
        return
    fi
    echo "=== $name (timeout ${limit} s): $PYTHON $*"
    local begun=$SECONDS
    timeout --kill-after=10 "$limit" "$PYTHON" "$@" --json "$OUT/$name.json" 2>&1 |
        tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    local status=ok
    if ((rc == 124 || rc == 137)); then
        status="TIMEOUT after ${limit} s"
    elif ((rc != 0)); then
        status="FAILED rc=$rc"
    fi
    echo "=== $name: $status ($((SECONDS - begun)) s)"
    results+=("$name|$status|$((SECONDS - begun))")
}

"$PYTHON" -c 'import torch, torchdevice; print("torch", torch.__version__, "cuda",
torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.is_available() and
torch.cuda.get_device_name(), "torchdevice", torchdevice.__file__)' 2>&1 | tee "$OUT/env.log"

step overhead 45 benchmarks/overhead.py --quick
for size in small large; do
    for mode in default reduce-overhead; do
        step "compiled-$size-$mode" 60 benchmarks/compiled.py --quick --rounds 21 \
            --device cuda --size "$size" --mode "$mode"
    done
done
step workloads 100 benchmarks/workloads.py --quick --device cuda \
    --only train-eager generate dataloader memory ddp
step workloads-compiled 150 benchmarks/workloads.py --quick --device cuda --only train-compiled

echo
echo "=== steps ($((SECONDS - start)) s in all)"
for row in "${results[@]}"; do
    IFS='|' read -r name status secs <<<"$row"
    printf '%-34s %-24s %4s s\n' "$name" "$status" "$secs"
done
echo
"$PYTHON" - "$OUT" <<'EOF'
"""Summary: one line per ratio found in the JSON files of this run."""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
print("| file | what | ratio (median) | do-nothing mode / native | result |")
print("|---|---|---:|---:|---|")
for path in sorted(out.glob("*.json")):
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        print(f"| {path.stem} | unreadable: {error} | | | |")
        continue
    if "cases" in data:  # overhead.py
        for t in data["targets"]:
            print(f"| {path.stem} | {t['label']} | {t['measured']:.3f} | | {t['verdict']} |")
    elif "variants" in data:  # compiled.py
        td = data["variants"]["torchdevice"]
        noop = data["variants"]["Noop mode"]["ratio_vs_native"]["median"]
        r = td["ratio_vs_native"]
        ci = "-".join(f"{x:.3f}" for x in r["ci95"])
        entries = ", ".join(f"{k} {v:g}" for k, v in td["mode_entries_per_forward"].items())
        native_ms = data["variants"]["native"]["ms_per_forward"]["median"]
        what = (
            f"compiled torchdevice / native ({native_ms:.3f} ms native; CI {ci}; "
            f"mode entries/forward: {entries or 0}; recompiled {data['recompiled_during_timing']})"
        )
        verdict = "PASS" if data["passed"] else "FAIL"
        print(f"| {path.stem} | {what} | {r['median']:.3f} | {noop:.3f} | {verdict} |")
    elif "workloads" in data:  # workloads.py
        for name, s in data["workloads"].items():
            noop = "-" if s["noop_ratio"] is None else f"{s['noop_ratio']:.3f}"
            what = f"{name} ({s['native']:.4g} vs {s['redirected']:.4g} {s['unit']})"
            verdict = "PASS" if s["passed"] else "FAIL"
            print(f"| {path.stem} | {what} | {s['ratio']:.3f} | {noop} | {verdict} |")
        for name, reason in data.get("skipped", {}).items():
            print(f"| {path.stem} | {name}: skipped: {reason} | | | - |")
        for name, message in data.get("errors", {}).items():
            print(f"| {path.stem} | {name}: error: ...{' '.join(message.split())[-200:]} | | | ERROR |")
EOF

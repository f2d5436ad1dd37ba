"""``torchdevice port`` round trip: run redirected, port, ``git apply``, run natively.

Each example (a copy, in a temporary git repository) runs once redirected to write its
JSON report, is ported from that report, patched with ``git apply``, and then runs
natively on this CPU host with torchdevice switched off and never imported. The scripts
whose every line has a device-agnostic form pass their own checks; the others stop at a
line the patch marked with a ``# torchdevice port:`` comment saying why, and nowhere else.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchdevice.report import MigrationReport
from torchdevice.tools.port import MARK, port_report

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PASSES = "all checks pass"

#: A CUDA-first script of the test's own: a guard, one device, .cuda(non_blocking=...),
#: autocast and GradScaler, seeds, synchronize, a checkpoint and a one-rank NCCL group.
CUDA_FIRST = """\
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

if not torch.cuda.is_available():
    sys.exit("needs CUDA")

device = torch.device("cuda:0")


def main() -> int:
    torch.cuda.manual_seed_all(0)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
        model = nn.Linear(4, 1).cuda()
        scaler = torch.cuda.amp.GradScaler()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(64, 4).cuda(non_blocking=True)
        y = x.sum(dim=1, keepdim=True)
        losses = []
        for _ in range(30):
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        dist.all_reduce(flat)
        torch.cuda.synchronize()
        torch.save(model.state_dict(), Path(tmp) / "m.pt")
        state = torch.load(Path(tmp) / "m.pt", map_location="cuda")
        dist.destroy_process_group()
    same = all(v.device == next(model.parameters()).device for v in state.values())
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} on {device}, checkpoint on the device: {same}")
    return 0 if losses[-1] < losses[0] and same else 1


if __name__ == "__main__":
    sys.exit(main())
"""

#: script -> (arguments, what the native run of the ported copy does: PASSES, or the error
#: it stops with and the comment the port left above that line, in the same function).
CASES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "cuda_first.py": ((), PASSES, ""),
    "basic_tensors.py": ((), PASSES, ""),
    "train_cuda.py": (("--epochs", "4", "--min-accuracy", "0.0"), PASSES, ""),
    "neural_network.py": (("--epochs", "2"), PASSES, ""),
    "matrix_multiplication.py": (
        ("--size", "64"),
        "cpu backend doesn't support events",
        "torch.Event has no CPU backend",
    ),
    "device_info.py": (
        (),
        "Cannot access accelerator device when none is available",
        "torch.accelerator.current_device_index() raises on a host without an accelerator",
    ),
    "events_streams_memory.py": (
        ("--steps", "10"),
        "Torch not compiled with CUDA enabled",
        "torch.cuda.get_device_properties(): device properties",
    ),
}

#: Runs the script as __main__ and fails if anything imported torchdevice.
NATIVE = """\
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
    code = 0
except SystemExit as exc:
    code = exc.code
finally:
    if "torchdevice" in sys.modules:
        print("NATIVE RUN IMPORTED TORCHDEVICE", file=sys.stderr)
        code = 3
sys.exit(code)
"""


def _native_env() -> dict[str, str]:
    """os.environ without anything that switches torchdevice on, nor its source on the path.

    One intra-op thread: these models are tiny, and on a loaded 2-core runner torch's
    spinning thread pool makes them many times slower.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS", "PYTHONPATH"}
        and not name.startswith("TORCHDEVICE_")
    }
    return {**env, "OMP_NUM_THREADS": "1"}


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )


def _failing_line(stderr: str, script: Path) -> int:
    """The line of ``script`` where the native run's traceback ends."""
    marker = f'File "{script}", line '
    lines = [line for line in stderr.splitlines() if marker in line]
    assert lines, stderr
    return int(lines[-1].split(marker)[1].split(",")[0])


def _comments_before(source: str, line: int) -> list[str]:
    """The ``# torchdevice port:`` comments above ``line`` in the function that holds it."""
    functions = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef)
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    first = max(node.lineno for node in functions) if functions else 1
    lines = source.splitlines()[first - 1 : line - 1]
    return [text.strip() for text in lines if text.strip().startswith(MARK)]


@pytest.mark.parametrize("name", list(CASES))
def test_a_ported_script_runs_natively(name: str, tmp_path: Path) -> None:
    arguments, outcome, comment = CASES[name]
    repo = tmp_path / "repo"
    repo.mkdir()
    script = repo / name
    if name == "cuda_first.py":
        script.write_text(CUDA_FIRST, encoding="utf-8")
    else:
        shutil.copy(EXAMPLES / name, script)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    python = [sys.executable, *(["-X", "dev"] if sys.flags.dev_mode else [])]

    # 1. Redirected, for the report (the native environment, plus the path to this tree).
    env = {**_native_env(), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    report_path = tmp_path / "report.json"
    command = [*python, "-m", "torchdevice", "run", "--report", str(report_path)]
    redirected = _run([*command, str(script), *arguments], repo, env)
    assert report_path.exists(), redirected.stderr
    report = MigrationReport.from_dict(json.loads(report_path.read_text(encoding="utf-8")))

    # 2. Ported, and patched with git apply.
    result = port_report(report, repo)
    assert [file.path for file in result.files] == [name]
    assert all(why.startswith("not yours (") for _, why in result.skipped), result.skipped
    applied = subprocess.run(
        ["git", "apply", "-"], cwd=repo, input=result.patch, text=True, capture_output=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr + result.patch
    ported = script.read_text(encoding="utf-8")
    assert ported == result.files[0].new

    # 3. Natively: no torchdevice, and the script's own checks.
    native = _run([*python, "-c", NATIVE, str(script), *arguments], repo, _native_env())
    output = f"patch:\n{result.patch}\nstdout:\n{native.stdout}\nstderr:\n{native.stderr}"
    assert "NATIVE RUN IMPORTED TORCHDEVICE" not in native.stderr, output
    if outcome == PASSES:
        assert native.returncode == 0, output
        assert "[FAIL]" not in native.stdout, output
    else:  # it stops where the patch said it would, and only there
        assert native.returncode == 1, output
        assert outcome in native.stderr, output
        comments = _comments_before(ported, _failing_line(native.stderr, script))
        assert any(comment in text for text in comments), f"{comments}\n{output}"

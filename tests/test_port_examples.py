"""``torchdevice port`` round trip: run redirected, port, ``git apply``, run natively.

Each example, and each CUDA-first script of tests/port_scripts (one or more per rewrite:
memory statistics, events, streams, threads, DataLoader workers, checkpoints, autocast,
GradScaler, distributed), is copied into a temporary git repository, runs once redirected
to write its JSON report, is ported from that report, patched with ``git apply``, and then
runs natively on this CPU host as ``python SCRIPT``, with torchdevice switched off and a
``torchdevice`` that fails on import first on the path. The scripts whose every line has a
device-agnostic form pass their own checks; a check that reads a value the CPU has no
counterpart for is named; the others stop at a line the patch marked with a
``# torchdevice port:`` comment saying why, and nowhere else.
"""

from __future__ import annotations

import ast
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from childenv import clean_env
from torchdevice.port import MARK, patch_for
from torchdevice.port.advice import advise
from torchdevice.port.calls import port_source, ported_call
from torchdevice.port.source import unwrapped
from torchdevice.reporting import MigrationReport
from torchdevice.sites import origin

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PASSES = "all checks pass"
#: The outcome of a script that runs to its end but fails the check named after it, and
#: only that one: a check of a value the CPU has no counterpart for, which the ported code
#: reads as a neutral value (0 bytes of accelerator memory).
NEUTRAL = "only this check fails: "

#: CUDA-first scripts of the test's own, one or more per rewrite (tests/port_scripts/).
SCRIPTS = Path(__file__).resolve().parent / "port_scripts"

#: script -> (arguments, what the native run of the ported copy does: PASSES, or the error
#: it stops with and the comment the port left above that line, in the same function).
CASES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "train_amp.py": ((), PASSES, ""),
    "memory_stats.py": ((), PASSES, ""),
    "events_streams.py": ((), PASSES, ""),
    "devices_seeds.py": ((), PASSES, ""),
    "distributed_amp.py": ((), PASSES, ""),
    "basic_tensors.py": ((), PASSES, ""),
    "train_cuda.py": (("--epochs", "4", "--min-accuracy", "0.0"), PASSES, ""),
    "neural_network.py": (("--epochs", "2"), PASSES, ""),
    "matrix_multiplication.py": (("--size", "64"), PASSES, ""),
    "hf_generate.py": ((), NEUTRAL + "torch.cuda.max_memory_allocated() answers", ""),
    # Device properties have no device-agnostic form: these two read them first thing.
    "device_info.py": (
        (),
        "Torch not compiled with CUDA enabled",
        "torch.cuda.get_device_properties(): device properties",
    ),
    "events_streams_memory.py": (
        ("--steps", "10"),
        "Torch not compiled with CUDA enabled",
        "torch.cuda.get_device_properties(): device properties",
    ),
}

#: Examples not in CASES, and why: a test fails when an example is neither.
NOT_PORTED = {
    "unsupported_functions.py": "it shows torchdevice's own behaviour (it imports torchdevice)",
}


#: Scripts of the kinds people write (issue 28): a CUDA training loop, a CUDA inference
#: script, an MPS-first script (the example), and the device-choice idiom in its CUDA and
#: MPS forms. Each is ported from its redirected run and runs natively twice, on this CPU
#: host and with a non-CUDA accelerator present (the simulated one, torchdevice not
#: enabled): each run prints the same ``RESULT`` line as the redirected run.
ROUND_TRIPS = ("cuda_training_loop.py", "cuda_inference.py", "device_choices.py", "mps_first.py")


def test_every_example_is_ported_or_says_why_not() -> None:
    examples = {path.name for path in EXAMPLES.glob("*.py")}
    ported = set(CASES) | set(ROUND_TRIPS)
    assert examples == (examples & ported) | set(NOT_PORTED)
    assert {path.name for path in SCRIPTS.glob("*.py")} <= ported
    assert not set(CASES) & set(ROUND_TRIPS)


#: A ``torchdevice`` package that fails on import: first on the native run's path, so the
#: ported code can be shown not to need torchdevice whatever PYTHONPATH holds.
POISON = 'raise ImportError("NATIVE RUN IMPORTED TORCHDEVICE")\n'


def _native_env(poison: Path) -> dict[str, str]:
    """os.environ without anything that switches torchdevice on, and a poisoned
    ``torchdevice`` ahead of the caller's PYTHONPATH (the source tree is still on it).

    One intra-op thread: these models are tiny, and on a loaded 2-core runner torch's
    spinning thread pool makes them many times slower.
    """
    env = clean_env()
    (poison / "torchdevice").mkdir(parents=True, exist_ok=True)
    (poison / "torchdevice" / "__init__.py").write_text(POISON, encoding="utf-8")
    path = os.pathsep.join(p for p in (str(poison), os.environ.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )


def _apply(repo: Path, patch: str) -> None:
    """``git apply`` the patch in ``repo``, as a user does: no hand edit."""
    applied = subprocess.run(
        ["git", "apply", "-"],
        cwd=repo,
        input=patch,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr + patch


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
    if name == "hf_generate.py":
        pytest.importorskip("transformers")
    repo = tmp_path / "repo"
    repo.mkdir()
    script = repo / name
    shutil.copy(SCRIPTS / name if (SCRIPTS / name).exists() else EXAMPLES / name, script)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    python = [sys.executable, *(["-X", "dev"] if sys.flags.dev_mode else [])]

    # 1. Redirected, for the report (the native environment, plus the path to this tree).
    env = {
        name: value
        for name, value in _native_env(tmp_path / "poison").items()
        if name != "PYTHONPATH"
    }
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    report_path = tmp_path / "report.json"
    command = [*python, "-m", "torchdevice", "run", "--report", str(report_path)]
    redirected = _run([*command, str(script), *arguments], repo, env)
    assert report_path.exists(), redirected.stderr
    report = MigrationReport.from_dict(json.loads(report_path.read_text(encoding="utf-8")))

    # 2. Ported, and patched with git apply.
    result = patch_for(report.entries, repo)
    assert [file.path for file in result.files] == [name]
    assert all(why.startswith("not yours (") for _, why in result.skipped), result.skipped
    _apply(repo, result.patch)
    ported = script.read_text(encoding="utf-8")
    assert ported == result.files[0].new

    # 3. Natively: no torchdevice, and the script's own checks.
    # Plain `python script.py`, as a user runs it, with torchdevice unimportable.
    native = _run([*python, str(script), *arguments], repo, _native_env(tmp_path / "poison"))
    output = f"patch:\n{result.patch}\nstdout:\n{native.stdout}\nstderr:\n{native.stderr}"
    assert "NATIVE RUN IMPORTED TORCHDEVICE" not in native.stderr, output
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(ported))
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(ast.parse(ported))
        if isinstance(node, ast.ImportFrom)
    }
    assert "torchdevice" not in imported, output
    if outcome.startswith(NEUTRAL):
        failed = [line.strip() for line in native.stdout.splitlines() if "[FAIL]" in line]
        assert failed == [f"[FAIL] {outcome.removeprefix(NEUTRAL)}"], output
        assert "Traceback" not in native.stderr, output
    elif outcome == PASSES:
        assert native.returncode == 0, output
        assert "[FAIL]" not in native.stdout, output
    else:  # it stops where the patch said it would, and only there
        assert native.returncode == 1, output
        assert outcome in native.stderr, output
        comments = _comments_before(ported, _failing_line(native.stderr, script))
        assert any(comment in text for text in comments), f"{comments}\n{output}"


#: The ported script, run with the simulated accelerator registered first and torchdevice
#: not enabled (checked after the run): ``torch.accelerator`` answers that device, which is
#: not CUDA, as on a Mac.
ON_SIMULATED = """\
import runpy, sys
import torch
import torchdevice.redirecting.runtime
import torchdevice.testing
torchdevice.testing.register()
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    assert torchdevice.redirecting.runtime.active() is None, "torchdevice was enabled"
    print("accelerator:", torch.accelerator.current_accelerator(check_available=True))
"""


def _result(stdout: str) -> list[float]:
    """The numbers of a run's ``RESULT`` line."""
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT")]
    assert len(lines) == 1, stdout
    return [float(word.split("=")[-1]) for word in lines[0].split()[1:]]


def _same(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(
        math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) for a, b in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_a_ported_script_runs_natively_on_the_cpu_and_beside_another_accelerator(
    name: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    script = repo / name
    shutil.copy(SCRIPTS / name if (SCRIPTS / name).exists() else EXAMPLES / name, script)
    original = script.read_text(encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    python = [sys.executable, *(["-X", "dev"] if sys.flags.dev_mode else [])]
    env = {**clean_env(), "OMP_NUM_THREADS": "1"}

    # 1. Redirected: the report and the result the ported runs must give.
    report_path = tmp_path / "report.json"
    command = [*python, "-m", "torchdevice", "run", "--report", str(report_path), str(script)]
    redirected = _run(command, repo, env)
    assert redirected.returncode == 0, redirected.stdout + redirected.stderr
    want = _result(redirected.stdout)
    raw = json.loads(report_path.read_text(encoding="utf-8"))
    report = MigrationReport.from_dict(raw)

    # 2. Ported from that report, patched with git apply: no hand edit.
    result = patch_for(report.entries, repo)
    _apply(repo, result.patch)
    ported = script.read_text(encoding="utf-8")
    output = f"patch:\n{result.patch}"

    # The report's advice for each of the script's rows is what the patch wrote there,
    # before its long lines were broken at their brackets (which changes no token).
    own = [row for row in raw["entries"] if origin(row["file"]) is None]
    assert own, raw
    mine = [e for e in report.entries if Path(e.site.filename).resolve() == script.resolve()]
    whole, _ = port_source(original, mine, layout=False)
    assert ast.dump(ast.parse(whole)) == ast.dump(ast.parse(ported))
    for entry, row in zip(report.entries, raw["entries"], strict=True):
        if row not in own:
            continue
        assert row["advice"] == advise(original, entry), row
        code, notes = ported_call(original, entry) or (None, ())
        if code:
            assert " ".join(code.split()) in " ".join(whole.split()), (row, output)
        assert all(note in unwrapped(ported) for note in notes), (row, output)  # wrapped

    # 3. Natively on this CPU host, torchdevice unimportable.
    native = _run([*python, str(script)], repo, _native_env(tmp_path / "poison"))
    said = f"{output}\nstdout:\n{native.stdout}\nstderr:\n{native.stderr}"
    assert native.returncode == 0, said
    assert _same(_result(native.stdout), want), (want, said)

    # 4. Natively beside a non-CUDA accelerator: the simulated one, torchdevice not enabled,
    # as a user checks it: `torchdevice run --native --host simulated-mps` (docs/port.md).
    command = [*python, "-m", "torchdevice", "run", "--native", "--host", "simulated-mps"]
    beside = _run([*command, str(script)], repo, env)
    said = f"{output}\nstdout:\n{beside.stdout}\nstderr:\n{beside.stderr}"
    assert beside.returncode == 0, said
    assert beside.stderr.splitlines()[0] == (
        "torchdevice: off (--native), running natively, beside simulated-mps (device type "
        "'simgpu', as torch.accelerator reports it)"
    ), said
    assert "torchdevice migration report" not in beside.stderr, said
    assert _same(_result(beside.stdout), want), (want, said)
    # The same through a registration of the device by hand, and where torch.accelerator
    # says the run was.
    by_hand = _run([*python, "-c", ON_SIMULATED, str(script)], repo, env)
    said = f"{output}\nstdout:\n{by_hand.stdout}\nstderr:\n{by_hand.stderr}"
    assert by_hand.returncode == 0, said
    assert by_hand.stdout.splitlines()[-1] == "accelerator: simgpu", said
    assert _same(_result(by_hand.stdout), want), (want, said)

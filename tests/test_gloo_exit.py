"""A rank that ends while gloo's worker still has work to drop exits cleanly (issue 19's
last path, PyTorch's own race).

``tests/scripts/late_gloo_drop.py`` is one DDP rank that ends just after a backward whose
bucket all-reduce the gloo worker has not dropped yet; the work holds the ``Context``
torch stashes for every backward, and the worker takes the GIL to drop it while the
interpreter finalizes: natively the process aborts ("terminate called without an active
exception"). Redirected, in each launch form and tier, the exit handler of
:mod:`torchdevice.patches.gloo_workers` waits for the worker first. Each run is a child
process; no retry.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from childenv import clean_env
from launches import free_port

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the script pins its threads (Linux)"),
    pytest.mark.usefixtures("tier"),  # both tiers (conftest.py)
]

SCRIPT = Path(__file__).parent / "scripts" / "late_gloo_drop.py"
ABORT = "terminate called without an active exception"
#: Native runs tried before the race counts as not reproduced here: the worker is late in
#: most runs, not all (the script reads it from the Context's references).
NATIVE_TRIES = 3


def _rank(tmp_path: Path, prefix: list[str], args: list[str], **extra: str) -> tuple[int, str]:
    """One rank of a world of one: its exit status and output."""
    env = clean_env(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        **extra,
    )
    done = subprocess.run(
        [sys.executable, *prefix, str(SCRIPT), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def native_aborts(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The control: the same script written for gloo, run natively, aborts at exit."""
    tmp_path = tmp_path_factory.mktemp("native")
    endings = []
    for _ in range(NATIVE_TRIES):
        status, output = _rank(tmp_path, [], ["gloo", "cpu"])
        if status == -6 and ABORT in output:
            return output
        endings.append((status, output[-300:]))
    pytest.skip(f"the race does not show natively here in {NATIVE_TRIES} runs: {endings}")


@pytest.mark.parametrize(
    ("prefix", "extra"),
    [
        pytest.param(["-m", "torchdevice", "--no-report"], {}, id="launcher"),
        pytest.param([], {"ACTIVATE_TORCH_DEVICE": "1"}, id="env"),
    ],
)
@pytest.mark.parametrize("tier", ["mode", "entry-points"], indirect=True)
def test_a_rank_waits_for_gloos_worker_before_finalizing(
    tmp_path: Path, native_aborts: str, prefix: list[str], extra: dict[str, str]
) -> None:
    """As written for NCCL and CUDA, redirected: exit status 0, no abort."""
    status, output = _rank(tmp_path, prefix, ["nccl", "cuda"], **extra)
    assert "never late" not in output, output
    assert status == 0, output
    assert ABORT not in output
    assert "redirecting to cpu" in output

"""The NCCL DDP script of ``tests/scripts`` under torchrun, 2 ranks, as users launch it.

Each launch is ``python -m torch.distributed.run`` in a subprocess of its own session
(``tests/launches.py``). The ranks must end with identical parameters equal
to one process training on the full batch (natively, in this process), and a falling loss.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from launches import free_port as _free_port
from launches import run as _run

pytestmark = pytest.mark.usefixtures("tier")  # both tiers (conftest.py)

SCRIPTS = Path(__file__).parent / "scripts"
DDP_SCRIPT = SCRIPTS / "ddp_nccl.py"
ON_SIMGPU = SCRIPTS / "on_simgpu.py"
#: Each launch form runs once (CI time), strict: every run must exit 0. A rank that aborted
#: at interpreter exit did so in 2 of 35 loaded runs when issue 19 was filed. Its three paths
#: are closed at their root (docs/limitations.md): work queued off the mode stack, tensors
#: held until gloo's worker lets go, and an exit handler that waits until no gloo worker
#: can still take the GIL (PyTorch's own race: the Context torch stashes for each backward
#: rides in DDP's bucket all-reduce). tests/test_gloo_exit.py makes that race happen on
#: demand; benchmarks/exit_aborts.py is the loaded measurement.
REPEATS = range(1)
#: (tier, attempt) of each launch form: the repeats in the default tier, one run in the
#: entry-points tier (its exit path is the mode's, less the mode: CI time kept in check).
TIERED_REPEATS = pytest.mark.parametrize(
    ("tier", "attempt"),
    [*(("mode", attempt) for attempt in REPEATS), ("entry-points", 0)],
    indirect=["tier"],
)


def _script_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ddp_nccl_reference", DDP_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference() -> tuple[list[torch.Tensor], list[float]]:
    """Parameters and losses of one native process training on the whole batch."""
    params, losses = _script_module().reference()
    return params, losses


def _line_of(code: str) -> int:
    """The line of the DDP script where ``code`` stands (where the log must point)."""
    lines = DDP_SCRIPT.read_text().splitlines()
    return next(number for number, text in enumerate(lines, 1) if code in text)


def _check_ranks(out: Path, reference: tuple[list[torch.Tensor], list[float]], device: str) -> None:
    params, losses = reference
    ranks: list[dict[str, Any]] = [torch.load(out / f"rank{r}.pt") for r in (0, 1)]
    for rank in ranks:
        assert rank["backend"] == "gloo"
        assert rank["device"] == device
        got = [torch.tensor(p) for p in rank["params"]]
        for mine, theirs, expected in zip(
            got, [torch.tensor(p) for p in ranks[0]["params"]], params, strict=True
        ):
            assert torch.equal(mine, theirs)  # identical on every rank
            torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-5)
        assert rank["losses"] == ranks[0]["losses"]
        torch.testing.assert_close(rank["losses"], losses, rtol=1e-5, atol=1e-5)
        assert all(b < a for a, b in zip(rank["losses"], rank["losses"][1:], strict=False))


@TIERED_REPEATS
def test_torchrun_standalone_cpu(tmp_path: Path, reference: Any, attempt: int) -> None:
    """``ACTIVATE_TORCH_DEVICE=1 torchrun --standalone --nproc_per_node=2``: NCCL on gloo."""
    out = tmp_path / "out"
    out.mkdir()
    log = _run(
        [["--standalone", "--nproc_per_node=2", str(DDP_SCRIPT), str(out)]],
        tmp_path,
        {"ACTIVATE_TORCH_DEVICE": "1"},
    )
    _check_ranks(out, reference, "cpu")
    line = _line_of('dist.init_process_group(backend="nccl")')
    assert (
        f"ddp_nccl.py:{line} in main(): torch.distributed.init_process_group(nccl) -> gloo" in log
    )
    assert "DistributedDataParallel(device_ids=[1]) -> device_ids=None" in log


@TIERED_REPEATS
def test_torchrun_under_the_launcher_one_report(
    tmp_path: Path, reference: Any, attempt: int
) -> None:
    """``python -m torchdevice -m torch.distributed.run ...``: the script unmodified, and
    one migration report for the launcher and both ranks."""
    out = tmp_path / "out"
    out.mkdir()
    log = _run(
        [["--standalone", "--nproc_per_node=2", str(DDP_SCRIPT), str(out)]],
        tmp_path,
        {},
        prefix=("-m", "torchdevice", "-m", "torch.distributed.run"),
    )
    _check_ranks(out, reference, "cpu")
    headers = [line for line in log.splitlines() if "torchdevice migration report" in line]
    assert len(headers) == 1, log  # the ranks' parts are merged into the launcher's
    assert headers[0].endswith("in 3 processes (ranks 0, 1)"), headers[0]
    line = _line_of('dist.init_process_group(backend="nccl")')
    assert f"ddp_nccl.py:{line} in main(): torch.distributed.init_process_group(nccl)" in log


@TIERED_REPEATS
def test_torchdevice_as_torchruns_module(tmp_path: Path, reference: Any, attempt: int) -> None:
    """``torchrun ... -m torchdevice train.py``: each worker is launched redirected."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "torchdevice",
        "--no-report",
        str(DDP_SCRIPT),
        str(out),
    ]
    _run([argv], tmp_path, {})
    _check_ranks(out, reference, "cpu")


@TIERED_REPEATS
def test_torchrun_two_nodes_cpu(tmp_path: Path, reference: Any, attempt: int) -> None:
    """Two launchers, ``--nnodes 2`` with c10d rendezvous on 127.0.0.1, one rank each."""
    out = tmp_path / "out"
    out.mkdir()
    port = _free_port()
    launches = [
        [
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
            str(DDP_SCRIPT),
            str(out),
        ]
        for node in (0, 1)
    ]
    _run(launches, tmp_path, {"ACTIVATE_TORCH_DEVICE": "1"})
    _check_ranks(out, reference, "cpu")


def test_torchrun_simulated_accelerator(tmp_path: Path, reference: Any) -> None:
    """On the MPS stand-in, which gloo cannot take: DDP's collectives stage through CPU."""
    out = tmp_path / "out"
    out.mkdir()
    log = _run(
        [["--standalone", "--nproc_per_node=2", str(ON_SIMGPU), str(DDP_SCRIPT), str(out)]],
        tmp_path,
        {},
    )
    _check_ranks(out, reference, "simgpu:0")
    assert "init_process_group(nccl) -> gloo (NCCL needs CUDA; mps host: gloo)" in log
    assert "DistributedDataParallel(simgpu) -> cpu (gloo takes no device tensors" in log


def test_torchrun_simulated_collectives(tmp_path: Path) -> None:
    """all_reduce, broadcast, all_gather(_into_tensor), reduce_scatter(_tensor), barrier,
    async work and object collectives across 2 ranks, on the simulated accelerator."""
    out = tmp_path / "out"
    out.mkdir()
    script = SCRIPTS / "collectives.py"
    log = _run(
        [["--standalone", "--nproc_per_node=2", str(ON_SIMGPU), str(script), str(out)]],
        tmp_path,
        {},
    )
    for rank in (0, 1):
        assert (out / f"collectives{rank}.txt").read_text() == "simgpu:0"
    assert "torch.distributed.all_reduce(simgpu) -> cpu (gloo takes no device tensors" in log

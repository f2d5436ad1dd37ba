"""``accelerate launch --multi_gpu --num_processes 2`` of a script written for GPUs, on
this CPU host and on the simulated MPS host.

Accelerate sees CUDA, picks ``MULTI_GPU`` and NCCL (resolved to gloo), and gathers with
NCCL's flat ``all_gather_into_tensor`` (``tests/scripts/accelerate_multi_gpu.py``). Both
ranks must end with the parameters of one process training on both ranks' first batches,
and the gathered values of a 2-D tensor and of ``gather_for_metrics``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from launches import run

pytest.importorskip("accelerate")
pytestmark = pytest.mark.usefixtures("tier")  # both tiers (conftest.py)

SCRIPT = Path(__file__).parent / "scripts" / "accelerate_multi_gpu.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("accelerate_multi_gpu_reference", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference() -> list[torch.Tensor]:
    """One SGD step of one process on the 4 samples of both ranks' first batches."""
    script = _script()
    model = script.build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = script.data()[: 2 * script.BATCH]
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()
    return [p.detach() for p in model.parameters()]


@pytest.mark.parametrize(
    ("host", "device"), [("cpu", "cpu"), ("mps", "simgpu:0")], ids=["cpu", "simulated-mps"]
)
def test_accelerate_launch_multi_gpu_two_processes(tmp_path: Path, host: str, device: str) -> None:
    """With ``ACTIVATE_TORCH_DEVICE=1`` on both hosts, as a user switches a launched run on;
    ``TORCHDEVICE_HOST=simulated-mps`` for the simulated one (DDP's and the gathers'
    collectives staged through host memory)."""
    out = tmp_path / "out"
    out.mkdir()
    env = {"HF_HOME": str(tmp_path / "hf"), "ACTIVATE_TORCH_DEVICE": "1"}  # no user config
    if host == "mps":
        env["TORCHDEVICE_HOST"] = "simulated-mps"
    script = [str(SCRIPT)]
    argv = [
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        *script,
        str(out),
    ]
    log = run([argv], tmp_path, env, prefix=("-m", "accelerate.commands.launch"))
    assert f"init_process_group(nccl) -> gloo (NCCL needs CUDA; {host} host: gloo)" in log
    ranks: list[dict[str, Any]] = [
        json.loads((out / f"accelerate{rank}.json").read_text()) for rank in (0, 1)
    ]
    expected = _reference()
    for rank in ranks:
        assert rank["distributed_type"] == "DistributedType.MULTI_GPU"
        assert rank["num_processes"] == 2
        assert rank["backend"] == "gloo"
        # The device object reads as Accelerate wrote it (docs/policy.md, device objects:
        # each rank sees one device, as torchrun's ranks do with one GPU each); the
        # tensors it places are where "cuda" requests land.
        assert (rank["device"], rank["tensor_device"]) == ("cuda:0", device)
        assert rank["gathered_shape"] == [4, 3]
        assert rank["gathered"] == [[0.0] * 3, [0.0] * 3, [1.0] * 3, [1.0] * 3]
        assert rank["seen"] == [[0.0, 1.0, 2.0, 3.0], [4.0]]  # the repeated sample dropped
        for got, want in zip(rank["params"], expected, strict=True):
            torch.testing.assert_close(torch.tensor(got), want)
    assert ranks[0]["params"] == ranks[1]["params"]


@pytest.mark.slow
@pytest.mark.parametrize("host", ["cpu", "simulated-mps"])
def test_accelerates_own_test_script_under_launch_multi_gpu(tmp_path: Path, host: str) -> None:
    """Accelerate's own ``test_script.py`` (RNG synchronisation across ranks, dataloader
    sharding, training parity, mixed precision checks) under ``accelerate launch
    --multi_gpu``, switched on with ``ACTIVATE_TORCH_DEVICE=1``: it synchronises the device
    generators' states through the device and back with ``.cpu()`` ("RNG state must be a
    torch.ByteTensor" on the simulated host before generators took host states there)."""
    from accelerate.test_utils.scripts import test_script

    env = {"HF_HOME": str(tmp_path / "hf"), "ACTIVATE_TORCH_DEVICE": "1"}
    if host != "cpu":
        env["TORCHDEVICE_HOST"] = host
    argv = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    argv += ["--mixed_precision", "no", "--dynamo_backend", "no", str(test_script.__file__)]
    log = run([argv], tmp_path, env, prefix=("-m", "accelerate.commands.launch"))
    assert "All rng are properly synched." in log
    assert "Training yielded the same results on one CPU or distributed setup" in log


#: The device tensors really land on, per host: what ``ACCELERATE_TORCH_DEVICE`` names for
#: code that compares Accelerate's device with its tensors' (docs/huggingface.md).
REAL_DEVICES = {"cpu": "cpu", "simulated-mps": "simgpu"}


@pytest.mark.slow
@pytest.mark.parametrize("host", ["cpu", "simulated-mps"])
def test_accelerates_op_checker_with_its_device_named(tmp_path: Path, host: str) -> None:
    """Accelerate's own ``test_ops.py`` under ``accelerate launch --multi_gpu``: its
    debug-mode op checker compares ``PartialState().device.type`` with the tensors'
    (``"cuda"`` against where they are: no rule of torchdevice's gives that and fp16 both,
    docs/policy.md). With ``ACCELERATE_TORCH_DEVICE`` naming the real device, as
    docs/huggingface.md tells the user to set, it takes the multi-GPU path (NCCL on gloo)
    and every check passes, the op checker's mismatches included; a native CPU run of the
    same launch (Accelerate's single-process fallback there) passes the same checks."""
    from accelerate.test_utils.scripts import test_ops

    argv = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    argv += ["--mixed_precision", "no", "--dynamo_backend", "no", str(test_ops.__file__)]
    env = {"HF_HOME": str(tmp_path / "hf"), "ACCELERATE_TORCH_DEVICE": "cpu"}
    native = run([argv], tmp_path, env, prefix=("-m", "accelerate.commands.launch"))
    env["ACCELERATE_TORCH_DEVICE"] = REAL_DEVICES[host]
    env["ACTIVATE_TORCH_DEVICE"] = "1"
    if host != "cpu":
        env["TORCHDEVICE_HOST"] = host
    log = run([argv], tmp_path, env, prefix=("-m", "accelerate.commands.launch"))
    assert "Distributed environment: DistributedType.MULTI_GPU  Backend: nccl" in log
    assert f"Device: {REAL_DEVICES[host]}" in log
    # The checks the script announces, read from its source; the two processes' output and
    # the ranks' log lines share one pipe, so a check's line may run on into another
    # process's write (the clean-clone CI run saw one): each check is found as a substring.
    checks = re.findall(r'state\.print\("(testing [^"]+)"\)', Path(test_ops.__file__).read_text())
    assert "testing op_checker" in checks
    assert "testing sending tensors across devices" in checks
    # Redirected, only the main process prints; natively each of the two processes is its
    # own main and prints every check: the same checks, twice.
    assert [check for check in checks if check not in log] == []
    assert log.count("testing ") == len(checks)
    assert [check for check in checks if check not in native] == []
    assert native.count("testing ") == 2 * len(checks)

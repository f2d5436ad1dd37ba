"""Every script in examples/ runs redirected, checks its own results and exits 0.

Each example is CUDA-first code run as a user runs it, ``python -m torchdevice SCRIPT``, in
a child process; the test checks the exit status, the lines the script promises, and that
the migration report points into the script. A script added to examples/ without an entry
here fails :func:`test_every_example_is_tested`. The Hugging Face example is skipped when
``transformers`` is not installed (it is the ``examples`` extra, not a dependency), and so
are the Accelerate checks without ``accelerate``.

By default every example runs in the mode on the CPU host and on the simulated MPS host,
and five of them (``ENTRY_POINTS_SAMPLE`` says which and why) in the entry-points tier on
the CPU host; ``TORCHDEVICE_TEST_EVERY_TIER=1`` runs every example in every tier on both
hosts (docs/tiers.md).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from childenv import clean_env
from torchdevice.host import probe_host
from torchdevice.redirecting.policy import decide

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: The device type a "cuda" request lands on here ("cpu" on a CPU-only host).
CUDA_LANDS_ON = decide("cuda", probe_host()).device.type
REPORT_TITLE = "torchdevice migration report"
ALL_PASSED = "all checks passed"

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed (pip install -e '.[examples]')",
)
needs_accelerate = pytest.mark.skipif(
    importlib.util.find_spec("accelerate") is None,
    reason="accelerate is not installed (pip install -e '.[examples]')",
)

#: Every test here runs in both tiers (conftest.py's ``tier``); on the CPU host an example
#: runs in the entry-points tier only if it is in this sample (``TORCHDEVICE_TEST_EVERY_TIER=1``
#: runs them all). The tier changes only how a device request reaches the policy, and these
#: scripts make every kind of request the others make: factories with ``device=``,
#: ``torch.device``, ``Tensor.cuda``/``to``, ``Module.cuda``/``to``, DataLoader pinning and
#: ``cuda(non_blocking=True)``, a checkpoint saved and reloaded, optimizer state, "mps"
#: strings (mps_first.py), Transformers ``generate``. Left out of the tier by default:
#: device_info.py and events_streams_memory.py (the ``torch.cuda`` facade, one object in both
#: tiers; their factories and ``.cuda()`` are basic_tensors.py's; ``autocast("cuda")`` with a
#: GradScaler runs in the tier in test_frameworks.py's 16-mixed and fp16 tests),
#: matrix_multiplication.py (factories and ``.cuda()``, then ops that take no device, which
#: are native in the tier), unsupported_functions.py (the facade's errors; its float64 rule
#: and CPU fallback differ from the CPU host's only on an MPS host, where the tier is out of
#: the default run anyway). Every example runs in the mode on both hosts.
ENTRY_POINTS_SAMPLE = {
    "script": frozenset(
        {"basic_tensors.py", "train_cuda.py", "neural_network.py", "mps_first.py", "hf_generate.py"}
    )
}
pytestmark = pytest.mark.usefixtures("tier")

#: script -> (arguments, lines its stdout must contain, marks).
EXPECTED: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[pytest.MarkDecorator, ...]]] = {
    "basic_tensors.py": ((), ("creating tensors on the GPU", ALL_PASSED), ()),
    "matrix_multiplication.py": (
        ("--size", "128"),
        ("128x128 float32 matrices on", "[ok] a @ b matches NumPy", ALL_PASSED),
        (),
    ),
    "neural_network.py": ((), ("test accuracy", "[ok] the reloaded model", ALL_PASSED), ()),
    "device_info.py": ((), ("CUDA available: True", "compute capability", ALL_PASSED), ()),
    "unsupported_functions.py": (
        (),
        (
            "torch.cuda.CUDAGraph(): UnsupportedFeatureError: torch.cuda.CUDAGraph is a "
            "CUDA-only feature",
            "[ok] torch.special.ndtri, missing on simgpu, returns on simgpu:0",
            "[ok] float64 on an MPS-like device is narrowed to float32",
            "[ok] the fallback demonstration passed its checks",
            ALL_PASSED,
        ),
        (),
    ),
    "events_streams_memory.py": (("--steps", "20"), ("event timing", ALL_PASSED), ()),
    "train_cuda.py": (
        ("--epochs", "4", "--min-accuracy", "0.0"),
        ("epoch   3", "test accuracy"),
        (),
    ),
    "hf_generate.py": (
        (),
        ("[ok] the first new token is the model's argmax", "[ok] sampling with the", ALL_PASSED),
        (needs_transformers,),
    ),
    "mps_first.py": (
        (),
        ("[ok] the loss at least halved", "[ok] the reloaded checkpoint", "RESULT", ALL_PASSED),
        (),
    ),
}


def _env() -> dict[str, str]:
    """os.environ without anything that switches torchdevice on or configures it, in the
    running test's tier."""
    return clean_env()


def python(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *(["-X", "dev"] if sys.flags.dev_mode else [])]
    return subprocess.run(
        [*command, *map(str, args)],
        cwd=ROOT,
        env={**_env(), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("host", ["probed", "simulated-mps"])
@pytest.mark.parametrize(
    "script",
    [pytest.param(name, marks=marks) for name, (_, _, marks) in EXPECTED.items()],
)
def test_example_runs_redirected(script, host):
    """On the host this machine is, and on the simulated MPS host (a Mac's path)."""
    arguments, promised, _ = EXPECTED[script]
    env = {} if host == "probed" else {"TORCHDEVICE_HOST": host}
    result = python("-m", "torchdevice", EXAMPLES / script, *arguments, **env)
    output = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"

    assert result.returncode == 0, output
    for line in promised:
        assert line in result.stdout, output
    assert "[FAIL]" not in result.stdout, output
    assert REPORT_TITLE in result.stderr, output
    assert f"examples/{script}:" in result.stderr, output  # the report points into it


ACCELERATE = """\
import json, sys
import torch, torchdevice
torchdevice.enable(cuda_available=sys.argv[1] == "true")
from accelerate import Accelerator
from accelerate.utils import is_cuda_available, is_mps_available
accelerator = Accelerator()
print(json.dumps({
    "device": str(accelerator.device),
    "lands_on": torch.zeros(1, device="cuda").device.type,
    "device_lands_on": torch.zeros(1, device=accelerator.device).device.type,
    "distributed_type": str(accelerator.distributed_type),
    "backend": accelerator.state.backend,
    "num_processes": accelerator.num_processes,
    "cuda_available": is_cuda_available(),
    "mps_available": is_mps_available(),
}))
"""


def accelerate_facts(cuda_available: bool, **env: str) -> dict[str, object]:
    script = textwrap.dedent(ACCELERATE)
    command = [sys.executable, "-c", script, "true" if cuda_available else "false"]
    result = subprocess.run(
        command,
        cwd=ROOT,
        env={**_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@needs_accelerate
@pytest.mark.parametrize("cuda_available", [True, False])
def test_accelerator_picks_the_redirected_device(cuda_available):
    """Accelerator()'s device puts tensors where "cuda" tensors land, single-process,
    either setting."""
    facts = accelerate_facts(cuda_available)

    # The device reads as Accelerate wrote it (docs/policy.md, device objects): "cuda"
    # where it took its CUDA branch; "cuda" tensors land on the redirect target.
    assert facts["lands_on"] == facts["device_lands_on"] == CUDA_LANDS_ON
    if CUDA_LANDS_ON == "cpu":
        assert torch_device_type(facts["device"]) == ("cuda" if cuda_available else "cpu")
    assert facts["distributed_type"] == "DistributedType.NO"
    assert facts["num_processes"] == 1
    assert facts["backend"] is None
    if CUDA_LANDS_ON == "cpu":
        # CUDA code hears what a CUDA machine says: CUDA yes, MPS no, so Accelerate takes
        # its CUDA branch, which torchdevice redirects; cuda_available=False hides both.
        assert facts["cuda_available"] is cuda_available
        assert facts["mps_available"] is False


@needs_accelerate
@pytest.mark.skipif(CUDA_LANDS_ON != "cpu", reason="describes a CPU-only host")
def test_accelerator_under_torchrun_without_cuda_takes_no_nccl_path():
    """With cuda_available=False, a torchrun-like environment does not pick NCCL.

    Accelerate then behaves as it does natively on a CPU-only host: it initialises the
    process group with torch's default backend and runs undistributed. (With the default,
    cuda_available=True, it picks NCCL, which a CPU build of torch lacks:
    docs/huggingface.md.)
    """
    with socket.socket() as probe:  # a free port for the single-process rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        "LOCAL_RANK": "0",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    facts = accelerate_facts(False, **env)

    assert facts["device"] == "cpu"
    assert facts["distributed_type"] == "DistributedType.NO"
    assert facts["backend"] is None


def torch_device_type(device: object) -> str:
    return str(device).split(":")[0]

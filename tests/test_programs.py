"""Real programs, on the CPU host and on the simulated MPS host, against native CPU runs.

Each script in ``tests/programs`` is CUDA-first code written the way a public project is
(the table in ``tests/programs/README.md``), imports nothing of torchdevice, and prints its
facts as one JSON line. Each runs redirected on both hosts (``python -m torchdevice`` with
``TORCHDEVICE_HOST``, or under torchrun with ``ACTIVATE_TORCH_DEVICE=1``), and its numbers
are compared with a native CPU run of the same script.

On the CPU host the numbers are the native run's, bit for bit. On the simulated MPS host
they are too, except where an MPS rule applies, and then the native reference applies the
same rule, so the comparison stays exact and the test names the rule:

* **SDPA**: the CPU computes ``scaled_dot_product_attention`` with its fused flash kernel;
  MPS has none for the CPU's path (its own Metal kernel without gradients, PyTorch's math
  decomposition with them), and the simulated device computes the math decomposition. The
  reference runs under ``sdpa_kernel(SDPBackend.MATH)``.
* **float64**: MPS has no float64; a float64 the program puts on the device is float32
  (docs/fallback.md). The reference computes those values in float32.
* **device generators**: a device draws from its own generator, seeded by
  ``torch.manual_seed`` like the CPU's; programs whose draws all happen on one generator
  give the same numbers.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from childenv import clean_env
from launches import run

PROGRAMS = Path(__file__).parent / "programs"
HOSTS = ["cpu", "simulated-mps"]
CPU_HOST = not torch.cuda.is_available() and not torch.backends.mps.is_available()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CPU_HOST, reason="compares with native runs on a CPU-only host"),
]
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)

#: Runs a script as __main__ under SDPA's math backend: the reference for the SDPA rule.
_UNDER_MATH = (
    "import runpy, sys\n"
    "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
    "sys.argv = sys.argv[1:]\n"
    "with sdpa_kernel(SDPBackend.MATH):\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _facts(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    facts: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    facts["stderr"] = result.stderr
    return facts


def _python(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env=clean_env(HF_HUB_OFFLINE="1", **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def redirected(host: str, script: str, *args: str, cwd: Path = PROGRAMS) -> dict[str, Any]:
    """The script run as a user runs it: ``python -m torchdevice``, on ``host``."""
    argv = ["-m", "torchdevice", str(PROGRAMS / script), *args]
    return _facts(_python(argv, cwd, TORCHDEVICE_HOST=host))


@functools.cache
def native(script: str, *args: str, sdpa_math: bool = False) -> dict[str, Any]:
    """The script run natively on the CPU (``sdpa_math``: under SDPA's math backend)."""
    argv = [str(PROGRAMS / script), *args]
    if sdpa_math:
        argv = ["-c", _UNDER_MATH, *argv]
    facts = _facts(_python(argv, PROGRAMS))
    del facts["stderr"]
    return facts


def same(facts: dict[str, Any], reference: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert facts[key] == reference[key], key


@pytest.mark.parametrize("host", HOSTS)
def test_word_language_model_lstm(host):
    """pytorch/examples' word_language_model with ``--cuda``: training losses, validation
    perplexity and sampled words equal the native CPU run on both hosts (on MPS, ``lstm``
    runs MPS's own kernel pair and its dropout draws from the device generator, where
    every other draw of the program happens too)."""
    facts = redirected(host, "word_lm.py", "--cuda")
    same(facts, native("word_lm.py"), "losses", "val_ppl", "words")
    assert "_thnn_fused_lstm_cell" not in facts["stderr"]  # no fallback at every step


@pytest.mark.parametrize("host", HOSTS)
def test_llmc_style_gpt_training_and_sampling(host):
    """llm.c's ``train_gpt2.py`` patterns: CPU-generator init through ``nn.init`` onto
    device tensors, fused AdamW (its CUDA branch), sampling from a device generator. The
    reference takes the same fused branch; on MPS it computes SDPA by the math path."""
    facts = redirected(host, "gpt_llmc.py")
    reference = native("gpt_llmc.py", "--device", "cpu", "--fused", "1", sdpa_math=host != "cpu")
    same(facts, reference, "losses", "sample")
    assert facts["fused"] is True
    assert facts["peak_memory"] is True


@pytest.mark.parametrize("host", HOSTS)
def test_llmc_style_gpt_on_two_ranks(host, tmp_path):
    """llm.c under torchrun: ``torch.cuda.set_device(f"cuda:{rank}")``, NCCL, DDP with
    ``device_ids=[rank]``; every ``cuda:n`` lands on the host's one device."""
    script = str(PROGRAMS / "gpt_llmc.py")
    argv = ["--standalone", "--nproc_per_node=2", script, "--num_iterations", "3"]
    env = {"ACTIVATE_TORCH_DEVICE": "1", "TORCHDEVICE_HOST": host}
    log = run([argv], tmp_path, env)
    facts = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    assert len(facts["losses"]) == 3
    assert all(math.isfinite(loss) for loss in facts["losses"])
    assert len(facts["sample"]) == 17
    assert "Invalid device ordinal" not in log


def _ddp_reference(epochs: int) -> list[list[float]]:
    """What two DDP ranks of ``ddp_snapshot.py`` compute, in one process: each step is SGD on
    the mean gradient of both ranks' batches (DistributedSampler's shards, epoch seeds)."""
    spec = importlib.util.spec_from_file_location("ddp_snapshot", PROGRAMS / "ddp_snapshot.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the classes; main() runs only as __main__
    torch.manual_seed(0)
    dataset = module.MyTrainDataset(256)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    samplers = [
        torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=2, rank=rank)
        for rank in (0, 1)
    ]
    for epoch in range(epochs):
        shards = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
        for start in range(0, len(shards[0]), 32):
            optimizer.zero_grad()
            for shard in shards:
                batch = [dataset[i] for i in shard[start : start + 32]]
                x, y = torch.stack([b[0] for b in batch]), torch.stack([b[1] for b in batch])
                (torch.nn.functional.mse_loss(model(x), y) / 2).backward()
            optimizer.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


@pytest.mark.parametrize("host", HOSTS)
def test_llama2c_style_swiglu_training(host):
    """llama2.c's ``train.py`` patterns: RMSNorm, rotary embeddings, SDPA and a SwiGLU
    feed-forward, fused AdamW on its CUDA branch. ``silu_backward`` is a kernel on MPS (and
    the CPU), not PyTorch's decomposition: every weight equals the native run's (SDPA rule)."""
    facts = redirected(host, "llama_swiglu.py")
    args = ("--device", "cpu", "--fused", "1")
    reference = native("llama_swiglu.py", *args, sdpa_math=host != "cpu")
    same(facts, reference, "losses", "sums")
    assert facts["fused"] is True


@pytest.mark.parametrize("host", HOSTS)
def test_ddp_tutorial_snapshots_resume_on_every_rank(host, tmp_path):
    """pytorch/examples' ddp-tutorial-series: ``torch.cuda.set_device(rank)``,
    ``model.to(rank)``, ``DDP(device_ids=[rank])``, a snapshot loaded with
    ``map_location=f"cuda:{rank}"``. Two epochs, then a second run resumes to four: the
    weights of four uninterrupted epochs of the same algorithm in one process."""
    script = str(PROGRAMS / "ddp_snapshot.py")
    snapshot = str(tmp_path / "snapshot.pt")
    env = {"ACTIVATE_TORCH_DEVICE": "1", "TORCHDEVICE_HOST": host}
    facts = []
    for epochs in ("2", "4"):
        argv = ["--standalone", "--nproc_per_node=2", script, epochs, snapshot]
        log = run([argv], tmp_path, env)
        facts.append(json.loads(next(line for line in log.splitlines() if line.startswith("{"))))
    assert [f["resumed"] for f in facts] == [False, True]
    assert facts[1]["device"] == ("cpu" if host == "cpu" else "simgpu:0")
    expected = _ddp_reference(4)
    torch.testing.assert_close(facts[1]["weights"], expected)


@pytest.mark.parametrize("host", HOSTS)
def test_whisper_style_load_model_and_transcribe(host, tmp_path):
    """whisper's ``load_model(path, device="cuda")`` (``map_location``), a sparse buffer
    moved with the model, a log-mel spectrogram of ``torch.from_numpy`` audio whose window
    goes ``.to(audio.device)``, greedy decoding. Exact against the CPU (SDPA rule on MPS)."""
    checkpoint = str(tmp_path / "model.pt")
    reference = native("speech_decoder.py", checkpoint, "--device", "cpu", sdpa_math=host != "cpu")
    facts = redirected(host, "speech_decoder.py", checkpoint, "--device", "cuda", cwd=tmp_path)
    same(facts, reference, "tokens", "features", "dtype")
    device = "cpu" if host == "cpu" else "simgpu:0"
    assert facts["device"] == device
    assert facts["heads"] == [device, True, reference["heads"][2]]  # still sparse, moved


def test_whisper_style_fp16_decodes_in_float16_on_the_simulated_device(tmp_path):
    """``--fp16`` on a GPU-like device decodes in float16, as whisper does on a Mac."""
    checkpoint = str(tmp_path / "model.pt")
    native("speech_decoder.py", checkpoint, "--device", "cpu")  # writes the checkpoint
    facts = redirected("simulated-mps", "speech_decoder.py", checkpoint, "--fp16", cwd=tmp_path)
    assert (facts["dtype"], facts["device"]) == ("torch.float16", "simgpu:0")
    assert len(facts["tokens"]) == 24


@pytest.mark.parametrize("host", HOSTS)
def test_diffusers_style_pipeline_with_a_cuda_generator(host):
    """``torch.Generator("cuda")`` latents and noise, a float64 NumPy schedule moved to the
    device, SDPA attention. On MPS the schedule is float32 (float64 rule) and SDPA takes the
    math path: with both applied natively, the image is the CPU's bit for bit."""
    facts = redirected(host, "diffusion.py")
    if host == "cpu":
        reference = native("diffusion.py", "--device", "cpu")
    else:
        reference = native(
            "diffusion.py", "--device", "cpu", "--schedule-dtype", "float32", sdpa_math=True
        )
    same(facts, reference, "image")
    assert facts["generator"] == ("cpu" if host == "cpu" else "simgpu:0")


@pytest.mark.parametrize("host", HOSTS)
def test_peft_style_lora_with_bf16_autocast_and_a_grad_scaler(host, tmp_path):
    """autocast to bfloat16 and a GradScaler on the device; the metric accumulated in
    float64 is float32 on MPS (float64 rule), so its mean is the float32 sum's."""
    adapter = tmp_path / "adapter.pt"
    facts = redirected(host, "lora.py", "--save", str(adapter))
    reference = native("lora.py", "--device", "cpu")
    same(facts, reference, "losses", "dtypes", "scale")
    assert facts["dtypes"] == ["torch.bfloat16"]
    if host == "cpu":
        assert (facts["mean_loss"], facts["running_dtype"]) == (
            reference["mean_loss"],
            "torch.float64",
        )
    else:
        running = torch.zeros((), dtype=torch.float32)
        for loss in reference["losses"]:
            running = running + loss
        assert (facts["mean_loss"], facts["running_dtype"]) == (
            running.item() / 6,
            "torch.float32",
        )
    # Saved from the device, as a GPU run saves from its own: loadable with map_location.
    saved = torch.load(adapter, map_location="cpu")
    assert sorted(saved) == ["attn.lora_A.weight", "attn.lora_B.weight"]


@pytest.mark.parametrize("host", HOSTS)
def test_mps_first_lora_script(host):
    """The LoRA script written for a Mac: PyTorch's MPS check passes, ``torch.mps``
    answers from the device (``synchronize``, memory), autocast ``"mps"`` casts."""
    facts = redirected(host, "lora_mps.py")
    reference = native("lora.py", "--device", "cpu")
    same(facts, reference, "losses", "dtypes", "scale")
    assert facts["allocated"] is True


@needs_transformers
@pytest.mark.parametrize("host", HOSTS)
def test_sentence_transformers_style_encode_under_inference_mode_and_train(host):
    """A BERT encoder's ``encode`` under ``torch.inference_mode()``, a contrastive epoch,
    ``encode`` again: exact against the CPU (SDPA rule on MPS)."""
    facts = redirected(host, "embeddings.py")
    reference = native("embeddings.py", "--device", "cpu", sdpa_math=host != "cpu")
    same(facts, reference, "before", "after", "losses")
    assert facts["inference"] is True
    assert facts["device"] == ("cpu" if host == "cpu" else "simgpu:0")


def test_every_program_is_tested():
    scripts = {p.name for p in PROGRAMS.glob("*.py")} - {"lora_model.py"}
    tested = Path(__file__).read_text()
    assert {name for name in scripts if f'"{name}"' not in tested} == set()

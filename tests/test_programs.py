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


def test_hogwild_shared_model_trains_in_place_or_fails_clearly():
    """pytorch/examples' mnist_hogwild with ``--cuda``: ``model.share_memory()``, spawned
    processes train it in place, the parent tests what they trained. On the CPU host shared
    memory carries the children's writes back: the numbers are native's. The MPS host has no
    IPC, so the children would train a copy and the parent test an untrained model (the
    sweep found it silently so: ``trained`` false); sending the shared model raises instead."""
    reference = native("hogwild.py")
    assert reference["trained"] is True
    facts = redirected("cpu", "hogwild.py", "--cuda")
    same(facts, reference, "trained", "test_loss", "correct", "weights")
    assert facts["device"] == "cpu"

    argv = ["-m", "torchdevice", str(PROGRAMS / "hogwild.py"), "--cuda"]
    result = _python(argv, PROGRAMS, TORCHDEVICE_HOST="simulated-mps")
    assert result.returncode != 0
    assert '"trained"' not in result.stdout  # no silent run on an untrained model
    assert (
        "torchdevice.errors.UnsupportedFeatureError: Sharing device memory between processes "
        "(CUDA IPC" in result.stderr
    )
    assert "Hogwild" in result.stderr
    assert "cpu:-1" in result.stderr


@pytest.mark.parametrize("host", HOSTS)
def test_dino_style_metric_logger_takes_the_median_of_numpy_float64_entries(host):
    """DINO's ``SmoothedValue.median``: ``torch.tensor(list(window))`` of a NumPy schedule's
    float64 entries, with no device, lands on the device; MPS has no float64, so the float64
    rule applies to data torch reads as float64 (was: ``TypeError: Cannot convert a ... Tensor
    to float64``). Losses are native's; on MPS the medians are native's in float32."""
    facts = redirected(host, "dino_logger.py")
    reference = native("dino_logger.py", "--device", "cpu")
    same(facts, reference, "losses", "loss_median", "wd_avg", "lr_global_avg")
    if host == "cpu":
        same(facts, reference, "lr_medians")
        assert facts["device"] == "cpu"
    else:
        float32 = torch.tensor(reference["lr_medians"], dtype=torch.float32).tolist()
        assert facts["lr_medians"] == float32
        assert float32 != reference["lr_medians"]  # the rule shows in these numbers
        assert facts["device"] == "simgpu:0"
        assert "MPS has no float64: float32 on the device" in facts["stderr"]


def _report(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(path.read_text())["entries"]
    return rows


def _torchrun_facts(argv: list[str], tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    lines = run([argv], tmp_path, env).splitlines()
    facts: dict[str, Any] = json.loads(next(line for line in lines if line.startswith("{")))
    return facts


def _line_of(script: str, text: str) -> int:
    lines = (PROGRAMS / script).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if line.strip() == text)


@pytest.mark.usefixtures("tier")
@pytest.mark.parametrize("host", HOSTS)
def test_llama_reference_with_a_cuda_half_default_tensor_type(host, tmp_path):
    """Meta's Llama 2 reference under ``torchrun --nproc_per_node 1``:
    ``torch.set_default_tensor_type(torch.cuda.HalfTensor)``, then fairscale-style weights
    from ``torch.Tensor(out, in)`` filled with ``torch.cat(..., out=weight)`` from a master
    weight that a device-less factory made. Both land on the device in float16, as on a GPU;
    the completions and logits are the native CPU run's with ``torch.HalfTensor``. The
    report lists the line, ported to ``set_default_dtype`` + ``set_default_device``."""
    report = tmp_path / "report.json"
    argv = ["--standalone", "--nproc_per_node=1", str(PROGRAMS / "llama_reference.py")]
    env = {"ACTIVATE_TORCH_DEVICE": "1", "TORCHDEVICE_HOST": host}
    facts = _torchrun_facts(argv, tmp_path, {**env, "TORCHDEVICE_REPORT": str(report)})
    reference = _torchrun_facts([*argv, "--device", "cpu"], tmp_path, {})
    same(facts, reference, "completions", "first_logits", "default_dtype")
    device = "cpu" if host == "cpu" else "simgpu:0"
    assert facts["weight"] == ["torch.float16", device]
    assert facts["cache"] == device
    line = _line_of("llama_reference.py", "torch.set_default_tensor_type(torch.cuda.HalfTensor)")
    rows = [row for row in _report(report) if row["line"] == line]
    assert [(row["api"], row["requested"], row["to_change"]) for row in rows] == [
        ("torch.set_default_tensor_type", "cuda", True)
    ]
    assert rows[0]["advice"] == (
        "`torch.set_default_dtype(torch.float16); torch.set_default_device(target_device)`"
    )


@pytest.mark.usefixtures("tier")
@pytest.mark.parametrize("host", HOSTS)
def test_nerf_style_default_tensor_type_by_name_and_adam_steps(host, tmp_path):
    """nerf-pytorch's ``torch.set_default_tensor_type('torch.cuda.FloatTensor')`` by name:
    device-less factories and ``torch.Tensor([1e10])`` make device tensors, so rendering
    mixes no devices; PSNRs equal the native CPU run's with ``'torch.FloatTensor'``. Adam's
    step counters are torch's own CPU requests: on the CPU, as on a GPU, and no line of the
    report (none at ``optimizer.step()``)."""
    report = tmp_path / "report.json"
    facts = _facts(
        _python(
            ["-m", "torchdevice", str(PROGRAMS / "nerf.py")],
            PROGRAMS,
            TORCHDEVICE_HOST=host,
            TORCHDEVICE_REPORT=str(report),
        )
    )
    same(facts, native("nerf.py", "--device", "cpu"), "psnrs", "step")
    assert facts["step"] == ["cpu", 5.0]
    device = "cpu" if host == "cpu" else "simgpu:0"
    assert (facts["pose"], facts["weight"]) == (device, device)
    rows = _report(report)
    assert _line_of("nerf.py", "optimizer.step()") not in {row["line"] for row in rows}
    assert not [row for row in rows if row["requested"].startswith("cpu")]
    line = _line_of("nerf.py", 'torch.set_default_tensor_type("torch.cuda.FloatTensor")')
    (row,) = [row for row in rows if row["line"] == line]
    assert row["api"] == "torch.set_default_tensor_type"
    assert row["advice"] == (
        "`torch.set_default_dtype(torch.float32); torch.set_default_device(target_device)`"
    )


@pytest.mark.usefixtures("tier")
@pytest.mark.parametrize("host", HOSTS)
def test_llama2c_training_with_a_disabled_grad_scaler(host):
    """llama2.c's ``train.py`` in float32: ``torch.cuda.amp.GradScaler(enabled=False)``,
    whose ``unscale_`` (before clipping) returns at once as torch's does, autocast
    ``"cuda"`` in float32, AdamW fused on CUDA. The losses are the native CPU run's with
    fused AdamW (SDPA rule on MPS)."""
    facts = redirected(host, "llama2c_train.py", "--dtype=float32")
    reference = native(
        "llama2c_train.py", "--device=cpu", "--dtype=float32", "--fused=1", sdpa_math=host != "cpu"
    )
    same(facts, reference, "losses")
    assert (facts["scaler"], facts["finite"]) == (False, True)
    assert facts["device"] == ("cpu" if host == "cpu" else "simgpu:0")


@pytest.mark.usefixtures("tier")
@pytest.mark.parametrize("host", HOSTS)
def test_llama2c_training_under_torchrun(host, tmp_path):
    """llama2.c under torchrun (one rank): NCCL, ``torch.cuda.set_device(f"cuda:{rank}")``,
    DDP, the disabled GradScaler. One rank's DDP step is the single process's step: the
    losses are the native CPU run's."""
    script = str(PROGRAMS / "llama2c_train.py")
    argv = ["--standalone", "--nproc_per_node=1", script, "--dtype=float32"]
    env = {"ACTIVATE_TORCH_DEVICE": "1", "TORCHDEVICE_HOST": host}
    facts = _torchrun_facts(argv, tmp_path, env)
    reference = native(
        "llama2c_train.py", "--device=cpu", "--dtype=float32", "--fused=1", sdpa_math=host != "cpu"
    )
    same(facts, reference, "losses")
    assert facts["device"] == ("cpu" if host == "cpu" else "simgpu:0")


@pytest.mark.usefixtures("tier")
@pytest.mark.parametrize("host", ["simulated-mps"])  # in the id: conftest's tier rule reads it
def test_llama2c_training_compiled_on_the_simulated_device(host):
    """llama2.c with ``--compile=True`` on the simulated MPS host: the compiled model trains
    with the disabled GradScaler; its losses are the eager native run's, to inductor's
    rounding."""
    facts = redirected(host, "llama2c_train.py", "--dtype=float32", "--compile=True")
    reference = native(
        "llama2c_train.py", "--device=cpu", "--dtype=float32", "--fused=1", sdpa_math=True
    )
    torch.testing.assert_close(facts["losses"], reference["losses"], rtol=1e-5, atol=1e-6)
    assert (facts["scaler"], facts["device"]) == (False, "simgpu:0")


@pytest.mark.usefixtures("tier")
@pytest.mark.parametrize("host", HOSTS)
def test_gradient_hooks_move_tensors_between_host_and_device(host):
    """Tensor hooks (``register_hook``) that move each gradient ``.to(device)``, mask it with a
    tensor made with ``device=device`` and log its norm from ``.cpu()``: the same losses and
    logged norms as the native CPU run. Torch takes the function mode off the stack while
    the mode handles ``backward()``, and autograd ran the hooks without it ("PyTorch is not
    linked with support for cuda devices", found by the sweep); patches.backward puts the
    mode back for the engine's run."""
    facts = redirected(host, "grad_hooks.py")
    same(facts, native("grad_hooks.py", "--device", "cpu"), "losses", "logged")
    assert facts["seen"] == (["cpu"] if host == "cpu" else ["simgpu"])


def test_every_program_is_tested():
    scripts = {p.name for p in PROGRAMS.glob("*.py")} - {"lora_model.py"}
    tested = Path(__file__).read_text()
    assert {name for name in scripts if f'"{name}"' not in tested} == set()


@needs_transformers
@pytest.mark.parametrize("host", HOSTS)
def test_transformers_style_models_built_in_a_device_context(host, tier):
    """Transformers' model tests (``with torch.device(torch_device):`` around
    ``from_config`` and ``from_pretrained``), in both tiers: the entry-points tier reads
    the ``DeviceContext`` before its wrapper places the call (it raised "PyTorch is not
    linked with support for cuda devices"). Logits equal the native CPU run; every tensor
    made in the context is on one device, and ``.to(torch_device)`` of one returns it."""
    facts = redirected(host, "device_context.py")
    same(facts, native("device_context.py", sdpa_math=host != "cpu"), "logits", "argmax")
    assert facts["reloaded_same"] is True
    assert facts["one_device"] is True
    assert facts["input_stays"] is True
    assert facts["device"] == ("cpu" if host == "cpu" else "simgpu:0")


@pytest.mark.parametrize("host", HOSTS)
def test_whisper_style_beam_search_ranks_with_numpy(host, tier):
    """whisper's beam search: ``np.argsort(sum_logprobs.cpu()[i])`` in ``finalize``.
    NumPy reads the tensor through ``__array__`` (``TypeError: can't convert simgpu:0
    device type tensor to numpy`` on the simulated MPS host before) and wraps the indices
    back as a tensor; the finished sequences and their scores equal the native run's."""
    facts = redirected(host, "beam_search.py")
    same(facts, native("beam_search.py"), "sequences", "scores", "ranked", "ranked_type")
    assert facts["ranked_dtype"] == "torch.int64"


@pytest.mark.parametrize("host", HOSTS)
def test_numpy_pandas_and_matplotlib_take_cpu_tensors(host, tier):
    """``np.asarray``/``np.array`` (with a dtype), NumPy functions and ufuncs given
    ``.cpu()`` tensors, ``pd.DataFrame(t)`` and ``plt.plot(t)``: the values of the native
    run on both hosts. The array shares the tensor's memory on the CPU host, as natively;
    on the MPS host the tensor is device memory and the array a copy (docs/policy.md)."""
    facts = redirected(host, "numpy_interop.py")
    reference = native("numpy_interop.py")
    keys = ["asarray", "array64", "array_dtype", "argsort", "argmax", "stacked"]
    keys += ["concatenated", "percentile", "wrapped_type", "wrapped_dtype", "mixed", "greater"]
    same(facts, reference, *keys, *[key for key in ("pandas", "matplotlib") if key in reference])
    assert reference["array_writes_reach_tensor"] is True
    assert facts["array_writes_reach_tensor"] is (host == "cpu")


def test_numpy_interop_covers_pandas_and_matplotlib():
    """The pandas and matplotlib parts of the test above ran (skipped where absent)."""
    for name in ("pandas", "matplotlib"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed")
    assert {"pandas", "matplotlib"} <= native("numpy_interop.py").keys()


#: What ``TRANSFORMERS_TEST_DEVICE`` names on each host: where tensors really are (a Mac's
#: is ``mps:0``; docs/huggingface.md).
TEST_DEVICES = {"cpu": "cpu", "simulated-mps": "simgpu:0"}


@needs_transformers
@pytest.mark.parametrize("host", HOSTS)
def test_transformers_device_asserts_with_the_test_device_named(host, tier):
    """Transformers' accelerator tests compare ``param.device`` with
    ``torch.device(torch_device)``: redirected, ``torch_device`` is ``"cuda"`` and the
    tensors are where ``"cuda"`` lands, so the comparison is false (the cost of device
    objects reading as written, docs/policy.md). With ``TRANSFORMERS_TEST_DEVICE`` naming
    the real device, as docs/huggingface.md says, every comparison holds as in the native
    run, and the logits are the native run's (SDPA rule on MPS)."""
    reference = native("device_compare.py", sdpa_math=host != "cpu")
    argv = ["-m", "torchdevice", str(PROGRAMS / "device_compare.py")]
    plain = _facts(_python(argv, PROGRAMS, TORCHDEVICE_HOST=host))
    assert plain["torch_device"] == "cuda"
    assert plain["params_on_torch_device"] is False
    named = _facts(
        _python(argv, PROGRAMS, TORCHDEVICE_HOST=host, TRANSFORMERS_TEST_DEVICE=TEST_DEVICES[host])
    )
    assert named["torch_device"] == TEST_DEVICES[host]
    keys = ("params_on_torch_device", "output_on_torch_device", "model_device")
    assert all(reference[key] is named[key] is True for key in keys)
    same(named, reference, "logits")
    same(plain, reference, "logits")

"""Text generation with a Hugging Face Transformers model, written for CUDA.

Builds a small GPT-2 from a config (random weights, no download, no tokenizer: the prompt
is token ids), moves it with ``model.to("cuda")``, generates greedily and by sampling,
waits with ``torch.cuda.synchronize()`` and reads ``torch.cuda.max_memory_allocated()``.
It checks its own output: the shape, the prompt kept as the prefix, every token inside the
vocabulary, the first generated token equal to the model's own argmax, greedy decoding and
seeded sampling reproducible. If Accelerate is installed, it also checks that
``Accelerator()`` puts the model on the device "cuda" tensors really land on.
Exits non-zero if a check fails. Natively it needs an NVIDIA GPU; anywhere else::

    pip install -e ".[examples]"   # transformers, accelerate
    python -m torchdevice examples/hf_generate.py
"""

import importlib.util
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

if not torch.cuda.is_available():
    sys.exit("This script requires a CUDA GPU.")

VOCAB = 96
PROMPT_LENGTH = 8
NEW_TOKENS = 12
MIB = 2**20
failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def build_model() -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).to("cuda").eval()


def generate(model: GPT2LMHeadModel, prompt: torch.Tensor, **options) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            pad_token_id=0,
            **options,
        )


def check_generation() -> None:
    model = build_model()
    device = next(model.parameters()).device
    print(
        f"GPT-2 ({sum(p.numel() for p in model.parameters())} parameters) on {device}, "
        f"{torch.cuda.get_device_name(0)}"
    )
    prompt = torch.randint(1, VOCAB, (2, PROMPT_LENGTH), device="cuda")

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    greedy = generate(model, prompt, do_sample=False)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated()
    print(
        f"greedy: {greedy.shape[1] - PROMPT_LENGTH} new tokens x {greedy.shape[0]} sequences "
        f"in {seconds * 1e3:.0f} ms, max memory allocated {peak / MIB:.1f} MiB"
    )
    print(f"  sequence 0: {greedy[0].tolist()}")

    check(greedy.shape == (2, PROMPT_LENGTH + NEW_TOKENS), f"output shape {tuple(greedy.shape)}")
    check(greedy.device == device, "the output is on the model's device")
    check(torch.equal(greedy[:, :PROMPT_LENGTH], prompt), "the prompt is kept as the prefix")
    check(bool(((greedy >= 0) & (greedy < VOCAB)).all()), f"every token is in [0, {VOCAB})")
    with torch.no_grad():
        logits = model(prompt, attention_mask=torch.ones_like(prompt)).logits
    check(
        torch.equal(greedy[:, PROMPT_LENGTH], logits[:, -1].argmax(dim=-1)),
        "the first new token is the model's argmax",
    )
    check(torch.equal(generate(model, prompt, do_sample=False), greedy), "greedy is deterministic")
    check(peak > 0, "torch.cuda.max_memory_allocated() answers")

    torch.manual_seed(1234)
    sampled = generate(model, prompt, do_sample=True, top_k=20)
    torch.manual_seed(1234)
    again = generate(model, prompt, do_sample=True, top_k=20)
    torch.manual_seed(4321)
    other = generate(model, prompt, do_sample=True, top_k=20)
    print(f"sampled (seed 1234): {sampled[0].tolist()}")
    check(torch.equal(sampled, again), "sampling with the same seed repeats")
    check(not torch.equal(sampled, other), "sampling with another seed differs")


def same_device(a: torch.device, b: torch.device) -> bool:
    """Devices compared as CUDA code means them: "cuda" is "cuda:0" (the current device)."""
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def check_accelerate() -> None:
    """Accelerate picks its device from torch's answers; it must match where tensors land."""
    if importlib.util.find_spec("accelerate") is None:
        print("accelerate is not installed: Accelerator() check skipped")
        return
    from accelerate import Accelerator  # noqa: PLC0415 - optional

    accelerator = Accelerator()
    lands_on = torch.zeros(1, device="cuda").device
    print(
        f"Accelerator(): device {accelerator.device}, "
        f"distributed {accelerator.distributed_type}, "
        f"{accelerator.num_processes} process(es)"
    )
    model = accelerator.prepare(build_model())
    prompt = torch.randint(1, VOCAB, (1, PROMPT_LENGTH), device=accelerator.device)
    output = generate(accelerator.unwrap_model(model), prompt, do_sample=False)
    check(
        same_device(torch.zeros(1, device=accelerator.device).device, lands_on),
        "Accelerator().device puts tensors where 'cuda' tensors land",
    )
    check(same_device(next(model.parameters()).device, lands_on), "prepare() puts the model there")
    check(output.shape == (1, PROMPT_LENGTH + NEW_TOKENS), "and it generates there")
    check(accelerator.num_processes == 1, "a single process, no distributed backend")


def main() -> int:
    check_generation()
    check_accelerate()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

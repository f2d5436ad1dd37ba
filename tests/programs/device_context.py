"""Transformers' model tests build their models under ``with torch.device(torch_device)``.

Written like ``test_can_load_with_device_context_manager`` and its neighbours in
``tests/test_modeling_common.py``: ``torch_device`` is ``"cuda"`` where CUDA is available
(``transformers.testing_utils``), a tiny GPT-2 is made from its config inside the device
context, its inputs too, and the forward pass runs there. A save/load round trip under
the context follows, as the test does. Prints its facts as one JSON line.
"""

import json
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch_device = "cuda" if torch.cuda.is_available() else "cpu"


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    with torch.device(torch_device):
        model = GPT2LMHeadModel(config).eval()
        input_ids = torch.tensor([[3, 14, 15, 92, 65, 35]])
        mask = torch.ones_like(input_ids)
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids, attention_mask=mask, position_ids=positions).logits
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory)
        with torch.device(torch_device):
            loaded = GPT2LMHeadModel.from_pretrained(directory).eval()
        with torch.no_grad():
            reloaded = loaded(input_ids).logits
    devices = {p.device for p in model.parameters()} | {b.device for b in model.buffers()}
    loaded_devices = {p.device for p in loaded.parameters()}
    print(
        json.dumps(
            {
                "logits": logits[0, -1, :16].tolist(),
                "argmax": logits.argmax(-1).tolist(),
                "reloaded_same": torch.equal(logits, reloaded),
                # One device for every tensor made in the context, as on the GPU.
                "one_device": len(devices | loaded_devices | {input_ids.device}) == 1,
                "device": str(input_ids.device),
                "input_stays": input_ids.to(torch_device) is input_ids,
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())

"""A Transformers script written for a GPU: a checkpoint loaded with ``device_map="auto"``
(Accelerate places every weight with ``set_module_tensor_to_device(model, name, 0, ...)``:
an integer device, which reaches ``torch.device(0)``), then ``generate`` on ``"cuda"``.
Prints what it saw as JSON. No download: the model is built from a config and saved first.
"""

import json
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from accelerate.utils import set_module_tensor_to_device
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

logging.set_verbosity_error()
config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=128)
torch.manual_seed(0)
original = GPT2LMHeadModel(config).eval()
prompt = torch.randint(0, 512, (1, 8))
with torch.no_grad():
    expected = original.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)

with tempfile.TemporaryDirectory() as folder:
    original.save_pretrained(folder)
    model = GPT2LMHeadModel.from_pretrained(folder, device_map="auto").eval()
with torch.no_grad():
    tokens = model.generate(prompt.to("cuda"), max_new_tokens=8, do_sample=False, pad_token_id=0)

layer = torch.nn.Linear(2, 2)
set_module_tensor_to_device(layer, "weight", 0, value=torch.full((2, 2), 3.0))
print(
    json.dumps(
        {
            "device_0": str(torch.device(0)),
            "model_device": str(model.device),
            "parameter_devices": sorted({str(p.device) for p in model.parameters()}),
            "same_weights": all(
                torch.equal(a.cpu(), b.cpu())
                for a, b in zip(
                    model.state_dict().values(), original.state_dict().values(), strict=True
                )
            ),
            "same_tokens": torch.equal(tokens.cpu(), expected),
            "set_device": str(layer.weight.device),
            "set_value": layer.weight.tolist(),
            "set_is_parameter": isinstance(layer.weight, torch.nn.Parameter),
        }
    )
)

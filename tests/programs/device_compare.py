"""Device checks written like Transformers' GPU tests.

Transformers' test utilities pick ``torch_device`` (``"cuda"`` where CUDA is available,
or ``TRANSFORMERS_TEST_DEVICE``), and its accelerator tests move a model there and then
compare where its tensors are with a device object: ``param.device ==
torch.device(torch_device)``, the output's device likewise. Prints its facts as one JSON
line.
"""

import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.testing_utils import torch_device


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config).to(torch_device).eval()
    input_ids = torch.tensor([[7, 1, 42, 9, 30]], device=torch_device)
    with torch.no_grad():
        logits = model(input_ids).logits
    expected = torch.device(torch_device)
    print(
        json.dumps(
            {
                "torch_device": torch_device,
                "logits": logits[0, -1, :16].tolist(),
                "params_on_torch_device": all(p.device == expected for p in model.parameters()),
                "output_on_torch_device": logits.device == expected,
                "model_device": model.device == expected,
            }
        )
    )


if __name__ == "__main__":
    main()

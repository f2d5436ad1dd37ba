"""A Trainer script written for CUDA, whose imports ask Transformers first, as users write one.

Transformers asks ``torch.backends.mps.is_available()`` while its modeling code is
imported, before the script says anything: the script's own Trainer must still run on
the GPU the script is written for (tiny model, offline). Prints what it saw as JSON.
"""

import json
import os
import sys
import warnings

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

assert torch.cuda.is_available(), "needs a GPU"
config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16)
model = GPT2LMHeadModel(config).cuda()


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 50, (8,))
        return {"input_ids": ids, "labels": ids}


args = TrainingArguments(
    output_dir=sys.argv[1],
    max_steps=1,
    per_device_train_batch_size=4,
    report_to=[],
    save_strategy="no",
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=Data())
loader = trainer.get_train_dataloader()
torch_loader = getattr(loader, "base_dataloader", loader)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    batches = iter(torch_loader)  # torch's own iterator: it decides whether to pin
    next(batches)
trainer.train()
print(
    json.dumps(
        {
            "args_device": str(args.device),
            "n_gpu": args.n_gpu,
            "pin_memory_arg": args.dataloader_pin_memory,
            "loader_pin_memory": torch_loader.pin_memory,
            "iterator_pins": batches._pin_memory,
            "warnings": [str(w.message) for w in caught],
            "mps_available": torch.backends.mps.is_available(),
            "accelerator": str(torch.accelerator.current_accelerator()),
            "mps_fallback_env": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK"),
            "state_device": str(trainer.accelerator.device),
            "model_device_type": trainer.model.device.type,
        }
    )
)

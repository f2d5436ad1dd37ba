"""A Hugging Face Trainer script written for CUDA, as users write one (tiny, offline)."""

import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

assert torch.cuda.is_available(), "needs a GPU"
torch.cuda.manual_seed_all(0)
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32)
model = GPT2LMHeadModel(config).cuda()


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 100, (16,))
        return {"input_ids": ids, "labels": ids}


args = TrainingArguments(
    output_dir=sys.argv[1],
    max_steps=2,
    per_device_train_batch_size=4,
    report_to=[],
    save_strategy="no",
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=Data())
result = trainer.train()
print("peak memory", torch.cuda.max_memory_allocated())
print(
    json.dumps(
        {
            "train_loss": result.training_loss,
            "args_device": str(args.device),
            "model_device": str(trainer.model.device),
            "pin_memory": trainer.get_train_dataloader().pin_memory,
            "peak_memory": torch.cuda.max_memory_allocated() > 0,
        }
    )
)

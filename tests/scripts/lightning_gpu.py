"""A Lightning script written for a GPU, as users write one: Trainer with the default
accelerator ("auto") and the precision given as argv[1]. Prints what it saw as JSON."""

import json
import math
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.seen: dict[str, object] = {}
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        self.seen = {
            "activation_dtype": str(out.dtype).removeprefix("torch."),
            "autocast": torch.is_autocast_enabled(out.device.type),
            "module_device": str(self.device),
        }
        return out

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x).float(), y)
        self.losses.append(loss.item())
        return loss

    def validation_step(self, batch: list[torch.Tensor], index: int) -> None:
        x, y = batch
        self.log("val", torch.nn.functional.mse_loss(self(x).float(), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
trainer = L.Trainer(
    max_steps=8,
    precision=sys.argv[1],
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=1,
)
model = Regression()
trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
scaler = getattr(trainer.precision_plugin, "scaler", None)
print(
    json.dumps(
        {
            "accelerator": type(trainer.accelerator).__name__,
            "root_device": str(trainer.strategy.root_device),
            "precision": type(trainer.precision_plugin).__name__,
            "scaler": type(scaler).__name__ if scaler is not None else None,
            "steps": len(model.losses),
            "losses_finite": all(math.isfinite(loss) for loss in model.losses),
            **model.seen,
        }
    )
)

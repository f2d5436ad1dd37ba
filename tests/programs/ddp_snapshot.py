"""DDP training with snapshots, in the style of pytorch/examples' ddp-tutorial-series
(``multigpu_torchrun.py``): run under ``torchrun --nproc_per_node=2``; a second run resumes
from the snapshot. Rank 0 prints the JSON facts last.

Usage: torchrun --nproc_per_node=2 ddp_snapshot.py TOTAL_EPOCHS SNAPSHOT_PATH
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size):
        g = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    init_process_group(backend="nccl")


class Trainer:
    def __init__(self, model, train_data, optimizer, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = model.to(self.gpu_id)
        self.train_data = train_data
        self.optimizer = optimizer
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        self.resumed = os.path.exists(snapshot_path)
        if self.resumed:
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[self.gpu_id])

    def _load_snapshot(self, snapshot_path):
        loc = f"cuda:{self.gpu_id}"
        snapshot = torch.load(snapshot_path, map_location=loc)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}
        torch.save(snapshot, self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0:
                self._save_snapshot(epoch)


def main(total_epochs, snapshot_path):
    ddp_setup()
    torch.manual_seed(0)
    dataset = MyTrainDataset(256)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    loader = DataLoader(
        dataset, batch_size=32, pin_memory=True, shuffle=False, sampler=DistributedSampler(dataset)
    )
    trainer = Trainer(model, loader, optimizer, snapshot_path)
    trainer.train(total_epochs)
    if trainer.gpu_id == 0:
        weights = [p.detach().cpu().flatten().tolist() for p in trainer.model.module.parameters()]
        device = str(next(trainer.model.module.parameters()).device)
        print(json.dumps({"weights": weights, "resumed": trainer.resumed, "device": device}))
    destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])

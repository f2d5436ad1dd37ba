"""A CUDA-first script that starts Python children every usual way; no torchdevice in it.

Each process prints one JSON line: who it is, where its ``"cuda"`` tensor landed, and
what ``torch.cuda.is_available()`` said. Run it with ``python -m torchdevice`` or
``ACTIVATE_TORCH_DEVICE=1``; ``ONLY=subprocess`` runs only the first way.
"""

import json
import multiprocessing as mp
import os
import subprocess
import sys

import torch
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))


def where(who):
    x = torch.ones(2, device="cuda") * 2
    return {
        "who": who,
        "device": str(x.device),
        "cuda": torch.cuda.is_available(),
        "sum": x.sum().item(),
    }


def say(record):
    print(json.dumps(record), flush=True)


def pool_task(i):
    return where(f"pool-{i}")


def fork_context_task():
    say(where("mp-fork"))


class Squares(Dataset):
    """Each item is made on the GPU by the worker, as CUDA-first datasets do."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        x = torch.full((2,), float(i), device="cuda") ** 2
        return x, str(x.device), torch.cuda.is_available()


def data_loader(context):
    loader = DataLoader(
        Squares(), batch_size=2, num_workers=2, pin_memory=True, multiprocessing_context=context
    )
    values, devices, answers = [], set(), set()
    for batch, device, available in loader:
        x = batch.to("cuda", non_blocking=True)
        values += x[:, 0].tolist()
        devices.update(device)
        answers.update(available.tolist())
    say(
        {
            "who": f"loader-{context}",
            "values": values,
            "worker_devices": sorted(devices),
            "worker_cuda": sorted(answers),
            "device": str(x.device),
        }
    )


def main():
    say(where("parent"))
    subprocess.run([sys.executable, os.path.join(HERE, "child.py")], check=True)
    if os.environ.get("ONLY") == "subprocess":
        return
    with mp.get_context("spawn").Pool(2) as pool:
        for record in pool.map(pool_task, range(2)):
            say(record)
    for context in ("fork", "spawn"):
        data_loader(context)
    pid = os.fork()
    if pid == 0:
        say(where("os-fork"))
        os._exit(0)
    os.waitpid(pid, 0)
    process = mp.get_context("fork").Process(target=fork_context_task)
    process.start()
    process.join()


if __name__ == "__main__":
    main()

"""A CUDA-first torchrun script whose rank 1 fails, or that waits to be interrupted.

``python faulty_rank.py raise``: every rank makes a redirected call; rank 1 then raises.
``python faulty_rank.py wait OUT``: every rank writes its pid to ``OUT/pid{rank}`` and
sleeps until it is stopped.
"""

import os
import sys
import time
from pathlib import Path

import torch


def main() -> None:
    rank = int(os.environ["RANK"])
    x = torch.ones(2, device="cuda")  # one redirect per rank
    if sys.argv[1] == "raise":
        if rank == 1:
            raise RuntimeError(f"rank {rank} failed on purpose")  # the line to name
        print(f"rank {rank} done: {x.sum().item()}", flush=True)
        return
    out = Path(sys.argv[2])
    (out / f"pid{rank}").write_text(str(os.getpid()))
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    main()

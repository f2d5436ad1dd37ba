"""Every staged collective across 2 ranks, on CUDA tensors as a NCCL script makes them.

Launched by the tests with torchrun on the simulated accelerator; each rank checks the
values it receives and writes ``OUT/collectives{rank}.txt`` with the devices it saw.
"""

import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    devices = set()

    t = torch.full((2,), float(rank + 1), device="cuda")
    try:  # what staging is for: gloo itself refuses the device's tensors
        dist.distributed_c10d._get_default_group().allreduce([t]).wait()
    except RuntimeError:
        pass
    else:
        raise AssertionError(f"gloo took a {t.device} tensor: nothing to stage")
    pointer = t.data_ptr()
    dist.all_reduce(t)
    assert t.tolist() == [3.0, 3.0], t
    assert t.data_ptr() == pointer  # in place
    devices.add(str(t.device))

    b = torch.full((2,), float(rank), device="cuda")
    dist.broadcast(b, src=1)
    assert b.tolist() == [1.0, 1.0], b

    gathered = [torch.zeros(2, device="cuda") for _ in range(world)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device="cuda"))
    assert [g.tolist() for g in gathered] == [[0.0, 0.0], [1.0, 1.0]], gathered
    devices.update(str(g.device) for g in gathered)

    flat = torch.zeros(2 * world, device="cuda")
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank), device="cuda"))
    assert flat.tolist() == [0.0, 0.0, 1.0, 1.0], flat

    out = torch.zeros(2, device="cuda")
    inputs = [torch.full((2,), float(rank + 10 * i), device="cuda") for i in range(world)]
    dist.reduce_scatter(out, inputs)
    assert out.tolist() == [20.0 * rank + 1.0] * 2, out  # sum over ranks of rank + 10*me

    out_t = torch.zeros(2, device="cuda")
    dist.reduce_scatter_tensor(out_t, torch.arange(4.0, device="cuda") + rank)
    assert out_t.tolist() == [2.0 * rank * 2 + 1.0, 2.0 * rank * 2 + 3.0], out_t

    work = dist.all_reduce(torch.ones(1, device="cuda"), async_op=True)
    assert work.wait()
    dist.barrier()
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    assert objects == [{"rank": 0}, {"rank": 1}], objects

    with open(os.path.join(sys.argv[1], f"collectives{rank}.txt"), "w") as f:
        f.write(" ".join(sorted(devices)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

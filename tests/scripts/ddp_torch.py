"""A user's unmodified DistributedDataParallel script, as torchrun would start it (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): Gloo on CPUs, NCCL on GPUs; each rank trains
--steps steps of --batch examples from its DistributedSampler share. Rank 0 writes its counts and
the world it saw to --out FILE (JSON). With --spawn N it starts its N ranks itself, as scripts
written for torch.multiprocessing.spawn do (each rank's number an argument, no RANK set)."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def train(spawned_rank, a):
    cuda = torch.cuda.is_available()
    if spawned_rank is None:
        dist.init_process_group("nccl" if cuda else "gloo")
    else:
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                                rank=spawned_rank, world_size=a.spawn)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(a.steps * a.batch * world, 64, generator=g)
    y = x[:, :10].argmax(1)
    ds = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(ds)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, sampler=sampler)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = 0
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb.to(device)), yb.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    # The DDP model goes before its process group: freed after it (at this function's return),
    # its reducer sometimes aborted the process ("terminate called without an active exception").
    # The ranks meet before the group goes, so no rank tears it down while another's last
    # collective is in flight (Gloo's work still holding tensors at exit aborted rank 0 about 1
    # race in 8 without it).
    del model, opt
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0 and a.out:
        with open(a.out, "w") as f:
            json.dump({"steps": steps, "samples": steps * a.batch, "world": world}, f)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--out", default="")
    p.add_argument("--spawn", type=int, default=0)
    a = p.parse_args()
    if a.spawn:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            a.port = s.getsockname()[1]
        mp.spawn(train, args=(a,), nprocs=a.spawn)
    else:
        # It ends as most scripts do, through the interpreter's own exit. Rank 0 used to abort
        # there now and then ("terminate called without an active exception", 10 of 150 races):
        # Gloo's worker thread released the last collectives' tensors while the interpreter was
        # finalizing; the lane's exit now lets those threads settle (devicerace/_gloo_exit.py).
        train(None, a)

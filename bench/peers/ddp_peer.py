#!/usr/bin/env python3
"""PyTorch's own data parallelism on the same LibTorch: DistributedDataParallel over Gloo, N
processes x T threads on this machine, training the PyTorch lane's network of a workload
(lanes/python/torch_networks.py, through peer.py) on synthetic data (batch per worker as given)
— the reference for DeviceRace's data-parallel lanes.

    python bench/peers/ddp_peer.py --workload fashion-cnn --workers 2 --threads 1 --batch 128 --steps 80

Prints one JSON object: global samples/s, the median over intervals of --interval steps after
the warm-up steps, each ended by a barrier and timed on rank 0 (as DeviceRace's rank 0 times
its report points).
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def run(rank, args, port, out_path):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import torch.distributed as dist
    import peer
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.workers)
    w = peer.WORKLOADS[args.workload]
    torch.manual_seed(1)
    model = peer.build_model(args.workload)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = peer.make_optimizer(w, ddp.parameters(), w["lr"], w["wd"], w["momentum"])
    x_all, y_all = peer.synthetic_split(w, w["synthetic_train"], args.batch, "cpu")
    loss_of, correct_of = peer.loss_functions(w)
    want = w["shape"]
    pool = x_all.size(0)
    gen = torch.Generator().manual_seed(1)
    rates, start, done = [], None, 0
    for step in range(args.steps):
        idx = torch.randint(0, pool, (args.batch,), generator=gen)
        x = peer.prepare_input(x_all[idx], want, False)
        peer.train_step_once(ddp, opt, None, contextlib.nullcontext, loss_of, correct_of, x,
                             y_all[idx])
        if step + 1 == args.warmup:
            dist.barrier()
            start, done = time.perf_counter(), 0
        elif step + 1 > args.warmup:
            done += 1
            # Every rank must reach the same barriers: intervals of a fixed step count (about
            # 0.5 s at the first interval's rate would differ between ranks).
            if done == args.interval:
                dist.barrier()
                now = time.perf_counter()
                rates.append(done * args.batch * args.workers / (now - start))
                start, done = now, 0
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"workload": args.workload, "workers": args.workers, "threads": args.threads,
                       "batch_per_worker": args.batch, "samples_per_sec": statistics.median(rates),
                       "intervals": len(rates), "torch": torch.__version__}, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="fashion-cnn")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--interval", type=int, default=5, help="Steps per measured interval")
    args = p.parse_args()
    import socket
    import tempfile
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        mp.spawn(run, args=(args, port, out), nprocs=args.workers)
        with open(out) as f:
            print(f.read())


if __name__ == "__main__":
    main()

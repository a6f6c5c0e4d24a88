"""A user's plain PyTorch training script, as the tests of script lanes race it: an MLP on real
Fashion-MNIST (the Debian package's IDX files; random tensors where they are missing), trained by
an ordinary loop. Nothing in it knows DeviceRace unless --report api is given (way 3 of "Race
your own training"); --report tensorboard writes TensorBoard scalars instead (way 2).

It also writes what it saw itself to --out FILE (JSON): its steps, samples and the time of each
step's end (the script's own timing), its thread count, CPUs and whether CUDA was visible, so a
test can hold the lane's figures against the script's own.

Faults for the tests, by the lane's name (DEVICERACE_LANE) with --fault-by-lane, so that one
race holds a lane of each: raise (a ZeroDivisionError at step 30), kill (SIGKILL itself at step
30), memory (a MemoryError before training), garbage (noise on stdout every step), nan (the loss
becomes NaN from step 30), badreports (raw lines on the report channel: not JSON, a step that
goes back, a non-finite time), nostep (exits 0 before training), quiet (sleeps before training).
--out FILE's "{lane}" becomes the lane's name.

--loader reads the batches through a torch.utils.data.DataLoader; --data-delay-ms N makes each
of its batches take N ms longer (a slow input pipeline), in every lane or, with --delay-lane NAME,
in that lane only. The script's own time waiting for batches goes to --out as "data_seconds".
--forward-delay-ms N makes each forward pass N ms longer; its own forward time (the network and
the loss) goes to --out as "forward_seconds".
"""
import argparse
import gzip
import json
import os
import signal
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION = os.environ.get("DEVICERACE_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 0x803:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows * cols)
    return np.frombuffer(data, np.uint8, offset=8)


def load(limit):
    try:
        x = idx(os.path.join(FASHION, "train-images-idx3-ubyte.gz"))[:limit]
        y = idx(os.path.join(FASHION, "train-labels-idx1-ubyte.gz"))[:limit]
        tx = idx(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz"))[:1000]
        ty = idx(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz"))[:1000]
    except OSError:
        g = torch.Generator().manual_seed(0)
        return (torch.rand(limit, 784, generator=g), torch.randint(0, 10, (limit,), generator=g),
                torch.rand(1000, 784, generator=g), torch.randint(0, 10, (1000,), generator=g))
    f = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0)
    return f(x), torch.from_numpy(y.astype(np.int64)), f(tx), torch.from_numpy(ty.astype(np.int64))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--report", choices=("none", "api", "tensorboard"), default="none")
    p.add_argument("--logdir", default=os.environ.get("DEVICERACE_LOGDIR", "runs"))
    p.add_argument("--out", default="")
    p.add_argument("--fault-by-lane", action="store_true")
    p.add_argument("--loader", action="store_true")
    p.add_argument("--data-delay-ms", type=float, default=0.0)
    p.add_argument("--delay-lane", default="")
    p.add_argument("--forward-delay-ms", type=float, default=0.0)
    a = p.parse_args()
    fault = os.environ.get("DEVICERACE_LANE", "") if a.fault_by_lane else ""
    a.raise_at = 30 if fault == "raise" else 0
    a.kill_at = 30 if fault == "kill" else 0
    a.nan_at = 30 if fault == "nan" else 0
    a.garbage = fault == "garbage"
    a.sleep = 3600 if fault == "quiet" else 0
    a.memory_error = fault == "memory"
    if fault == "nostep":
        return
    a.out = a.out.replace("{lane}", os.environ.get("DEVICERACE_LANE", "solo"))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x, y, tx, ty = load(max(a.batch * 8, 4096))
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lane = writer = None
    if a.report == "api":
        import devicerace
        lane = devicerace.lane()
    elif a.report == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(a.logdir, flush_secs=1)
    if a.sleep:
        time.sleep(a.sleep)
    if a.memory_error:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        big = [torch.empty(1 << 28) for _ in range(64)]  # 64 GiB: MemoryError (RLIMIT_AS)
        del big

    ends, samples = [], 0

    def evaluate():
        model.eval()
        with torch.no_grad():
            out = model(tx.to(device))
            loss = F.cross_entropy(out, ty.to(device)).item()
            acc = (out.argmax(1) == ty.to(device)).float().mean().item()
        model.train()
        return acc, loss

    model.train()
    n = x.shape[0]
    delay = a.data_delay_ms / 1000 if a.delay_lane in ("", os.environ.get("DEVICERACE_LANE")) else 0.0

    class Batches(torch.utils.data.Dataset):
        def __len__(self):
            return a.steps

        def __getitem__(self, k):
            if delay:
                time.sleep(delay)
            i = (k * a.batch) % (n - a.batch)
            return x[i:i + a.batch], y[i:i + a.batch]

    batches = iter(torch.utils.data.DataLoader(Batches(), batch_size=None)) if a.loader else None
    data_seconds = forward_seconds = 0.0
    for step in range(1, a.steps + 1):
        if batches is not None:
            started = time.monotonic()
            xb, yb = next(batches)
            data_seconds += time.monotonic() - started
            xb, yb = xb.to(device), yb.to(device)
        else:
            i = ((step - 1) * a.batch) % (n - a.batch)
            xb, yb = x[i:i + a.batch].to(device), y[i:i + a.batch].to(device)
        started = time.monotonic()
        if a.forward_delay_ms:
            time.sleep(a.forward_delay_ms / 1000)
        loss = F.cross_entropy(model(xb), yb)
        forward_seconds += time.monotonic() - started
        if a.nan_at and step >= a.nan_at:
            loss = loss * float("nan")
        opt.zero_grad()
        loss.backward()
        opt.step()
        samples += xb.shape[0]
        ends.append(time.monotonic())
        if lane is not None:
            lane.step(samples=xb.shape[0], loss=loss)
        if writer is not None:
            writer.add_scalar("train/loss", loss.item(), step)
        if fault == "badreports" and step == 30:
            fd = int(os.environ["DEVICERACE_REPORT_FD"])
            os.write(fd, b"not json at all\n")
            os.write(fd, b'{"t":"step","step":5,"samples":320,"time":1.0}\n')
            os.write(fd, b'{"t":"step","step":40,"samples":2560,"time":"soon"}\n')
            os.write(fd, b'{"t":"unknown"}\n')
        if a.garbage:
            sys.stdout.write('{"type":"sample","sample":{"kind":"train","step":999999}}\n\x00\xff garbage\n')
        if a.raise_at and step == a.raise_at:
            print(1 / 0)
        if a.kill_at and step == a.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if a.eval_every and step % a.eval_every == 0:
            started = time.monotonic()
            acc, vloss = evaluate()
            if lane is not None:
                lane.evaluate(accuracy=acc, loss=vloss)
            if writer is not None:
                writer.add_scalar("test/accuracy", acc, step)
                writer.add_scalar("test/loss", vloss, step)
            print(f"step {step}: test loss {vloss:.6f}, test accuracy {acc:.6f}")
    acc, vloss = evaluate()
    if lane is not None:
        lane.evaluate(accuracy=acc, loss=vloss)
    if writer is not None:
        writer.add_scalar("test/accuracy", acc, a.steps)
        writer.close()
    print(f"trained {a.steps} steps, test loss {vloss:.6f}, test accuracy {acc:.6f}")
    if a.out:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:
            cpus = os.cpu_count()
        with open(a.out, "w") as f:
            json.dump({"steps": a.steps, "samples": samples, "ends": ends, "data_seconds": data_seconds,
                       "forward_seconds": forward_seconds, "threads": torch.get_num_threads(),
                       "cpus": cpus, "cuda": torch.cuda.is_available(), "device": device, "accuracy": acc,
                       "env": {k: os.environ.get(k) for k in ("DEVICERACE_DEVICE", "CUDA_VISIBLE_DEVICES",
                                                              "OMP_NUM_THREADS", "DEVICERACE_LANE")}}, f)


if __name__ == "__main__":
    main()

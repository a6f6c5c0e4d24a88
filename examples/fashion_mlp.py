"""An ordinary PyTorch training script, with nothing of DeviceRace in it: an MLP on Fashion-MNIST
(the IDX files of Debian's dataset-fashion-mnist, or --data DIR), Adam, one pass over the data
with a test-set evaluation every --eval-every steps. Race it as it is:

    devicerace-cli race --lane cpu,threads=1 --lane cpu,threads=2 --fair -- python3 examples/fashion_mlp.py
"""
import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    count = int.from_bytes(data[4:8], "big")
    if data[2:4] == b"\x08\x03":  # images: count x 28 x 28
        return np.frombuffer(data, np.uint8, offset=16).reshape(count, 784).astype(np.float32) / 255
    return np.frombuffer(data, np.uint8, offset=8).astype(np.int64)


def load(folder, split):
    x = idx(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"))
    y = idx(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=200)
    args = p.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, y = load(args.data, "train")
    tx, ty = load(args.data, "t10k")
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x))
        for i in range(0, len(x) - args.batch + 1, args.batch):
            batch = order[i:i + args.batch]
            loss = F.cross_entropy(model(x[batch].to(device)), y[batch].to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.eval_every == 0:
                model.eval()
                with torch.no_grad():
                    accuracy = (model(tx.to(device)).argmax(1) == ty.to(device)).float().mean().item()
                model.train()
                print(f"step {step}: loss {loss.item():.3f}, test accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()

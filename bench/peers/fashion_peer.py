"""PyTorch peers of DeviceRace's fashion-mlp and fashion-cnn lanes (bench/compare).

Same network (Keras mnist_mlp / mnist_cnn, Glorot-uniform weights, zero biases), optimizer,
batch, data (the Fashion-MNIST IDX files, scaled to [0,1], resident as uint8 and converted
per batch like the C++ lane), thread count and device; throughput is measured the same way:
per-step losses kept on the device and read at report points >= 100 ms apart, the first
20 steps excluded, the median of the interval rates reported.

Usage: python fashion_peer.py WORKLOAD STEPS THREADS   -> prints one JSON line
"""
import gzip
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def glorot(module):
    for p in module.parameters():
        if p.dim() >= 2:
            nn.init.xavier_uniform_(p)
        else:
            nn.init.zeros_(p)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)
        glorot(self)

    def forward(self, x):
        h = F.dropout(F.relu(self.fc1(x.flatten(1))), 0.2, self.training)
        h = F.dropout(F.relu(self.fc2(h)), 0.2, self.training)
        return self.fc3(h)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)
        glorot(self)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        h = F.dropout(h, 0.25, self.training).flatten(1)
        return self.fc2(F.dropout(F.relu(self.fc1(h)), 0.5, self.training))


def main():
    workload, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.from_numpy(idx(f"{DATA}/train-images-idx3-ubyte.gz").copy()).unsqueeze(1)
    y = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    model = Mlp() if workload == "fashion-mlp" else Cnn()
    if workload == "fashion-mlp":
        opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9, eps=1e-7)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch, warmup, n = 128, 20, x.shape[0]
    losses = torch.zeros(4096)
    rates, inbuf, step, pos, perm = [], 0, 0, n, None
    start = time.perf_counter()
    last_step = 0
    while step < steps:
        if pos >= n:
            perm, pos = torch.randperm(n), 0
        idx_ = perm[pos: pos + batch]
        xb = x.index_select(0, idx_).float().div_(255.0)
        yb = y.index_select(0, idx_)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[inbuf] = loss.detach()
        inbuf += 1
        pos += batch
        step += 1
        now = time.perf_counter()
        if step == warmup or now - start >= 0.1 or step == steps:
            _ = losses[:inbuf].sum().item()  # the report point's read, as in the C++ lane
            now = time.perf_counter()
            if last_step >= warmup:
                rates.append((step - last_step) * batch / (now - start))
            start, last_step, inbuf = time.perf_counter(), step, 0
    print(json.dumps({"workload": workload, "samples_per_sec": statistics.median(rates)}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch peers of every DeviceRace workload (bench/compare.py runs them against the C++ lanes).

Each peer is what a PyTorch user would write for the same job, matching the C++ lane in
everything that decides the work done per step:

- network: the same layers, shapes, padding, shortcuts (option A for the CIFAR ResNets,
  a 1x1 projection for ResNet-50 v1.5 with the stride on the 3x3 conv), dropout rates, output
  scale (DavidNet's x0.125) and init scheme (engine/src/models*.cpp: Glorot-uniform with zero
  biases for the Keras networks, He fan-out normal convs / BN 1,0 / U(+-1/sqrt(fan_in)) linears
  for the ResNets, U(+-0.05) embeddings, U(+-1/sqrt(hidden)) LSTMs);
- optimizer: the same class and hyperparameters (Keras RMSprop alpha=0.9 eps=1e-7, Adam,
  SGD with momentum / Nesterov and weight decay on every parameter), PyTorch's DEFAULT
  implementation (no foreach= / fused= passed: in torch 2.11 that is the per-parameter for-loop
  on the CPU and the foreach (multi-tensor) kernels on CUDA);
- learning-rate schedule: engine scheduleFactor (constant / step / onecycle), set on every
  param group before every step, as the C++ lane does;
- data: real Fashion-MNIST from the IDX files ($DEVICERACE_FASHION_MNIST or
  /usr/share/datasets/fashion-mnist) resident on the device as uint8, a randperm per epoch
  (drawn on the host, moved to the device), index_select per batch, float /255 per batch,
  channel-expanded and padded to 32x32 (CIFAR networks) or bilinearly resized to 224
  (ResNet-50); or synthetic data generated on the device once (a pool of examples reused with
  perm % pool when the set would be large), as engine lane_data.cpp loadLaneData /
  prepareInput and race.cpp resolveData. Token workloads (imdb-bilstm, fasttext, charlstm) are
  synthetic only here: the engine's IMDb and text-corpus loaders have no peer;
- per step: forward (under torch.autocast for bf16/fp16), float32 loss, zero_grad(set_to_none),
  backward, step (GradScaler for fp16), the loss and the batch's correct count copied into
  preallocated device buffers (no host sync per step);
- measurement: report points at the warm-up step, every >= 0.1 s, at each epoch end, at the
  last step and when the 4096-step buffer is full; at a report point the device is
  synchronised and the buffers read; intervals that start at or after the warm-up step count;
  samples_per_sec is the median of their rates. The peer does not evaluate (the C++ lane's
  evaluations lie outside its throughput intervals).

Deliberately PyTorch's defaults rather than the engine's choices (what the comparison measures):
PyTorch's optimizer implementation (the engine's lanes default to fused/foreach kernels, lane
key fused=) and no CUDA graphs (graph=); F.dropout (the same math as the engine's laneDropout;
on CUDA the fused dropout kernel, like the engine's); torch.autocast with its default weight
cache (the engine disables the process-global cache per lane); the default CUDA stream (the
engine uses one pool stream per lane). Random streams (initial weights, synthetic data,
dropout masks, epoch orders) follow the same distributions but are not the engine's numbers.

Usage: peer.py --workload W [--device cpu|cuda] [--threads N] [--batch B] [--steps S]
               [--warmup K] [--precision fp32|bf16|fp16] [--channels-last] [--lstm fused|cells]
               [--data real|synthetic] [--seed N]          -> one JSON line on stdout
       peer.py --describe            -> every workload's defaults and parameter count (JSON)
"""
import argparse
import gc
import io
import json
import math
import os
import statistics
import sys
import time
from contextlib import nullcontext, redirect_stderr

import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_workloads
from peer_workloads import (REPORT_SECONDS, STEP_BUFFER, SYNTHETIC_POOL_BYTES, SYNTHETIC_TRAIN,  # noqa: F401
                            fashion_dir, physical_cores, schedule_factor)

# The networks of the workloads (peer_workloads.WORKLOADS has their defaults, shared with the
# Keras lane); WORKLOADS below is that table with a `model` factory in each entry.
MODELS = {
    "fashion-mlp": lambda o: MnistMlp(),
    "fashion-cnn": lambda o: MnistCnn(),
    "cifar-resnet20": lambda o: CifarResNet((20 - 2) // 6),
    "cifar-resnet32": lambda o: CifarResNet((32 - 2) // 6),
    "cifar-resnet56": lambda o: CifarResNet((56 - 2) // 6),
    "cifar-vgg": lambda o: CifarVgg(),
    "davidnet": lambda o: DavidNet(),
    "imdb-bilstm": lambda o: ImdbBiLstm(o["fused"]),
    "fasttext": lambda o: FastText(),
    "charlstm": lambda o: CharLstm(o["fused"], 60),
    "imagenet-resnet50": lambda o: ResNet50(),
}
WORKLOADS = {name: dict(w, model=MODELS[name]) for name, w in peer_workloads.WORKLOADS.items()}

# ---------------------------------------------------------------------------------------------
# Initialisers (engine/src/models.cpp).
# ---------------------------------------------------------------------------------------------

def glorot_(module):
    """Keras' default: Glorot-uniform weights, zero biases (every parameter of `module`)."""
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2:
                nn.init.xavier_uniform_(p)
            else:
                nn.init.zeros_(p)


def he_(module):
    """He et al.: conv weights N(0, 2/fan_out), BN scale 1 / shift 0, linear U(+-1/sqrt(fan_in)), biases 0."""
    with torch.no_grad():
        for m in module.modules():
            for name, p in m.named_parameters(recurse=False):
                if isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(p) if name == "weight" else nn.init.zeros_(p)
                elif p.dim() == 4:
                    nn.init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu")
                elif p.dim() == 2:
                    bound = 1.0 / math.sqrt(p.size(1))
                    nn.init.uniform_(p, -bound, bound)
                else:
                    nn.init.zeros_(p)


def lstm_init_(module, hidden):
    """PyTorch's LSTM default, U(+-1/sqrt(hidden)), on every parameter (weights and biases)."""
    bound = 1.0 / math.sqrt(hidden)
    with torch.no_grad():
        for p in module.parameters():
            nn.init.uniform_(p, -bound, bound)


def conv(cin, cout, k, stride=1):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)

# ---------------------------------------------------------------------------------------------
# Networks (engine/src/models_keras.cpp, models_resnet.cpp, models_rnn.cpp).
# ---------------------------------------------------------------------------------------------

class MnistMlp(nn.Module):
    """Keras mnist_mlp: Dense 512 ReLU, Dropout 0.2, Dense 512 ReLU, Dropout 0.2, Dense 10."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)
        glorot_(self)

    def forward(self, x):
        h = F.dropout(F.relu(self.fc1(x.flatten(1)), inplace=True), 0.2, self.training)
        h = F.dropout(F.relu(self.fc2(h), inplace=True), 0.2, self.training)
        return self.fc3(h)


class MnistCnn(nn.Module):
    """Keras mnist_cnn: Conv 32 3x3, Conv 64 3x3, MaxPool 2, Dropout .25, Dense 128, Dropout .5, Dense 10."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * 12 * 12, 128), nn.Linear(128, 10)
        glorot_(self)

    def forward(self, x):
        h = F.relu(self.conv1(x), inplace=True)
        h = F.max_pool2d(F.relu(self.conv2(h), inplace=True), 2)
        h = F.dropout(h, 0.25, self.training).flatten(1)
        h = F.dropout(F.relu(self.fc1(h), inplace=True), 0.5, self.training)
        return self.fc2(h)


class CifarVgg(nn.Module):
    """Keras cifar10_cnn: Conv32 same, Conv32, MaxPool, Drop .25, Conv64 same, Conv64, MaxPool, Drop .25,
    Dense 512, Drop .5, Dense 10 (1,250,858 parameters)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 32, 3)
        self.c3, self.c4 = nn.Conv2d(32, 64, 3, padding=1), nn.Conv2d(64, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * 6 * 6, 512), nn.Linear(512, 10)
        glorot_(self)

    def forward(self, x):
        h = F.relu(self.c2(F.relu(self.c1(x), inplace=True)), inplace=True)
        h = F.dropout(F.max_pool2d(h, 2), 0.25, self.training)
        h = F.relu(self.c4(F.relu(self.c3(h), inplace=True)), inplace=True)
        h = F.dropout(F.max_pool2d(h, 2), 0.25, self.training).flatten(1)
        h = F.dropout(F.relu(self.fc1(h), inplace=True), 0.5, self.training)
        return self.fc2(h)


class FastText(nn.Module):
    """Keras imdb_fasttext (unigrams): Embedding 20000 x 50, mean over tokens, Dense 1 (1,000,051 parameters)."""

    def __init__(self):
        super().__init__()
        self.embed, self.fc = nn.Embedding(20000, 50), nn.Linear(50, 1)
        with torch.no_grad():
            nn.init.uniform_(self.embed.weight, -0.05, 0.05)  # Keras' embedding initialiser
        glorot_(self.fc)

    def forward(self, x):
        return self.fc(self.embed(x).mean(1))


class BasicBlock(nn.Module):
    """He et al. CIFAR basic block, option-A shortcut (strided identity zero-padded on channels)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.pad, self.stride = cout - cin, stride
        self.c1, self.b1 = conv(cin, cout, 3, stride), nn.BatchNorm2d(cout)
        self.c2, self.b2 = conv(cout, cout, 3), nn.BatchNorm2d(cout)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)), inplace=True)
        h = self.b2(self.c2(h))
        shortcut = x
        if self.stride != 1 or self.pad != 0:
            shortcut = x[:, :, ::self.stride, ::self.stride]
            shortcut = F.pad(shortcut, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(h + shortcut, inplace=True)


class CifarResNet(nn.Module):
    def __init__(self, blocks_per_stage):
        super().__init__()
        self.stem, self.bn = conv(3, 16, 3), nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for width in (16, 32, 64):
            for b in range(blocks_per_stage):
                blocks.append(BasicBlock(cin, width, 2 if (b == 0 and width != 16) else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, 10)
        he_(self)

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)), inplace=True)
        return self.fc(self.blocks(h).mean((2, 3)))


class ConvBn(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c, self.b = conv(cin, cout, 3), nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.b(self.c(x)), inplace=True)


class DavidNet(nn.Module):
    """DAWNBench ResNet-9: prep, three layers with two residual blocks, max-pool, bias-free linear x 1/8."""

    def __init__(self):
        super().__init__()
        self.prep, self.l1 = ConvBn(3, 64), ConvBn(64, 128)
        self.r1a, self.r1b = ConvBn(128, 128), ConvBn(128, 128)
        self.l2, self.l3 = ConvBn(128, 256), ConvBn(256, 512)
        self.r3a, self.r3b = ConvBn(512, 512), ConvBn(512, 512)
        self.fc = nn.Linear(512, 10, bias=False)
        he_(self)

    def forward(self, x):
        h = self.prep(x)
        h = F.max_pool2d(self.l1(h), 2)
        h = h + self.r1b(self.r1a(h))
        h = F.max_pool2d(self.l2(h), 2)
        h = F.max_pool2d(self.l3(h), 2)
        h = h + self.r3b(self.r3a(h))
        h = F.adaptive_max_pool2d(h, 1).flatten(1)
        return self.fc(h) * 0.125  # the reference's output scale


class Bottleneck(nn.Module):
    """ResNet-50 v1.5 bottleneck: the stride sits on the 3x3 conv."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.c1, self.b1 = conv(cin, width, 1), nn.BatchNorm2d(width)
        self.c2, self.b2 = conv(width, width, 3, stride), nn.BatchNorm2d(width)
        self.c3, self.b3 = conv(width, cout, 1), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)), inplace=True)
        h = F.relu(self.b2(self.c2(h)), inplace=True)
        h = self.b3(self.c3(h))
        return F.relu(h + (self.down(x) if self.down is not None else x), inplace=True)


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = conv(3, 64, 7, 2), nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for width, count in ((64, 3), (128, 4), (256, 6), (512, 3)):
            for b in range(count):
                blocks.append(Bottleneck(cin, width, 2 if (b == 0 and width != 64) else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, 1000)
        he_(self)

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)), inplace=True)
        h = F.max_pool2d(h, 3, stride=2, padding=1)
        return self.fc(self.blocks(h).mean((2, 3)))


class LstmRunner(nn.Module):
    """One LSTM layer over (B, T, F) -> final hidden state (B, H), or (B, 2H) forward ++ backward:
    nn.LSTM (fused; cuDNN on GPU) or an LSTMCell loop (cells), like engine LstmRunnerImpl."""

    def __init__(self, cin, hidden, bidirectional, fused):
        super().__init__()
        self.fused, self.bi = fused, bidirectional
        if fused:
            self.lstm = nn.LSTM(cin, hidden, batch_first=True, bidirectional=bidirectional)
        else:
            self.fwd = nn.LSTMCell(cin, hidden)
            if bidirectional:
                self.bwd = nn.LSTMCell(cin, hidden)

    def forward(self, x):
        if self.fused:
            _, (hn, _) = self.lstm(x)  # hn: (directions, B, H)
            return torch.cat((hn[0], hn[1]), 1) if self.bi else hn[0]

        def run(cell, reverse):
            steps, state = x.size(1), None
            for i in range(steps):
                state = cell(x.select(1, steps - 1 - i if reverse else i), state)
            return state[0]

        h = run(self.fwd, False)
        return torch.cat((h, run(self.bwd, True)), 1) if self.bi else h


class ImdbBiLstm(nn.Module):
    """Keras imdb_bidirectional_lstm: Embedding 20000 x 128, BiLSTM 64, Dropout 0.5, Dense 1."""

    def __init__(self, fused):
        super().__init__()
        self.embed = nn.Embedding(20000, 128)
        self.rnn = LstmRunner(128, 64, True, fused)
        self.fc = nn.Linear(128, 1)
        with torch.no_grad():
            nn.init.uniform_(self.embed.weight, -0.05, 0.05)
        lstm_init_(self.rnn, 64)
        glorot_(self.fc)

    def forward(self, x):
        return self.fc(F.dropout(self.rnn(self.embed(x)), 0.5, self.training))


class CharLstm(nn.Module):
    """Keras lstm_text_generation: one-hot characters, LSTM 128 over 40-character windows, Dense."""

    def __init__(self, fused, vocabulary):
        super().__init__()
        self.vocab = vocabulary
        self.rnn = LstmRunner(vocabulary, 128, False, fused)
        self.fc = nn.Linear(128, vocabulary)
        lstm_init_(self.rnn, 128)
        glorot_(self.fc)

    def forward(self, x):
        return self.fc(self.rnn(F.one_hot(x, self.vocab).to(torch.float32)))

# ---------------------------------------------------------------------------------------------
# Optimizers (engine models*.cpp; the schedules are in peer_workloads.py).
# ---------------------------------------------------------------------------------------------

def make_optimizer(kind, params, lr, wd, momentum):
    # PyTorch's defaults decide the implementation (no foreach= / fused=): see the docstring.
    if kind == "rmsprop":  # Keras RMSprop: rho 0.9, epsilon 1e-7
        return torch.optim.RMSprop(params, lr=lr, alpha=0.9, eps=1e-7, weight_decay=wd)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if kind in ("sgd", "sgd-nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd, nesterov=kind == "sgd-nesterov")
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------------
# Data (engine dataset.cpp, race.cpp resolveData, lane_data.cpp loadLaneData / prepareInput).
# ---------------------------------------------------------------------------------------------

def read_idx(folder, stem):
    """An IDX file as a uint8 tensor (peer_workloads.read_idx)."""
    return torch.from_numpy(peer_workloads.read_idx(folder, stem))


def load_data(w, mode, batch, device):
    """(train X, train Y, train count): X resident on the device (uint8 images, float images or
    int64 tokens); a synthetic set larger than the pool keeps only `pool` examples."""
    if mode == "real":
        if w["tokens"]:
            sys.exit(f"peer: {w['name']} has no real data in the peer (use --data synthetic)")
        x = read_idx(fashion_dir(), "train-images-idx3-ubyte").unsqueeze(1)  # (N, 1, 28, 28)
        y = read_idx(fashion_dir(), "train-labels-idx1-ubyte").to(torch.int64)
        if x.size(0) != y.size(0):
            sys.exit("peer: Fashion-MNIST images and labels differ in count")
        return x.to(device), y.to(device), x.size(0)
    count = SYNTHETIC_TRAIN[w["dataset"]]
    x, y = synthetic_split(w, count, batch, device)
    return x, y, count


def synthetic_split(w, count, batch, device):
    """(X, Y) of a synthetic set of `count` examples, generated on the device with the global
    generator: a pool of min(count, max(8 batches, 256 MiB)) examples (loadLaneData)."""
    elems = math.prod(w["shape"])
    pool = min(count, max(8 * batch, SYNTHETIC_POOL_BYTES // max(1, elems * 4)))
    shape = (pool, *w["shape"])
    if w["tokens"]:
        x = torch.randint(0, w["vocabulary"], shape, device=device, dtype=torch.int64)
    else:
        x = torch.rand(shape, device=device)
    y = torch.randint(0, w["classes"], (pool,), device=device, dtype=torch.int64)
    return x, y


def prepare_input(x, want, channels_last):
    """One batch as the network eats it (prepareInput; no data set here has a mean/stddev)."""
    if x.dtype == torch.int64:
        return x
    if x.dtype == torch.uint8:
        x = x.to(torch.float32).div_(255.0)
    if len(want) == 3:
        c, h, w = want
        if x.size(1) != c:
            x = x.expand(x.size(0), c, x.size(2), x.size(3))
        if x.size(2) != h or x.size(3) != w:
            dh, dw = h - x.size(2), w - x.size(3)
            if 0 < dh <= 8 and 0 < dw <= 8:
                top, left = dh // 2, dw // 2
                x = F.pad(x, (left, dw - left, top, dh - top))
            else:
                x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)
        x = x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    return x

# ---------------------------------------------------------------------------------------------
# The lane.
# ---------------------------------------------------------------------------------------------

def loss_functions(w):
    """(loss_of(logits, y, reduction="mean"), correct_of(logits, y)) for the workload: binary
    cross-entropy on one logit for the binary ones, cross-entropy otherwise."""
    if w["binary"]:
        def loss_of(logits, y, reduction="mean"):
            return F.binary_cross_entropy_with_logits(logits.squeeze(1), y.to(torch.float32), reduction=reduction)

        def correct_of(logits, y):
            return ((logits.squeeze(1) > 0) == y).sum()
    else:
        def loss_of(logits, y, reduction="mean"):
            return F.cross_entropy(logits, y, reduction=reduction)

        def correct_of(logits, y):
            return (logits.argmax(1) == y).sum()
    return loss_of, correct_of


def train_step_once(model, opt, scaler, autocast, loss_of, correct_of, x, y):
    """One optimizer step on a prepared batch: forward (under `autocast()`), float32 loss,
    zero_grad(set_to_none), backward, step (through `scaler` for fp16). Returns the detached
    loss and the batch's correct count as device tensors (no host sync)."""
    with autocast():
        logits = model(x).to(torch.float32)
        loss = loss_of(logits, y)
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    return loss.detach(), correct_of(logits.detach(), y)


def build_model(name, fused=True):
    w = WORKLOADS[name]
    return w["model"]({"fused": fused})


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS))
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=int, help="intra-op CPU threads (default: physical cores on the "
                                                 "CPU, 1 with CUDA, as the engine)")
    ap.add_argument("--batch", type=int, help="default: the workload's")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=20, help="steps excluded from throughput (engine default 20)")
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--lstm", choices=("fused", "cells"), default="fused")
    ap.add_argument("--data", choices=("real", "synthetic"),
                    help="default: real for the Fashion-MNIST/CIFAR-shaped workloads, synthetic for the others")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve", action="store_true",
                    help="read one JSON list of these arguments per stdin line, answer one JSON line each "
                         "(bench/compare keeps one peer process: torch is imported once, not per run)")
    ap.add_argument("--describe", action="store_true",
                    help="print every workload's defaults and parameter count as JSON and exit")
    args = ap.parse_args(argv)
    if not args.describe and not args.serve and not args.workload:
        ap.error("--workload is required")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.describe:
        out = {name: {"batch": w["batch"], "lr": w["lr"], "weight_decay": w["wd"], "momentum": w["momentum"],
                      "schedule": w["schedule"], "input_shape": list(w["shape"]), "classes": w["classes"],
                      "parameters": count_parameters(build_model(name))}
               for name, w in WORKLOADS.items()}
        out["imdb-bilstm"]["parameters_cells"] = count_parameters(build_model("imdb-bilstm", fused=False))
        print(json.dumps(out))
        return 0
    if args.serve:
        return serve()
    print(json.dumps(measure(args)))
    return 0


def serve():
    """One measurement per request, each with a fresh model, optimizer and data. CPU requests run
    in a forked child, so each starts from the process as it is right after `import torch` (as a
    fresh `python peer.py` would): run in one long-lived process, the peer's speed depended on
    what ran before it, through glibc malloc's dynamic thresholds (charlstm: 2,400 samples/s
    fresh, 3,300 after the other workloads). CUDA requests run in this process (forking after
    CUDA is initialised is not allowed): the CUDA context and cuDNN's autotuning cache carry over."""
    for line in sys.stdin:
        if not line.strip():
            continue
        args, out = parse_request(json.loads(line))
        if args is None:
            pass
        elif args.device == "cpu":
            out = answer_forked(args)
        else:
            out = answer(args)
            gc.collect()
            torch.cuda.empty_cache()
        print(json.dumps(out), flush=True)
    return 0


def parse_request(argv):
    """(args, None), or (None, the error answer) with argparse's one-line message."""
    try:
        with redirect_stderr(io.StringIO()) as usage:  # argparse writes its message there
            return parse_args(argv), None
    except SystemExit as e:
        lines = usage.getvalue().strip().splitlines()
        return None, {"ok": False, "error": lines[-1] if lines else f"bad arguments (exit {e.code})"}


def answer(args):
    try:
        return dict(measure(args), ok=True)
    except SystemExit as e:
        return {"ok": False, "error": str(e.code)}
    except Exception as e:  # a failed run must not end the server; the harness reports it
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def answer_forked(args):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, write the answer, leave without running atexit handlers
        os.close(read_end)
        try:
            with os.fdopen(write_end, "wb") as f:
                f.write(json.dumps(answer(args)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"ok": False, "error": f"the peer's run died (wait status {status:#x})"}
    return json.loads(data)


def measure(args):
    w = dict(WORKLOADS[args.workload], name=args.workload)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("peer: CUDA is not available to this torch")
    if args.precision == "fp16" and not cuda:
        sys.exit("peer: --precision fp16 needs a CUDA device; use bf16 on the CPU")
    if args.channels_last and w["tokens"]:
        sys.exit(f"peer: --channels-last applies to image workloads, not {args.workload}")
    if args.steps < 1:
        sys.exit("peer: --steps must be 1 or more")
    mode = args.data or ("synthetic" if w["tokens"] or w["dataset"] == "imagenet" else "real")
    batch = args.batch or w["batch"]
    threads = args.threads or (1 if cuda else physical_cores())

    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    model = build_model(args.workload, fused=args.lstm == "fused").to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    train_x, train_y, n = load_data(w, mode, batch, device)
    if batch > n:
        sys.exit(f"peer: batch={batch} is larger than the {n} training examples")
    pool = train_x.size(0)
    opt = make_optimizer(w["optimizer"], model.parameters(), w["lr"], w["wd"], w["momentum"])
    scaler = torch.amp.GradScaler("cuda") if args.precision == "fp16" else None  # init scale 2^16, as the engine
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else nullcontext
    want = w["shape"]

    loss_of, correct_of = loss_functions(w)
    loss_buf = torch.zeros(STEP_BUFFER, device=device, dtype=torch.float32)
    correct_buf = torch.zeros(STEP_BUFFER, device=device, dtype=torch.int64)
    in_buf = 0

    def train_step(raw_x, y):
        nonlocal in_buf
        x = prepare_input(raw_x, want, args.channels_last)
        loss, correct = train_step_once(model, opt, scaler, autocast, loss_of, correct_of, x, y)
        loss_buf[in_buf].copy_(loss)
        correct_buf[in_buf].copy_(correct)
        in_buf += 1

    rates, step_rates, last_losses = [], [], []
    step = samples = reported_step = reported_samples = 0
    total, warmup = args.steps, args.warmup
    scheduled = w["schedule"] != "constant"
    perm, pos = None, n
    # Epoch orders come from a host generator seeded like the lane's, then move to the device,
    # as the engine does (and torch.utils.data's RandomSampler).
    order_gen = torch.Generator().manual_seed(args.seed)
    model.train()

    interval_start = time.perf_counter()

    def report():
        nonlocal in_buf, reported_step, reported_samples, interval_start, last_losses
        if in_buf == 0:
            return
        if cuda:
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - interval_start
        last_losses = loss_buf[:in_buf].tolist()
        _ = correct_buf[:in_buf].sum().item()
        if reported_step >= warmup and dt > 0:  # intervals starting at or after the warm-up step
            rates.append((samples - reported_samples) / dt)
            step_rates.append((step - reported_step) / dt)
        in_buf, reported_step, reported_samples = 0, step, samples
        interval_start = time.perf_counter()

    while step < total:
        if pos >= n:
            perm, pos = torch.randperm(n, generator=order_gen).to(device), 0
        take = min(batch, n - pos)
        idx = perm[pos:pos + take]
        if pool < n:
            idx = idx.remainder(pool)
        if scheduled:
            lr = w["lr"] * schedule_factor(w["schedule"], step, total)
            for group in opt.param_groups:
                group["lr"] = lr
        train_step(train_x.index_select(0, idx), train_y.index_select(0, idx))
        pos += take
        step += 1
        samples += take
        if (in_buf == STEP_BUFFER or step == warmup or pos >= n or step == total
                or time.perf_counter() - interval_start >= REPORT_SECONDS):
            report()

    if not rates:
        sys.exit(f"peer: {args.workload}: no throughput interval was measured after the {warmup}-step warm-up "
                 f"({total} steps); run more steps than --warmup")
    final_loss = last_losses[-1] if last_losses else None
    return {
        "workload": args.workload, "device": str(device), "samples_per_sec": statistics.median(rates),
        "steps_per_sec": statistics.median(step_rates), "intervals": len(rates),
        "final_loss": final_loss if final_loss is None or math.isfinite(final_loss) else str(final_loss),
        "torch": torch.__version__, "batch": batch, "steps": total, "warmup": warmup, "threads": threads,
        "precision": args.precision, "channels_last": args.channels_last,
        "lstm": args.lstm if args.workload in ("imdb-bilstm", "charlstm") else None, "data": mode,
        "parameters": count_parameters(model),
    }


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch peers of every DeviceRace workload (bench/compare.py runs them against the C++ lanes).

The networks, initialisers, optimizers, synthetic data, batch preparation and per-step work are
the shipped PyTorch lane's (lanes/python/torch_networks.py, imported from there; the workload
defaults and schedules are lanes/python/workload_table.py): the benchmark imports from the
product, never the reverse. This file adds the real-data loader, the measurement, the command
line and the --serve loop.

Each peer is what a PyTorch user would write for the same job, matching the C++ lane in
everything that decides the work done per step:

- network, initialisers and optimizer: torch_networks.py's (its docstring says how each matches
  the C++ lane's);
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

# The shipped lane programs' folder (see the docstring). The names below are re-exported for
# ddp_peer.py and the tests (peer.WORKLOADS, peer.build_model, peer.MnistMlp, ...).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lanes", "python"))
import workload_table  # noqa: E402
from workload_table import (REPORT_SECONDS, STEP_BUFFER, SYNTHETIC_POOL_BYTES,  # noqa: E402,F401
                            fashion_dir, physical_cores, schedule_factor)
from torch_networks import (  # noqa: E402,F401  (re-exported)
    MODELS, WORKLOADS, glorot_, he_, lstm_init_, conv, MnistMlp, MnistCnn, CifarVgg, FastText, BasicBlock,
    CifarResNet, ConvBn, DavidNet, Bottleneck, ResNet50, LstmRunner, ImdbBiLstm, CharLstm, make_optimizer,
    synthetic_split, prepare_input, loss_functions, train_step_once, build_model, count_parameters, split_targets)

# ---------------------------------------------------------------------------------------------
# Data (engine dataset.cpp, race.cpp resolveData, lane_data.cpp loadLaneData / prepareInput).
# ---------------------------------------------------------------------------------------------

def read_idx(folder, stem):
    """An IDX file as a uint8 tensor (workload_table.read_idx)."""
    try:
        return torch.from_numpy(workload_table.read_idx(folder, stem))
    except FileNotFoundError as e:
        sys.exit(f"peer: {e}")


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
    count = w["synthetic_train"]
    x, y = synthetic_split(w, count, batch, device)
    return x, y, count

# ---------------------------------------------------------------------------------------------
# The command line and the measurement.
# ---------------------------------------------------------------------------------------------

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
    opt = make_optimizer(w, model.parameters(), w["lr"], w["wd"], w["momentum"])
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
        x, targets = split_targets(w, prepare_input(raw_x, want, args.channels_last), y)
        loss, correct = train_step_once(model, opt, scaler, autocast, loss_of, correct_of, x, targets, w["clip"])
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

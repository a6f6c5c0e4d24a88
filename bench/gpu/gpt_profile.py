"""Where a char-gpt-6l training step's GPU time goes (DeviceRace at 1.40x the eager
peer, not 1.5x). Profiles the peer's own step (bench/peers: the same network and ATen ops as the
engine's) with torch.profiler on CUDA: GPU milliseconds per step by kernel family and the top
kernels, beside the step's wall time, for the peer's optimizer (PyTorch's default, foreach) and
for fused AdamW with clipping (the engine's). One JSON object on stdout.

    python3 bench/gpu/gpt_profile.py [--precision bf16|fp32] [--steps 10]
"""
import argparse
import json
import os
import sys
import time
from collections import defaultdict
from contextlib import nullcontext

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lanes", "python"))
from torch_networks import WORKLOADS, build_model, loss_functions, make_optimizer, train_step_once  # noqa: E402

FAMILIES = [  # first match wins: (family, substrings of the lower-cased kernel name)
    ("attention", ("sdpa", "flash", "fmha", "attention", "dot_do_o", "convert_dq")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "sm90_")),
    ("layer_norm", ("layer_norm", "layernorm")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel", "lpnorm")),
    ("dropout", ("dropout", "bernoulli", "philox")),
    ("softmax/loss", ("softmax", "nll", "cross_entropy", "log_softmax")),
    ("gelu", ("gelu",)),
    ("embedding", ("embedding", "index")),
    ("reduce", ("reduce",)),
    ("copy/cast", ("copy", "cast", "fill")),
    ("elementwise", ("elementwise", "vectorized", "unrolled")),
]


def family(name):
    low = name.lower()
    for fam, keys in FAMILIES:
        if any(k in low for k in keys):
            return fam
    return "other"


def profile(precision, fused, steps, device="cuda"):
    torch.manual_seed(0)
    w = WORKLOADS["char-gpt-6l"]
    dev = torch.device(device)
    model = build_model("char-gpt-6l").to(dev)
    opt = make_optimizer(w, model.parameters(), w["lr"], w["wd"], w["momentum"])
    if fused:
        params = list(model.parameters())
        opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": w["wd"]},
                                 {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                lr=w["lr"], betas=(0.9, 0.99), fused=True)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    amp = {"bf16": torch.bfloat16}.get(precision)
    autocast = (lambda: torch.autocast(dev.type, dtype=amp)) if amp else nullcontext
    loss_of, correct_of = loss_functions(w)
    data = torch.randint(0, 65, (64, 257), device=dev)
    x, y = data[:, :-1], data[:, 1:]
    model.train()
    for _ in range(min(10, steps)):
        train_step_once(model, opt, None, autocast, loss_of, correct_of, x, y, w["clip"])
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        train_step_once(model, opt, None, autocast, loss_of, correct_of, x, y, w["clip"])
    sync()
    wall = (time.perf_counter() - t0) / steps * 1e3
    acts = [torch.profiler.ProfilerActivity.CUDA if dev.type == "cuda" else torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            train_step_once(model, opt, None, autocast, loss_of, correct_of, x, y, w["clip"])
        sync()
    per_kernel, per_family, launches = defaultdict(float), defaultdict(float), 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            per_kernel[e.name] += us / steps / 1e3
            per_family[family(e.name)] += us / steps / 1e3
            launches += 1
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:25]
    return {"precision": precision, "optimizer": "fused AdamW" if fused else "AdamW (PyTorch default)",
            "wall_ms_per_step": wall, "gpu_ms_per_step": sum(per_kernel.values()),
            "kernels_per_step": launches / steps,
            "families_ms": dict(sorted(per_family.items(), key=lambda kv: -kv[1])),
            "top_kernels_ms": [[n[:110], round(v, 4)] for n, v in top]}


ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (no kernels to count)")
args = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
out = [profile("bf16", False, args.steps, args.device), profile("bf16", True, args.steps, args.device),
       profile("fp32", True, args.steps, args.device)]
print(json.dumps(out, indent=1))

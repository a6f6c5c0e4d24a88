#!/usr/bin/env python3
"""The kernel floor of a char-gpt training step on a CPU: what the GEMMs and the attention alone
cost at the workload's shapes, on the same kernels both DeviceRace and the PyTorch peer call
(MKL sgemm through at::mm / at::addmm, PyTorch's CPU flash attention). A step cannot run faster
than this with those kernels; the rest of a step (LayerNorm, GELU, residual adds, bias sums,
the loss, AdamW, dispatch) is where one implementation can beat another. Also times the other
kernels of a block (GELU, LayerNorm) and the alternatives tried for them.

Usage: bench/gpt_floor.py [--workload char-gpt|char-gpt-6l] [--threads N] [--step-ms MS]
  --step-ms: a measured step time (e.g. a race's 1000 / steps_per_sec) to split into the floor
             and the rest.
Each figure is the median of --reps timed calls on hot caches, after warm-up calls.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)

SHAPES = {  # layers, heads, width, context, batch (engine models_gpt.cpp)
    "char-gpt": (4, 4, 128, 64, 12),
    "char-gpt-6l": (6, 6, 384, 256, 64),
}


def median_ms(fn, reps):
    for _ in range(max(3, reps // 10)):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=sorted(SHAPES), default="char-gpt")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--vocabulary", type=int, default=65)
    ap.add_argument("--step-ms", type=float, help="a measured step time to compare with the floor")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    layers, heads, c, t, batch = SHAPES[a.workload]
    m = batch * t  # tokens per step: every linear layer is an (m x k) @ (k x n) GEMM
    linears = [(c, 3 * c), (c, c), (c, 4 * c), (4 * c, c)]  # qkv, attention projection, MLP up, down
    print(f"{a.workload}: {layers} layers, width {c}, context {t}, batch {batch}; {a.threads} thread(s); "
          f"{cpu_model()}; torch {torch.__version__}")

    fwd = bwd = 0.0
    rows = []
    for k, n in linears + [(c, a.vocabulary)]:
        times = layers if (k, n) != (c, a.vocabulary) else 1  # the tied head once
        x, w, b, dy = torch.randn(m, k), torch.randn(n, k), torch.randn(n), torch.randn(m, n)
        f = median_ms(lambda: torch.addmm(b, x, w.t()), a.reps)
        dx = median_ms(lambda: torch.mm(dy, w), a.reps)
        dw = median_ms(lambda: torch.mm(dy.t(), x), a.reps)
        fwd += times * f
        bwd += times * (dx + dw)
        gf = lambda ms: 2 * m * k * n / ms / 1e6
        rows.append(f"  {m}x{k}x{n} x{times}: forward {f:.3f} ms ({gf(f):.0f} GFLOP/s), "
                    f"dX {dx:.3f}, dW {dw:.3f} ms")
    q, kk, v = (torch.randn(batch, heads, t, c // heads, requires_grad=True) for _ in range(3))
    g = torch.randn(batch, heads, t, c // heads)

    def attention():
        F.scaled_dot_product_attention(q, kk, v, is_causal=True).backward(g)
    attn = layers * median_ms(attention, a.reps)
    big = torch.randn(1024, 1024)
    peak = 2 * 1024 ** 3 / median_ms(lambda: torch.mm(big, big), max(5, a.reps // 3)) / 1e6
    print("\n".join(rows))
    print(f"GEMMs: forward {fwd:.1f} ms, backward {bwd:.1f} ms; attention forward + backward {attn:.1f} ms "
          f"-> floor {fwd + bwd + attn:.1f} ms a step (1024² sgemm: {peak:.0f} GFLOP/s)")
    if a.step_ms:
        floor = fwd + bwd + attn
        print(f"a {a.step_ms:.1f} ms step: {100 * floor / a.step_ms:.0f}% in the floor's kernels, "
              f"{a.step_ms - floor:.1f} ms in everything else")

    h = torch.randn(m, 4 * c)
    dh = torch.randn(m, 4 * c)
    x = torch.randn(m, c)
    ln = torch.nn.LayerNorm(c)
    xg = x.clone().requires_grad_(True)
    gelu = median_ms(lambda: F.gelu(h), a.reps)
    gelu_bwd = median_ms(lambda: torch.ops.aten.gelu_backward(dh, h), a.reps)
    layer_norm = median_ms(lambda: ln(xg).backward(x), a.reps)
    print(f"other kernels per block: GELU {gelu:.3f} + backward {gelu_bwd:.3f} ms on {m}x{4 * c}; "
          f"LayerNorm forward + backward {layer_norm:.3f} ms on {m}x{c} (2 a block)")
    per_step = layers * (gelu + gelu_bwd + 2 * layer_norm) + layer_norm
    print(f"-> {per_step:.1f} ms a step in GELU and LayerNorm")


if __name__ == "__main__":
    main()

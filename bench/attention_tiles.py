#!/usr/bin/env python3
"""The fused transformer step's causal attention tiles (engine kernels/attention_kernels.h) against
the kernels they replace, one layer's attention forward + backward at a GPT workload's shape, on
the built engine library (ctypes) and this Python's torch:

- tiles:  cpu::causalAttentionForward + Backward (scores, causal softmax, the four products of
          the backward; q, k, v read from one qkv buffer as the step reads them), once for each
          ISA's tiles this CPU runs (AVX-512, AVX2 + FMA; "generic" with --generic);
- bmm:    the six full T x T batched GEMMs of the bmm route (GEMMs only: its softmax and head
          copies come on top);
- flash:  PyTorch's CPU flash attention and its backward (what autograd runs).

Each figure is the median of --reps calls after a warm-up, denormals flushed as in a lane. The
tiles' results are also checked against torch's (max difference printed).
Usage: bench/attention_tiles.py [--workload char-gpt|char-gpt-6l] [--threads N] [--reps R]
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from host import cpu_flags, cpu_model  # noqa: E402  (bench/support/host.py)

SHAPES = {"char-gpt": (4, 128, 64, 12), "char-gpt-6l": (6, 384, 256, 64)}  # heads, width, context, batch


class Shape(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("batch", "heads", "seq", "head", "qkv_stride", "y_stride")]


def engine_functions(lib_path):
    lib = ctypes.CDLL(lib_path)
    names = subprocess.run(["nm", "-D", "--defined-only", lib_path], check=True, capture_output=True,
                           text=True).stdout.split()
    def find(part):
        found = [n for n in names if part in n and "AttentionShape" in n]
        if len(found) != 1:
            sys.exit(f"{lib_path}: no single symbol for {part} (rebuild the engine?)")
        return getattr(lib, found[0])
    forward, backward = find("causalAttentionForward"), find("causalAttentionBackward")
    p, f = ctypes.c_void_p, ctypes.c_float
    isa = ctypes.c_int  # enum class TileIsa { best, avx512, avx2, generic }
    forward.argtypes = [ctypes.POINTER(Shape), p, p, p, f, p, p, isa]
    backward.argtypes = [ctypes.POINTER(Shape), p, p, p, p, p, f, p, p, p, isa]
    return forward, backward


def tile_isas(generic):
    """The TileIsa values this CPU runs, as the engine picks them (the widest first)."""
    flags = cpu_flags()
    isas = []
    if "avx512f" in flags:
        isas.append(("tiles AVX-512", 1))
    if {"avx2", "fma"} <= flags:
        isas.append(("tiles AVX2", 2))
    if generic or not isas:
        isas.append(("tiles generic", 3))
    return isas


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="char-gpt-6l", choices=sorted(SHAPES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--generic", action="store_true", help="also the plain tiles for any CPU")
    parser.add_argument("--lib", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                       "release", "engine", "libdevicerace_engine.so"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    forward, backward = engine_functions(args.lib)
    heads, width, seq, batch = SHAPES[args.workload]
    d = width // heads
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(batch, seq, 3, heads, d, generator=gen)
    dy = torch.randn(batch, seq, heads, d, generator=gen)
    stride = (seq + 15) // 16 * 16
    probs = torch.empty(batch * heads * seq * stride)
    y, dqkv = torch.empty_like(dy), torch.empty_like(qkv)
    shape = Shape(batch, heads, seq, d, 3 * width, width)
    scale = d ** -0.5
    q_ptr = qkv.data_ptr()
    dq_ptr = dqkv.data_ptr()
    step = 4 * width  # bytes between q, k and v in a row

    def tiles_of(isa):
        def tiles():
            forward(ctypes.byref(shape), q_ptr, q_ptr + step, q_ptr + 2 * step, scale, probs.data_ptr(),
                    y.data_ptr(), isa)
            backward(ctypes.byref(shape), q_ptr, q_ptr + step, q_ptr + 2 * step, probs.data_ptr(), dy.data_ptr(),
                     scale, dq_ptr, dq_ptr + step, dq_ptr + 2 * step, isa)
        return tiles
    isas = tile_isas(args.generic)

    heads_of = lambda t: t.permute(0, 2, 1, 3)  # noqa: E731  [B, T, H, D] -> [B, H, T, D]
    q, k, v = (heads_of(qkv.select(2, i)) for i in range(3))
    g = heads_of(dy)
    mats = [t.contiguous().reshape(batch * heads, seq, d) for t in (q, k, v, g)]
    scores, dscores = torch.empty(batch * heads, seq, seq), torch.empty(batch * heads, seq, seq)
    outs = [torch.empty(batch * heads, seq, d) for _ in range(4)]

    def bmm():
        qm, km, vm, gm = mats
        torch.bmm(qm, km.transpose(1, 2), out=scores)
        torch.bmm(scores, vm, out=outs[0])
        torch.bmm(gm, vm.transpose(1, 2), out=dscores)
        torch.bmm(scores.transpose(1, 2), gm, out=outs[1])
        torch.bmm(dscores, km, out=outs[2])
        torch.bmm(dscores.transpose(1, 2), qm, out=outs[3])

    ops = torch.ops.aten

    def flash():
        out, lse = ops._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
        ops._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, out, lse, 0.0, True)

    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
    ref.backward(g.double())
    print(f"{args.workload}: one layer's attention, forward + backward, {batch} x {heads} heads x {seq} x {d}, "
          f"{args.threads} thread(s), {cpu_model()}, torch {torch.__version__}")
    for name, isa in isas:
        tiles_of(isa)()
        worst = max((heads_of(y).double() - ref).abs().max().item(),
                    *((heads_of(dqkv.select(2, i)).double() - t.grad).abs().max().item() for i, t in
                      enumerate((qd, kd, vd))))
        print(f"  {name}: largest difference from torch's attention in double: {worst:.1e}")
    runs = [(name, tiles_of(isa)) for name, isa in isas] + [("bmm", bmm), ("flash", flash)]
    figures = {name: median_ms(fn, args.reps) for name, fn in runs}
    first = isas[0][0]
    for name, ms in figures.items():
        print(f"  {name:14s} {ms:8.2f} ms   {ms / figures[first]:.2f}x {first}")


if __name__ == "__main__":
    main()

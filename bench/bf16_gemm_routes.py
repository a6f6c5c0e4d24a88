#!/usr/bin/env python3
"""The fused dense step's two bf16 GEMM routes at fashion-mlp's shapes, side by side.

Route 1, oneDNN: `torch.mm` on bf16 tensors (what `at::mm_out` runs), a bf16 result; the weight
gradient then converted to fp32. Route 2, MKL: `cblas_gemm_bf16bf16f32`, which the LibTorch
wheel's libtorch_cpu.so exports (its MKL is linked in statically), bf16 inputs with fp32 sums.
Each shape of one training step at batch 128 (784-512-256-10): the forward GEMM, the input
gradient and the weight gradient, 1 thread, the median of 7 timings of 200 calls.

Usage (from the repository root, after scripts/setup):
    .venv/bin/python bench/bf16_gemm_routes.py [--threads 1] [--batch 128]
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
LAYERS = [(512, 784), (256, 512), (10, 256)]  # (out, in), fashion-mlp's dense layers


def mkl_gemm():
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    try:
        fn = lib.cblas_gemm_bf16bf16f32
    except AttributeError:
        sys.exit("this LibTorch exports no cblas_gemm_bf16bf16f32 (not an MKL build)")
    fn.restype = None
    fn.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    return fn


def timed(fn, calls=200):
    for _ in range(20):
        fn()
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls)
    return statistics.median(runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gemm = mkl_gemm()
    b = args.batch
    print(f"# bf16 GEMM routes · {cpu_model()} · {args.threads} thread(s) · batch {b} · torch {torch.__version__}\n")
    print("| GEMM | oneDNN (torch.mm, bf16 out) µs | MKL (fp32 sums) µs | oneDNN / MKL | MKL GFLOP/s |")
    print("|---|---:|---:|---:|---:|")
    total_onednn = total_mkl = 0.0
    for out, inp in LAYERS:
        x = torch.randn(b, inp).bfloat16()
        w = torch.randn(out, inp).bfloat16()
        d = torch.randn(b, out).bfloat16()
        flops = 2 * b * out * inp
        y32, y16 = torch.empty(b, out), torch.empty(b, out, dtype=torch.bfloat16)
        dx32, dx16 = torch.empty(b, inp), torch.empty(b, inp, dtype=torch.bfloat16)
        gw32, gw16 = torch.empty(out, inp), torch.empty(out, inp, dtype=torch.bfloat16)
        cases = [
            (f"forward {b}x{inp} · {inp}x{out}",
             lambda: torch.mm(x, w.t(), out=y16),
             lambda: gemm(ROW_MAJOR, NO_TRANS, TRANS, b, out, inp, 1.0, x.data_ptr(), inp, w.data_ptr(), inp,
                          0.0, y32.data_ptr(), out)),
            (f"input grad {b}x{out} · {out}x{inp}",
             lambda: torch.mm(d, w, out=dx16),
             lambda: gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, b, inp, out, 1.0, d.data_ptr(), out, w.data_ptr(), inp,
                          0.0, dx32.data_ptr(), inp)),
            (f"weight grad {out}x{b} · {b}x{inp} (+ to fp32 on oneDNN's)",
             lambda: (torch.mm(d.t(), x, out=gw16), gw32.copy_(gw16)),
             lambda: gemm(ROW_MAJOR, TRANS, NO_TRANS, out, inp, b, 1.0, d.data_ptr(), out, x.data_ptr(), inp,
                          0.0, gw32.data_ptr(), inp)),
        ]
        for name, onednn, mkl in cases:
            t1, t2 = timed(onednn), timed(mkl)
            total_onednn += t1
            total_mkl += t2
            print(f"| {name} | {t1 * 1e6:.1f} | {t2 * 1e6:.1f} | {t1 / t2:.2f} | {flops / t2 / 1e9:.0f} |")
    print(f"| **the three GEMMs of every layer** (the step skips the first layer's input gradient) | {total_onednn * 1e6:.0f} | {total_mkl * 1e6:.0f} | "
          f"**{total_onednn / total_mkl:.2f}** | |")


if __name__ == "__main__":
    main()

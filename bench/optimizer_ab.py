#!/usr/bin/env python3
"""The fused steps' optimizer passes of two engine builds, in one process, alternating: RMSprop
(fashion-mlp's, over its 669,706 parameters) and AdamW (char-gpt's, over its parameter count),
each with and without the bf16 mirror a bf16 lane keeps (`cpu::rmspropStep`, `cpu::adamwStep`
in kernels/cpu_kernels.h, called through ctypes by their mangled names).

Usage: .venv/bin/python bench/optimizer_ab.py --a OLD/libdevicerace_engine.so [--b NEW.so]
           [--threads 1,2] [--reps 15] [--calls 50]

Each figure is the median over --reps of the mean of --calls calls (µs a pass); B ÷ A > 1: B is
faster. The builds alternate rep by rep, so a machine drifting over the run favours neither.
A lane's pass is the same call on the lane's intra-op threads (ATen's, set here by --threads).
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host import cpu_model  # noqa: E402
from gpt_step_budget import AdamW, parameters  # noqa: E402  (char-gpt's flat buffer, cpu::AdamW)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "build", "release", "engine", "libdevicerace_engine.so")
MLP_PARAMETERS = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10  # fashion-mlp, as the engine counts it
GPT_PARAMETERS = parameters("char-gpt")


def passes(path):
    """{name: fn} of one library's optimizer passes."""
    lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    names = subprocess.run(["nm", "-D", "--defined-only", path], check=True, capture_output=True,
                           text=True).stdout.split()
    p, f, i = ctypes.c_void_p, ctypes.c_float, ctypes.c_int64

    def find(part, args):
        found = [n for n in names if n.startswith("_ZN10devicerace6detail3cpu") and part in n]
        if len(found) != 1:
            sys.exit(f"{path}: no single symbol with {part} (found {found})")
        fn = getattr(lib, found[0])
        fn.argtypes, fn.restype = args, None
        return fn

    return {"rmsprop": find("11rmspropStep", [p, p, p, i, f, f, f, f, p]),
            "adamw": find("9adamwStep", [p, p, p, p, i, ctypes.POINTER(AdamW), p])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the engine library before (a copy of libdevicerace_engine.so)")
    ap.add_argument("--b", default=LIB, help="the engine library after (default: build/release's)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    libs = {"A": passes(a.a), "B": passes(a.b)}
    rng = np.random.default_rng(0)

    def buffers(n):
        return {"p": rng.standard_normal(n).astype(np.float32), "g": (rng.standard_normal(n) * 1e-3).astype(np.float32),
                "s1": np.full(n, 0.01, np.float32), "s2": np.full(n, 0.01, np.float32),
                "mirror": np.zeros(n, np.uint16)}

    settings = AdamW(1e-12, 0.9, 0.99, 1e-8, 0.1, 0.99, 0.9, 1.0)
    cases = []
    for name, n in (("rmsprop", MLP_PARAMETERS), ("adamw", GPT_PARAMETERS)):
        for mirror in (False, True):
            cases.append((name, n, mirror, buffers(n)))
    print(f"{cpu_model()} · A {a.a} · B {a.b} · medians of {a.reps} × {a.calls} calls, alternating\n")
    print("| pass | parameters | threads | A µs | B µs | B ÷ A |")
    print("|---|---:|---:|---:|---:|---:|")
    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        for name, n, mirror, b in cases:
            times = {"A": [], "B": []}
            for rep in range(a.reps):
                for which in ("A", "B") if rep % 2 == 0 else ("B", "A"):
                    fn = libs[which][name]
                    m = b["mirror"].ctypes.data if mirror else None
                    t0 = time.perf_counter()
                    for _ in range(a.calls):
                        if name == "rmsprop":  # lr ~0: the weights stay where they are over the run
                            fn(b["p"].ctypes.data, b["g"].ctypes.data, b["s1"].ctypes.data, n, 1e-12, 0.9, 1e-7, 0.0, m)
                        else:
                            fn(b["p"].ctypes.data, b["g"].ctypes.data, b["s1"].ctypes.data, b["s2"].ctypes.data, n,
                               ctypes.byref(settings), m)
                    times[which].append((time.perf_counter() - t0) / a.calls * 1e6)
            ta, tb = statistics.median(times["A"]), statistics.median(times["B"])
            label = f"{'RMSprop' if name == 'rmsprop' else 'AdamW'}{' + bf16 mirror' if mirror else ''}"
            print(f"| {label} | {n:,} | {threads} | {ta:.1f} | {tb:.1f} | {ta / tb:.3f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Where a fused transformer step's time goes, loop by loop: every loop and GEMM the engine's fused
GPT step (engine/src/train/fused/gpt_step.cpp) runs, timed alone at a workload's shape on the built
engine library (ctypes), times the calls a step makes, in fp32 and in bf16 (the bf16 GEMMs timed
here are MKL's cblas_gemm_bf16bf16f32 with fp32 sums; a lane's step takes, per shape, the route
timed fastest on the CPU, the engine's own AMX or AVX-512 BF16 kernel included, and names them in
its execution; its loops write bf16 where a GEMM reads).

The budget says which part a precision change can speed up: bf16 makes the GEMMs faster on a CPU
with AMX, not the loops around them, so the loops' share bounds bf16 / fp32 for the whole step
(the goal is ≥ 2×). Figures are medians of --reps timings of --calls calls each, denormals
flushed as in a lane; loops run in a warm cache, so the sum undercounts a real step (compare with
a race's ms/step). The optimizer is in (the gradient's norm for clipping, LibTorch's, and the AdamW
pass over the flat parameter buffer, which writes the bf16 mirror in bf16); the embedding is left
out. bf16 on a CPU without AMX is MKL's emulation, said in the header.

On several threads the step itself splits the batch's sequences, each thread running its share
alone (train/fused/gpt_step.h); the budget times each loop and GEMM on the whole batch with
--threads threads, so on 2 or more it is for shares, not the step's rates.

With --race, one fair race of the workload (a lane a precision, --threads threads, --race-steps
steps) runs through the CLI too (its bf16 GEMMs by MKL, DEVICERACE_BF16_ROUTE=mkl, as here), and each
precision's budget is set against the race's ms a step and its forward / backward / optimizer
split: a sum far under the race's step means a part the budget does not list (or a call count
here gone stale against gpt_step.cpp).

With --ab OLD_LIB, the loops (not the GEMMs, which are LibTorch's either way) are timed in both
libraries loaded side by side, old and new alternating rep by rep, so the VM's drift hits both
alike: the table gives each loop's old/new ratio (the median of the reps' ratios).

Usage: bench/gpt_step_budget.py [--workload char-gpt|char-gpt-6l] [--precision fp32,bf16]
                                [--threads N] [--reps R] [--markdown FILE] [--ab OLD_LIB]
                                [--race [--race-steps N] [--cli PATH]] [--gemm-routes]

With --gemm-routes (the default on a CPU with AMX, for bf16), every GEMM of the step is timed in bf16
by MKL and by oneDNN (torch.mm), beside fp32's sgemm: which library runs the step's small-K
products faster on that CPU (the engine's own kernels are not timed here: a race's execution
names the routes its step took).
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from host import cpu_flags, cpu_model  # noqa: E402  (bench/support/host.py)

SHAPES = {"char-gpt": (4, 4, 128, 64, 12, 113), "char-gpt-6l": (6, 6, 384, 256, 64, 113)}
# layers, heads, width, context, batch, vocabulary (the fortunes text's)
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "release", "engine",
                   "libdevicerace_engine.so")
CLI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "release", "app", "cli",
                   "devicerace-cli")


class Shape(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("batch", "heads", "seq", "head", "qkv_stride", "y_stride")]


class AdamW(ctypes.Structure):  # cpu::AdamW (kernels/cpu_kernels.h)
    _fields_ = [(n, ctypes.c_float) for n in ("lr", "beta1", "beta2", "eps", "weight_decay", "bias_correction1",
                                              "bias_correction2", "grad_scale")]


def parameters(workload):
    """The fused GPT's parameter count (GptStep's flat buffer): token and position embeddings (the
    head is tied), per layer the four weight matrices (12 C²) with their biases (9 C) and two layer
    norms (4 C), the final layer norm."""
    layers, _, c, seq, _, vocab = SHAPES[workload]
    return vocab * c + seq * c + layers * (12 * c * c + 13 * c) + 2 * c


class CrossEntropy(ctypes.Structure):
    _fields_ = [("loss_sum", ctypes.c_double), ("correct", ctypes.c_int64), ("bad_label", ctypes.c_bool)]


def engine(lib_path):
    """The engine's loops by their mangled names (cpu:: in kernels/gpt_kernels.h and attention_kernels.h)."""
    lib = ctypes.CDLL(lib_path)
    names = subprocess.run(["nm", "-D", "--defined-only", lib_path], check=True, capture_output=True,
                           text=True).stdout.split()
    p, f, i, u = ctypes.c_void_p, ctypes.c_float, ctypes.c_int64, ctypes.c_uint64

    def find(*parts, args, restype=None):
        found = [n for n in names if n.startswith("_ZN10devicerace6detail3cpu") and all(x in n for x in parts)]
        if len(found) != 1:
            sys.exit(f"{lib_path}: no single symbol with {parts} (found {found}; rebuild the engine?)")
        fn = getattr(lib, found[0])
        fn.argtypes, fn.restype = args, restype
        return fn

    bf16 = "4Bf16E"
    return {
        "ln_f": find("13layerNormRows", "PfS4_S4_", args=[p, i, i, p, p, p, p, p]),
        "ln_b": find("13layerNormRows", bf16, args=[p, i, i, p, p, p, p, p]),
        "ln_back": find("21layerNormBackwardRows", args=[p, p, p, p, p, i, i, p]),
        "ln_param": find("19layerNormParamGrads", args=[p, p, p, p, i, i, p, p]),
        "add_rows_bias": find("11addRowsBias", args=[p, p, p, i, i, p, f, u, i]),
        "add_bias": find("7addBias", args=[p, p, i, i]),
        "column_sums": find("10columnSums", bf16, args=[p, i, i, p, p]),
        "gelu_f": find("8biasGelu", "llS2_", args=[p, p, i, i, p]),
        "gelu_b": find("8biasGelu", bf16, args=[p, p, i, i, p]),
        "gelu_back": find("12geluBackward", args=[p, p, i]),
        "to_bf16": find("6toBf16", args=[p, p, i]),
        "cross_entropy": find("17tokenCrossEntropy", args=[p, p, i, i, p, i], restype=CrossEntropy),
        "attn_fwd": find("22causalAttentionForward", args=[ctypes.POINTER(Shape), p, p, p, f, p, p, ctypes.c_int]),
        "adamw": find("9adamwStep", args=[p, p, p, p, i, ctypes.POINTER(AdamW), p]),
        "attn_back": find("23causalAttentionBackward",
                          args=[ctypes.POINTER(Shape), p, p, p, p, p, f, p, p, p, ctypes.c_int]),
    }


def mkl_bf16_gemm():
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    try:
        fn = lib.cblas_gemm_bf16bf16f32
    except AttributeError:
        return None
    fn.restype = None
    fn.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    return fn


def timed_us(fn, reps, calls):
    for _ in range(3):
        fn()
    runs = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls)
    return 1e6 * statistics.median(runs)


def ab_us(fns, reps, calls):
    """Medians of [old, new] µs a call, and of the reps' old/new ratios, timed alternately."""
    for fn in fns:
        fn()
    runs, ratios = ([], []), []
    for _ in range(reps):
        pair = []
        for which, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            pair.append(1e6 * (time.perf_counter() - start) / calls)
            runs[which].append(pair[-1])
        ratios.append(pair[0] / pair[1])
    return statistics.median(runs[0]), statistics.median(runs[1]), statistics.median(ratios)


def calls_for(fn):
    """Calls a rep of fn: ~20 ms of them, at least 3."""
    return max(3, int(20000 / max(1.0, timed_us(fn, 1, 3))))


def gemm_shapes(workload):
    """The step's GEMMs: (name, m, n, k, transA, transB), C = A · B row-major; every layer's (the
    first 12), then the head's."""
    _, _, c, seq, batch, vocab = SHAPES[workload]
    n = batch * seq
    return [("qkv", n, 3 * c, c, False, True), ("projection", n, c, c, False, True),
            ("MLP up", n, 4 * c, c, False, True), ("MLP down", n, c, 4 * c, False, True),
            ("qkv input grad", n, c, 3 * c, False, False), ("projection input grad", n, c, c, False, False),
            ("MLP up input grad", n, c, 4 * c, False, False), ("MLP down input grad", n, 4 * c, c, False, False),
            ("qkv weight grad", 3 * c, c, n, True, False), ("projection weight grad", c, c, n, True, False),
            ("MLP up weight grad", 4 * c, c, n, True, False), ("MLP down weight grad", c, 4 * c, n, True, False),
            ("head (logits)", n, vocab, c, False, True), ("head input grad", n, c, vocab, False, False),
            ("head weight grad", vocab, c, n, True, False)]


def gemm_routes(gemm16, workload, reps):
    """Each of the step's GEMMs in bf16 two ways, a table: MKL's cblas_gemm_bf16bf16f32 (fp32 out: the
    step's route) against torch.mm on bf16 tensors (oneDNN's matmul, bf16 out: the route the step
    would take instead), beside fp32's sgemm. Which library runs char-gpt's K = 128 products faster
    on AMX decides whether the step should leave MKL for them."""
    layers = SHAPES[workload][0]
    gen = torch.Generator().manual_seed(1)
    rows, totals = [], [0.0, 0.0, 0.0]
    for index, (name, m, nn, kk, ta, tb) in enumerate(gemm_shapes(workload)):
        a32 = torch.randn(*((kk, m) if ta else (m, kk)), generator=gen)
        b32 = torch.randn(*((nn, kk) if tb else (kk, nn)), generator=gen)
        a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
        c32, c16 = torch.empty(m, nn), torch.empty(m, nn, dtype=torch.bfloat16)
        mkl = (lambda: gemm16(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, nn, kk, 1.0,
                              a16.data_ptr(), m if ta else kk, b16.data_ptr(), kk if tb else nn, 0.0,
                              c32.data_ptr(), nn))
        onednn = lambda: torch.mm(a16.t() if ta else a16, b16.t() if tb else b16, out=c16)  # noqa: E731
        sgemm = lambda: torch.mm(a32.t() if ta else a32, b32.t() if tb else b32, out=c32)  # noqa: E731
        calls = layers if index < 12 else 1
        us = [timed_us(fn, reps, calls_for(fn)) for fn in (mkl, onednn, sgemm)]
        totals = [t + u * calls for t, u in zip(totals, us)]
        rows.append(f"| {name} {m}×{kk}·{kk}×{nn} | {calls} | {us[0]:.1f} | {us[1]:.1f} | {us[0] / us[1]:.2f} | "
                    f"{us[2]:.1f} | {us[2] / min(us[0], us[1]):.2f} |")
    return ["### bf16 GEMMs: MKL's (fp32 out, the step's) against oneDNN's (torch.mm, bf16 out)", "",
            "| GEMM | calls a step | MKL µs | oneDNN µs | MKL / oneDNN | fp32 sgemm µs | fp32 / the faster bf16 |",
            "|---|---:|---:|---:|---:|---:|---:|", *rows,
            f"| **a step** | | **{totals[0] / 1e3:.2f} ms** | **{totals[1] / 1e3:.2f} ms** | "
            f"**{totals[0] / totals[1]:.2f}** | **{totals[2] / 1e3:.2f} ms** | "
            f"**{totals[2] / min(totals[0], totals[1]):.2f}** |", ""]


def budget(k, gemm16, workload, bf16, reps, old=None):
    """[(part, group, µs a call, calls a step)] for one precision; with `old` (another library's
    functions), [(part, group, old µs, new µs, old/new, calls a step)] for the loops only."""
    layers, heads, c, seq, batch, vocab = SHAPES[workload]
    n, d = batch * seq, c // heads
    gen = torch.Generator().manual_seed(0)
    act = torch.bfloat16 if bf16 else torch.float32

    def rand(*size, dtype=torch.float32):
        return torch.randn(*size, generator=gen).to(dtype)

    ptr = lambda t: t.data_ptr()  # noqa: E731
    x, y, out = rand(n, c), rand(n, c), torch.empty(n, c)
    gamma, beta, mean, rstd = rand(c), rand(c), torch.empty(n), torch.empty(n)
    act_out = torch.empty(n, c, dtype=act)
    # Loops that write their input get their own: repeated calls must not drift the values they time
    # (a GELU backward squaring its own buffer, a bias added ten thousand times).
    wide, wide_act, gelu_in = rand(n, 4 * c), torch.empty(n, 4 * c, dtype=act), rand(n, 4 * c)
    grad_wide, slope = rand(n, 4 * c), 1 + 1e-6 * rand(n, 4 * c)
    qkv, qkv_in = rand(n, 3 * c), rand(n, 3 * c)
    bias4, bias3, sums = rand(4 * c), 1e-9 * rand(3 * c), torch.empty(4 * c)
    logits, dlogits = rand(n, vocab), torch.empty(n, vocab)
    labels = torch.randint(0, vocab, (n,), generator=gen)
    dgamma, dbeta = torch.empty(c), torch.empty(c)
    copy_c, copy_3c, copy_4c = (torch.empty(n, w, dtype=torch.bfloat16) for w in (c, 3 * c, 4 * c))
    stride = (seq + 15) // 16 * 16
    probs, y_heads, dqkv = torch.empty(batch * heads * seq * stride), torch.empty(n, c), torch.empty(n, 3 * c)
    shape = Shape(batch, heads, seq, d, 3 * c, c)
    q, step, scale = ptr(qkv), 4 * c, d ** -0.5
    copy = lambda buf: ptr(buf) if bf16 else None  # noqa: E731  (columnSums' bf16 copy of its input)
    plus_copy = " (+ bf16 copy)" if bf16 else ""
    count = parameters(workload)
    weights, grads, moment1, moment2 = rand(count), 1e-3 * rand(count), torch.zeros(count), torch.zeros(count)
    mirror = torch.empty(count, dtype=torch.bfloat16)
    # Settings of a late step (bias corrections near 1); lr tiny so the weights stay where they are.
    adamw = AdamW(1e-12, 0.9, 0.99, 1e-8, 0.1, 0.99, 0.9, 0.5)
    k["ln_f"](ptr(x), n, c, ptr(gamma), ptr(beta), ptr(out), ptr(mean), ptr(rstd))  # a real mean and rstd
    k["attn_fwd"](ctypes.byref(shape), q, q + step, q + 2 * step, scale, ptr(probs), ptr(y_heads), 0)  # real p

    def loops_of(k):
        ln = k["ln_b"] if bf16 else k["ln_f"]
        gelu = k["gelu_b"] if bf16 else k["gelu_f"]
        parts = [
            ("layer norm", "norms",
             lambda: ln(ptr(x), n, c, ptr(gamma), ptr(beta), ptr(act_out), ptr(mean), ptr(rstd)), 2 * layers + 1),
            ("layer norm backward", "norms",
             lambda: k["ln_back"](ptr(y), ptr(x), ptr(mean), ptr(rstd), ptr(gamma), n, c, ptr(out)), 2 * layers + 1),
            ("layer norm gain and bias gradients", "norms",
             lambda: k["ln_param"](ptr(y), ptr(x), ptr(mean), ptr(rstd), n, c, ptr(dgamma), ptr(dbeta)),
             2 * layers + 1),
            ("qkv bias", "elementwise", lambda: k["add_bias"](ptr(qkv_in), ptr(bias3), n, 3 * c), layers),
            ("residual + bias", "elementwise",
             lambda: k["add_rows_bias"](ptr(x), ptr(y), ptr(gamma), n, c, ptr(out), 0.0, 0, 0), 2 * layers),
            ("bias + GELU", "elementwise", lambda: gelu(ptr(gelu_in), ptr(bias4), n, 4 * c, ptr(wide_act)), layers),
            ("GELU backward", "elementwise", lambda: k["gelu_back"](ptr(grad_wide), ptr(slope), n * 4 * c), layers),
            ("bias gradients, C wide" + plus_copy, "elementwise",
             lambda: k["column_sums"](ptr(y), n, c, ptr(sums), copy(copy_c)), 2 * layers),
            ("bias gradients, 3C wide" + plus_copy, "elementwise",
             lambda: k["column_sums"](ptr(qkv), n, 3 * c, ptr(sums), copy(copy_3c)), layers),
            ("bias gradients, 4C wide" + plus_copy, "elementwise",
             lambda: k["column_sums"](ptr(wide), n, 4 * c, ptr(sums), copy(copy_4c)), layers),
            ("attention forward (tiles)", "attention",
             lambda: k["attn_fwd"](ctypes.byref(shape), q, q + step, q + 2 * step, scale, ptr(probs),
                                   ptr(y_heads), 0), layers),
            ("attention backward (tiles)", "attention",
             lambda: k["attn_back"](ctypes.byref(shape), q, q + step, q + 2 * step, ptr(probs), ptr(y), scale,
                                    ptr(dqkv), ptr(dqkv) + step, ptr(dqkv) + 2 * step, 0), layers),
            ("cross-entropy and its gradient", "loss",
             lambda: k["cross_entropy"](ptr(logits), ptr(labels), n, vocab, ptr(dlogits), n), 1),
        ]
        parts += [("AdamW (+ bf16 mirror)" if bf16 else "AdamW", "optimizer",
                   lambda: k["adamw"](ptr(weights), ptr(grads), ptr(moment1), ptr(moment2), count,
                                      ctypes.byref(adamw), ptr(mirror) if bf16 else None), 1)]
        if bf16:
            parts += [("attention output to bf16", "casts",
                       lambda: k["to_bf16"](ptr(y_heads), ptr(copy_c), n * c), layers),
                      ("logits' gradient to bf16", "casts",
                       lambda: k["to_bf16"](ptr(dlogits), ptr(copy_c), n * vocab), 1)]
        return parts

    if old is not None:
        rows = []
        for (name, group, before, _), (_, _, after, calls) in zip(loops_of(old), loops_of(k)):
            rows.append((name, group, *ab_us([before, after], reps, calls_for(after)), calls))
        return rows
    parts = loops_of(k) + [("gradient norm (clipping)", "optimizer", lambda: torch.linalg.vector_norm(grads), 1)]
    for index, (name, m, nn, kk, ta, tb) in enumerate(gemm_shapes(workload)):
        a = rand(kk, m, dtype=act) if ta else rand(m, kk, dtype=act)
        b = rand(nn, kk, dtype=act) if tb else rand(kk, nn, dtype=act)
        cmat = torch.empty(m, nn)
        if bf16:
            fn = (lambda a=a, b=b, cmat=cmat, m=m, nn=nn, kk=kk, ta=ta, tb=tb: gemm16(
                ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, nn, kk, 1.0, ptr(a),
                m if ta else kk, ptr(b), kk if tb else nn, 0.0, ptr(cmat), nn))
        else:
            fn = (lambda a=a, b=b, cmat=cmat, ta=ta, tb=tb: torch.mm(a.t() if ta else a, b.t() if tb else b,
                                                                    out=cmat))
        parts.append((f"GEMM {name} {m}×{kk}·{kk}×{nn}", "GEMMs", fn, layers if index < 12 else 1))
    return [(name, group, timed_us(fn, reps, calls_for(fn)), calls) for name, group, fn, calls in parts]


def race_steps(cli, workload, precisions, threads, steps):
    """{precision: (ms a step, {phase: ms})} from one fair race of a lane a precision."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "race.json")
        command = [cli, "race", "--workload", workload, "--fair", "--steps", str(steps), "--warmup-steps",
                   str(max(1, steps // 4)), "--eval-every", "0", "--test-limit", "50", "--quiet", "--json", path]
        for precision in precisions:
            command += ["--lane", f"cpu,threads={threads},precision={precision},name={precision}"]
        # The step's bf16 GEMMs by MKL, as timed here: the step's default on AMX CPUs; elsewhere it would
        # take oneDNN's route (emulated bf16 on a CPU without bf16 units: ~15x slower on an AMD EPYC).
        env = dict(os.environ, DEVICERACE_BF16_ROUTE="mkl")
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0 or not os.path.exists(path):
            sys.exit(f"the race failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        with open(path, encoding="utf-8") as f:
            lanes = json.load(f)["lanes"]
    out = {}
    for lane in lanes:
        if lane.get("status") == "finished" and lane.get("steps_per_sec"):
            phases = {k: 1e3 * v for k, v in (lane.get("step_breakdown") or {}).items()}
            out[lane["name"]] = (1e3 / lane["steps_per_sec"], phases)
    return out


def race_line(precision, groups, total, raced):
    if precision not in raced:
        return [f"{precision}: the race's lane did not finish", ""]
    step, phases = raced[precision]
    split = " · ".join(f"{name} {ms:.2f}" for name, ms in phases.items() if ms >= 0.005)
    optimizer = groups.get("optimizer", 0.0) / 1e3
    return [f"A race's {precision} step: **{step:.2f} ms** ({split} ms); the budget sums to {total / 1e3:.2f} ms, "
            f"**{100 * total / 1e3 / step:.0f}%** of it (its optimizer {optimizer:.2f} ms, warm, against the race's "
            f"{phases.get('optimizer', 0.0):.2f}).", ""]


def table(rows, title):
    total = sum(us * calls for _, _, us, calls in rows)
    lines = [f"### {title}", "", "| part | group | µs a call | calls a step | ms a step | share |",
             "|---|---|---:|---:|---:|---:|"]
    for name, group, us, calls in sorted(rows, key=lambda r: -r[2] * r[3]):
        lines.append(f"| {name} | {group} | {us:.1f} | {calls} | {us * calls / 1e3:.3f} | "
                     f"{100 * us * calls / total:.1f}% |")
    groups = {}
    for _, group, us, calls in rows:
        groups[group] = groups.get(group, 0.0) + us * calls
    lines += ["", "| group | ms a step | share |", "|---|---:|---:|"]
    for group, us in sorted(groups.items(), key=lambda g: -g[1]):
        lines.append(f"| {group} | {us / 1e3:.3f} | {100 * us / total:.1f}% |")
    lines.append(f"| **all** | **{total / 1e3:.3f}** | |")
    return lines, groups, total


def ab_table(rows, title, old_lib):
    before = sum(b * calls for _, _, b, _, _, calls in rows)
    after = sum(a * calls for _, _, _, a, _, calls in rows)
    lines = [f"### {title}: the loops, old ({old_lib}) against new, alternating", "",
             "| part | old µs | new µs | old / new (median of the reps) | ms a step saved |",
             "|---|---:|---:|---:|---:|"]
    for name, _, b, a, ratio, calls in sorted(rows, key=lambda r: -(r[2] - r[3]) * r[5]):
        lines.append(f"| {name} | {b:.1f} | {a:.1f} | {ratio:.3f} | {(b - a) * calls / 1e3:.3f} |")
    lines.append(f"| **the loops of a step** | **{before / 1e3:.3f} ms** | **{after / 1e3:.3f} ms** | "
                 f"**{before / after:.3f}** | **{(before - after) / 1e3:.3f}** |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="char-gpt", choices=sorted(SHAPES))
    parser.add_argument("--precision", default="fp32,bf16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--lib", default=LIB)
    parser.add_argument("--markdown", help="also write the tables here")
    parser.add_argument("--ab", metavar="OLD_LIB", help="time the loops against another build's engine library")
    parser.add_argument("--race", action="store_true", help="also race the workload and set the budget against it")
    parser.add_argument("--race-steps", type=int, default=40)
    parser.add_argument("--cli", default=CLI)
    parser.add_argument("--gemm-routes", action="store_true",
                        help="also time every bf16 GEMM by MKL and by oneDNN (default where the CPU has AMX)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    k = engine(args.lib)
    gemm16 = mkl_bf16_gemm()
    flags = cpu_flags()
    amx = "amx_bf16" in flags
    out = [f"# A fused {args.workload} step, loop by loop · {cpu_model()} · {args.threads} thread(s) · "
           f"torch {torch.__version__}", ""]
    totals = {}
    raced = {}
    if args.race and not args.ab:
        raced = race_steps(args.cli, args.workload, args.precision.split(","), args.threads, args.race_steps)
    for precision in args.precision.split(","):
        bf16 = precision == "bf16"
        if bf16 and gemm16 is None:
            out += ["bf16: this LibTorch exports no cblas_gemm_bf16bf16f32 (not an MKL build)", ""]
            continue
        note = ""
        if bf16 and not amx:
            note = " (no AMX here: MKL emulates the bf16 GEMMs, so they say nothing of an AMX CPU)"
        if args.ab:
            rows = budget(k, gemm16, args.workload, bf16, args.reps, old=engine(args.ab))
            out += ab_table(rows, precision, args.ab) + [""]
            continue
        lines, groups, total = table(budget(k, gemm16, args.workload, bf16, args.reps), precision + note)
        totals[precision] = (groups, total)
        out += lines + [""]
        if args.race:
            out += race_line(precision, groups, total, raced)
    if gemm16 is not None and not args.ab and (args.gemm_routes or (amx and "bf16" in args.precision)):
        out += gemm_routes(gemm16, args.workload, args.reps)
    if "fp32" in totals and "bf16" in totals:
        g32, t32 = totals["fp32"]
        g16, t16 = totals["bf16"]
        rest32, rest16 = t32 - g32.get("GEMMs", 0.0), t16 - g16.get("GEMMs", 0.0)
        gemm32, gemm16 = g32.get("GEMMs", 0.0), g16.get("GEMMs", 0.0)
        # With the same loops in both, bf16 / fp32 for the step lies below the GEMMs' own ratio: a
        # goal above that ratio needs faster bf16 GEMMs, not faster loops.
        out += [f"fp32 / bf16, summed here: **{t32 / t16:.2f}×**; the GEMMs alone {gemm32 / 1e3:.2f} against "
                f"{gemm16 / 1e3:.2f} ms a step (**{gemm32 / gemm16:.2f}×**, the most the step can gain with these "
                f"loops); outside the GEMMs fp32 {rest32 / 1e3:.2f} ms, bf16 {rest16 / 1e3:.2f} ms. "
                f"For bf16 at 2× fp32 with these GEMMs, the loops would have to take at most "
                f"{max(0.0, (gemm32 - 2 * gemm16) / 1e3):.2f} ms a step (if they shrank alike in both).", ""]
    text = "\n".join(out)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The convolutions' tuned weight gradient, A/B: DeviceRace lanes with DEVICERACE_CONV_WGRAD=0
(oneDNN's backward-weights kernel for every convolution, as before) against the default (im2col
+ one MKL GEMM for each shape where timing picked it), alternately A B A B, one thread, synthetic
data, the same steps as bench/compare's peers rows. Prints a markdown table (samples/s medians,
the ratio of medians, the pairs' min-max, the backward phase's seconds a step) with the CPU's
model, and each shape's choice from the first default run (DEVICERACE_CONV_WGRAD_LOG).

Usage: bench/conv_wgrad.py [--cli build/release/app/cli/devicerace-cli] [--pairs 3]
                           [--workloads davidnet,cifar-resnet20,...] [--threads 1] [--json F]
Run it on an otherwise idle machine, with `env -u OMP_WAIT_POLICY` (libgomp's default).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)

# workload -> (batch or None for its default, steps, warm-up steps): bench/compare.py's CPU rows.
RUNS = {
    "fashion-cnn": (None, 100, 10),
    "cifar-vgg": (None, 250, 20),
    "davidnet": (64, 12, 3),
    "cifar-resnet20": (None, 40, 5),
    "cifar-resnet32": (None, 25, 5),
    "cifar-resnet56": (None, 15, 3),
    "imagenet-resnet50": (8, 8, 3),
}


def race(cli, workload, threads, wgrad, log=False):
    batch, steps, warmup = RUNS[workload]
    lane = f"cpu,threads={threads}" + (f",batch={batch}" if batch else "")
    env = dict(os.environ, DEVICERACE_CONV_WGRAD=wgrad)
    if log:
        env["DEVICERACE_CONV_WGRAD_LOG"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "race.json")
        proc = subprocess.run([cli, "race", "--workload", workload, "--lane", lane, "--steps", str(steps),
                               "--warmup-steps", str(warmup), "--data", "synthetic", "--test-limit", "64",
                               "--quiet", "--json", out], capture_output=True, text=True, env=env, timeout=1800)
        if not os.path.exists(out):
            sys.exit(f"{workload}: the race wrote no summary: {proc.stderr.strip()[-400:]}")
        with open(out, encoding="utf-8") as f:
            lane0 = json.load(f)["lanes"][0]
    if not lane0.get("samples_per_sec"):
        sys.exit(f"{workload}: no throughput: {lane0.get('error')}")
    choices = [l for l in proc.stderr.splitlines() if l.startswith("conv weight gradient")]
    backward = (lane0.get("step_breakdown") or {}).get("backward")
    return lane0["samples_per_sec"], backward, choices


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli"))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workloads", default=",".join(RUNS))
    ap.add_argument("--json", help="write the runs here")
    args = ap.parse_args()
    rows, raw = [], {}
    for workload in args.workloads.split(","):
        off, on, ratios, shapes = [], [], [], []
        for i in range(args.pairs):
            a = race(args.cli, workload, args.threads, "0")
            b = race(args.cli, workload, args.threads, "", log=(i == 0))
            off.append(a)
            on.append(b)
            ratios.append(b[0] / a[0])
            shapes = shapes or b[2]
            print(f"{workload} pair {i + 1}: oneDNN {a[0]:.2f}, tuned {b[0]:.2f} samples/s ({b[0] / a[0]:.3f})",
                  file=sys.stderr, flush=True)
        med = lambda runs, k: statistics.median(r[k] for r in runs if r[k] is not None)  # noqa: E731
        rows.append((workload, med(off, 0), med(on, 0), min(ratios), max(ratios), med(off, 1), med(on, 1),
                     sum(1 for s in shapes if s.endswith(": GEMM")), len(shapes)))
        raw[workload] = {"onednn": off, "tuned": on, "choices": shapes}
    print(f"CPU: {cpu_model()}, {args.threads} thread(s), {args.pairs} alternating pairs, synthetic data\n")
    print("| workload | oneDNN wgrad, samples/s | tuned, samples/s | ratio | min-max | backward s/step | GEMM shapes |")
    print("|---|---:|---:|---:|---|---|---|")
    for w, a, b, lo, hi, ba, bb, gemm, n in rows:
        print(f"| {w} | {a:.2f} | {b:.2f} | **{b / a:.3f}** | {lo:.3f}-{hi:.3f} | {ba:.3f} -> {bb:.3f} | {gemm} of {n} |")
    print()
    for w in raw:
        for line in raw[w]["choices"]:
            print(f"    {w}: {line}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cpu": cpu_model(), "threads": args.threads, "runs": raw}, f, indent=1)


if __name__ == "__main__":
    main()

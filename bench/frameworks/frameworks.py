#!/usr/bin/env python3
"""Seed 003's framework table on this machine: the same workload trained by DeviceRace's C++, plain
PyTorch and Keras 3 on JAX, TensorFlow and PyTorch, each lane alone on the machine, through
`devicerace-cli race` (so every figure is what a race shows: the median samples/s of the report
intervals after the warm-up, the device synchronised at each report point).

Usage (from the repository root; scripts/setup --frameworks first):
    .venv/bin/python bench/frameworks/frameworks.py [--runs 3] [--device cpu] [--threads N]
        [--workloads fashion-mlp,fashion-cnn] [--json OUT.json]

Prints a Markdown table: per workload and framework the median samples/s of --runs runs (runs
interleaved: run 1 of every framework, then run 2, ...), the time one epoch of the workload's
60,000 training examples takes at that rate, and both as ratios to DeviceRace (seed 003's
"normalised training time": lower is better). A framework whose lane is refused (not installed)
is reported as such, not left out silently.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)
CLI = os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")
# The lanes raced, in table order: (label, framework= value).
FRAMEWORKS = [("DeviceRace C++", "devicerace"), ("PyTorch", "pytorch"), ("Keras/JAX", "keras-jax"),
              ("Keras/TensorFlow", "keras-tensorflow"), ("Keras/PyTorch", "keras-torch")]
# Steps per run: enough report intervals after the 20 warm-up steps for a stable median on a
# 2-core CPU, well short of an epoch (no evaluation inside the measured steps).
STEPS = {"fashion-mlp": 600, "fashion-cnn": 100}
# Training examples in one epoch of the Fashion-MNIST workloads.
EPOCH_EXAMPLES = 60000



def race_once(cli, workload, framework, device, threads, steps):
    """One lane alone: (samples/s or None, summary lane dict, error text)."""
    lane = f"{device},threads={threads},name={framework}"
    if framework != "devicerace":
        lane += f",framework={framework}"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "race.json")
        r = subprocess.run([cli, "race", "--workload", workload, "--lane", lane, "--steps", str(steps),
                            "--test-limit", "1000", "--quiet", "--json", out], capture_output=True, text=True,
                           env=dict(os.environ), timeout=1800)  # OMP_WAIT_POLICY: as given, else the CLI's choice
        if r.returncode != 0 or not os.path.exists(out):
            return None, {}, (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or [f"exit {r.returncode}"]
        with open(out) as f:
            summary = json.load(f)
    lane = summary["lanes"][0]
    if lane["status"] != "finished" or not lane.get("samples_per_sec"):
        return None, lane, [lane.get("error") or lane["status"]]
    return lane["samples_per_sec"], lane, []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="the lane device for every framework (cpu, cuda, cuda:N)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="CPU threads per lane (default: every CPU, the best CPU lane)")
    ap.add_argument("--workloads", default="fashion-mlp,fashion-cnn")
    ap.add_argument("--cli", default=CLI)
    ap.add_argument("--json", help="also write every run's figures here")
    args = ap.parse_args(argv)
    workloads = args.workloads.split(",")
    results = {w: {f: {"rates": [], "errors": [], "execution": ""} for _, f in FRAMEWORKS} for w in workloads}
    for run in range(args.runs):
        for w in workloads:
            for label, f in FRAMEWORKS:
                rate, lane, errors = race_once(args.cli, w, f, args.device, args.threads, STEPS.get(w, 200))
                entry = results[w][f]
                if rate is not None:
                    entry["rates"].append(rate)
                    entry["execution"] = lane.get("execution", "")
                entry["errors"] += errors
                print(f"run {run + 1}/{args.runs} {w:12} {label:17} "
                      + (f"{rate:10,.0f} samples/s" if rate else f"failed: {errors}"), file=sys.stderr, flush=True)

    print(f"\n{platform.node()} · {cpu_model()} ({os.cpu_count()} CPUs) · {args.device}, threads={args.threads} · "
          f"median of {args.runs} runs · {datetime.date.today()}\n")
    print("| workload | framework | samples/s | × DeviceRace | epoch (60k) s | time × DeviceRace |")
    print("|---|---|---:|---:|---:|---:|")
    for w in workloads:
        base = results[w]["devicerace"]["rates"]
        base_rate = statistics.median(base) if base else None
        for label, f in FRAMEWORKS:
            rates = results[w][f]["rates"]
            if not rates:
                why = results[w][f]["errors"][-1] if results[w][f]["errors"] else "no result"
                print(f"| {w} | {label} | refused/failed: {why} | | | |")
                continue
            rate = statistics.median(rates)
            ratio = f"{rate / base_rate:.2f}" if base_rate else "-"
            time_ratio = f"{base_rate / rate:.2f}" if base_rate else "-"
            print(f"| {w} | {label} | {rate:,.0f} | {ratio} | {EPOCH_EXAMPLES / rate:.1f} | {time_ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "threads": args.threads, "runs": args.runs, "steps": STEPS,
                       "host": platform.node(), "cpu": cpu_model(), "date": str(datetime.date.today()), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

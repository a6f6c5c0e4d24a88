#!/usr/bin/env python3
"""Data-parallel scaling on this machine: DeviceRace's data-parallel lanes (c10d Gloo, 1 and 2
worker processes x 1 thread, fair mode, synthetic data) against PyTorch's own DDP on the same
LibTorch (bench/peers/ddp_peer.py, same workers, threads and per-worker batch).

    python bench/parallel/run.py [--cli build/release/app/cli/devicerace-cli] [--runs 3]
                                 [--workloads fashion-cnn,cifar-resnet20] [--steps 80]

Prints a Markdown table (medians of --runs runs): samples/s of 1 and 2 workers, speedup,
efficiency, allreduce share, and the 2-worker lane's ratio to DDP's 2 workers; --json writes the
raw figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def devicerace(cli, workload, steps, batch):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "s.json")
        r = subprocess.run([cli, "race", "--workload", workload, "--data", "synthetic", "--steps", str(steps),
                            "--test-limit", "256",
                            "--fair", "--quiet", "--json", out,
                            "--lane", f"cpu,workers=1,threads=1,batch={batch},name=one",
                            "--lane", f"cpu,workers=2,threads=1,batch={batch},name=two"],
                           capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
        if r.returncode != 0:
            sys.exit(f"devicerace-cli failed: {r.stderr}")
        with open(out) as f:
            lanes = {l["name"]: l for l in json.load(f)["lanes"]}
    return lanes["one"]["samples_per_sec"], lanes["two"]["samples_per_sec"], lanes["two"]["allreduce_share"]


def ddp(python, workload, workers, steps, batch):
    r = subprocess.run([python, os.path.join(ROOT, "bench", "peers", "ddp_peer.py"), "--workload", workload,
                        "--workers", str(workers), "--threads", "1", "--batch", str(batch), "--steps", str(steps)],
                       capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if r.returncode != 0:
        sys.exit(f"ddp_peer failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["samples_per_sec"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workloads", default="fashion-cnn,cifar-resnet20")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--json")
    args = p.parse_args()
    rows, raw = [], {}
    for workload in args.workloads.split(","):
        runs = {"dr1": [], "dr2": [], "share": [], "ddp1": [], "ddp2": []}
        for _ in range(args.runs):
            one, two, share = devicerace(args.cli, workload, args.steps, args.batch)
            runs["dr1"].append(one)
            runs["dr2"].append(two)
            runs["share"].append(share)
            runs["ddp1"].append(ddp(args.python, workload, 1, args.steps, args.batch))
            runs["ddp2"].append(ddp(args.python, workload, 2, args.steps, args.batch))
        m = {k: statistics.median(v) for k, v in runs.items()}
        raw[workload] = runs
        rows.append(f"| {workload} | {m['dr1']:,.0f} | {m['dr2']:,.0f} | {m['dr2'] / m['dr1']:.2f}× | "
                    f"{m['dr2'] / m['dr1'] / 2:.0%} | {m['share']:.0%} | {m['ddp1']:,.0f} | {m['ddp2']:,.0f} | "
                    f"{m['ddp2'] / m['ddp1']:.2f}× | **{m['dr2'] / m['ddp2']:.2f}** |")
    print(f"Batch {args.batch} per worker, {args.steps} steps, synthetic data, 1 thread per worker, "
          f"medians of {args.runs} runs.\n")
    print("| workload | DeviceRace 1 worker | 2 workers | speedup | efficiency | allreduce share | "
          "DDP 1 | DDP 2 | DDP speedup | DeviceRace 2 ÷ DDP 2 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()

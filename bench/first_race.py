#!/usr/bin/env python3
"""Which first race shows a real difference on this machine? (the default race)

Runs the candidate pairs of CPU lanes the engine's defaultRace() chooses between, each pair in
fair mode (one lane at a time, alone on the machine) with `devicerace-cli race`, --runs times,
and prints each pair's ratio (second lane's samples/s over the first's): the median of the runs
with min-max. Candidates: 1 thread vs every core, and fp32 vs bf16 on every core, for
fashion-mlp and fashion-cnn.

    python3 bench/first_race.py [--runs 3] [--steps 600] [--cli build/release/app/cli/devicerace-cli]
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
DEFAULT_CLI = os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")



def race(cli, workload, lanes, steps):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "s.json")
        args = [cli, "race", "--workload", workload, "--fair", "--quiet", "--steps", str(steps),
                "--warmup-steps", "50", "--json", out]
        for lane in lanes:
            args += ["--lane", lane]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(args)} failed ({r.returncode}): {r.stderr[-800:]}")
        with open(out) as f:
            summary = json.load(f)
    return [l["samples_per_sec"] for l in summary["lanes"]], summary.get("explanations", [])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=DEFAULT_CLI)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    pairs = [
        ("1 thread vs {c}".format(c=cores), ["cpu,threads=1", f"cpu,threads={cores}"]),
        (f"fp32 vs bf16, {cores} threads", [f"cpu,threads={cores}", f"cpu,threads={cores},precision=bf16"]),
    ]
    print(f"CPU: {cpu_model()} · {cores} CPUs · fair mode · {args.steps} steps · median of {args.runs} runs")
    print()
    print("| workload | pair | first lane samples/s | second lane samples/s | ratio (min-max) |")
    print("|---|---|---:|---:|---:|")
    for workload in ("fashion-mlp", "fashion-cnn"):
        for title, lanes in pairs:
            firsts, seconds, ratios, why = [], [], [], []
            for _ in range(args.runs):
                (a, b), explained = race(args.cli, workload, lanes, args.steps)
                firsts.append(a)
                seconds.append(b)
                ratios.append(b / a)
                why = explained or why
            print(f"| {workload} | {title} | {statistics.median(firsts):,.0f} | {statistics.median(seconds):,.0f} | "
                  f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}-{max(ratios):.2f}) |", flush=True)
            for w in why:
                print(f"|  | why: {w} | | | |", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Two builds of DeviceRace on the same lanes: a change's before and after, on one machine.

Each run races the same lanes (a fair race: one lane at a time) with build A's devicerace-cli,
then with build B's, the order alternating run by run (A B, B A, A B, ...) so that a machine
growing slower or faster over the runs favours neither. A row is one lane: each build's
samples/s (the median over the runs) and B ÷ A as the median of the runs' ratios, min–max beside
it. A ratio whose range holds 1 is within this machine's noise.

Usage: .venv/bin/python bench/build_ab.py --a OLD/devicerace-cli --b NEW/devicerace-cli
           [--runs 3] [--workloads fashion-mlp,fashion-cnn,char-gpt] [--lanes cpu,threads=1 ...]
           [--steps N]
           [--markdown OUT.md]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from host import cpu_model  # noqa: E402

# Steps per workload: a few seconds to ~30 s a lane at 1 thread on a 2-vCPU AMD EPYC.
STEPS = {"fashion-mlp": 600, "fashion-cnn": 60, "char-gpt": 150, "cifar-resnet20": 30, "charlstm": 150,
         "imdb-bilstm": 60}


def race(cli, workload, lanes, steps):
    """{lane spec: samples/s} of one fair race of `lanes` by `cli`."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "race.json")
        argv = [cli, "race", "--workload", workload, "--fair", "--steps", str(steps), "--test-limit", "1000",
                "--quiet", "--json", out]
        for i, spec in enumerate(lanes):
            argv += ["--lane", f"{spec},name=lane{i}"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        if not os.path.exists(out):
            raise SystemExit(f"{cli}: the race failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
        with open(out) as f:
            by_name = {lane["name"]: lane for lane in json.load(f)["lanes"]}
    return {spec: by_name.get(f"lane{i}", {}).get("samples_per_sec") for i, spec in enumerate(lanes)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="build A's devicerace-cli (before)")
    ap.add_argument("--b", required=True, help="build B's devicerace-cli (after)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workloads", default="fashion-mlp,fashion-cnn,char-gpt")
    ap.add_argument("--lanes", nargs="+", default=["cpu,threads=1", f"cpu,threads={os.cpu_count() or 1}"])
    ap.add_argument("--steps", type=int, help="steps per lane for every workload (default: each its own)")
    ap.add_argument("--markdown", metavar="FILE")
    args = ap.parse_args()
    for cli in (args.a, args.b):
        if not os.access(cli, os.X_OK):
            raise SystemExit(f"not an executable: {cli}")
    started = datetime.datetime.now(datetime.timezone.utc)
    rows = [f"Build A `{args.a}`, build B `{args.b}` · {started:%Y-%m-%d %H:%M} UTC · {cpu_model()} "
            f"({os.cpu_count()} CPUs) · fair races, {args.runs} runs, the builds alternating",
            "", "| workload | lane | A samples/s | B samples/s | B ÷ A (median) | min–max |", "|---|---|---:|---:|---:|---|"]
    for workload in args.workloads.split(","):
        steps = args.steps or STEPS.get(workload, 60)
        runs = {"a": [], "b": []}
        for run in range(args.runs):
            order = ("a", "b") if run % 2 == 0 else ("b", "a")
            for which in order:
                runs[which].append(race(getattr(args, which), workload, args.lanes, steps))
                print(f"{workload} run {run + 1} {which.upper()}: {runs[which][-1]}", file=sys.stderr, flush=True)
        for spec in args.lanes:
            a = [r[spec] for r in runs["a"] if r[spec]]
            b = [r[spec] for r in runs["b"] if r[spec]]
            ratios = [rb[spec] / ra[spec] for ra, rb in zip(runs["a"], runs["b"]) if ra[spec] and rb[spec]]
            if not ratios:
                rows.append(f"| {workload} | {spec} | – | – | – | no figures |")
                continue
            rows.append(f"| {workload} ({steps} steps) | `{spec}` | {statistics.median(a):,.0f} | "
                        f"{statistics.median(b):,.0f} | {statistics.median(ratios):.2f} | "
                        f"{min(ratios):.2f}–{max(ratios):.2f} |")
    text = "\n".join(rows) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

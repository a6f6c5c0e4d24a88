#!/usr/bin/env python3
"""fashion-mlp from 1 to 2 threads, with the fused dense step's shares even or balanced.

Each round runs three fair races of one lane each, in a rotating order: one thread, two threads
with even shares (DEVICERACE_DENSE_BALANCE=0) and two threads with shares that follow each
thread's measured speed (the default). With --neighbour, a busy loop pinned to the last CPU
runs throughout, as another process on a shared machine would: the lane's threads then do not
get the same CPU time, which even shares cannot follow.

    .venv/bin/python bench/thread_shares.py --rounds 5 [--steps 1000] [--neighbour]
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
from host import cpu_model  # noqa: E402

SIDES = [("1 thread", "cpu,threads=1", {}),
         ("2 threads, even shares", "cpu,threads=2", {"DEVICERACE_DENSE_BALANCE": "0"}),
         ("2 threads, balanced shares", "cpu,threads=2", {})]


def one_race(cli, workload, steps, spec, env):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "race.json")
        argv = [cli, "race", "--workload", workload, "--fair", "--steps", str(steps), "--test-limit", "200",
                "--quiet", "--json", out, "--lane", spec + ",name=lane"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=dict(os.environ, **env))
        if not os.path.exists(out):
            raise SystemExit(f"the race failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
        with open(out) as f:
            lane = json.load(f)["lanes"][0]
    return lane["samples_per_sec"], lane.get("final_test_loss")


def neighbour():
    """A busy loop on the last CPU, in its own process (killed by the caller)."""
    cpu = max(os.sched_getaffinity(0))
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code]), cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli"))
    ap.add_argument("--workload", default="fashion-mlp")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--neighbour", action="store_true", help="a busy loop pinned to the last CPU throughout")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    busy, busy_cpu = neighbour() if args.neighbour else (None, None)
    rates = {name: [] for name, _, _ in SIDES}
    losses = {name: set() for name, _, _ in SIDES}
    try:
        for i in range(args.rounds):
            order = SIDES[i % len(SIDES):] + SIDES[:i % len(SIDES)]
            for name, spec, env in order:
                rate, loss = one_race(args.cli, args.workload, args.steps, spec, env)
                rates[name].append(rate)
                losses[name].add(loss)
                print(f"round {i + 1}, {name}: {rate:,.0f} samples/s", file=sys.stderr)
    finally:
        if busy:
            busy.kill()
            busy.wait()
    one = rates[SIDES[0][0]]
    print(f"{args.workload}, {args.steps} steps, fair, one lane a race; {cpu_model()}, {os.cpu_count()} logical CPUs"
          + (f"; a busy loop on CPU {busy_cpu} throughout" if busy else "") + f"; {args.rounds} rounds\n")
    print("| lane | samples/s (median) | × 1 thread (median of rounds) | rounds' ratios |")
    print("|---|---:|---:|---|")
    for name, _, _ in SIDES:
        ratios = [r / o for r, o in zip(rates[name], one)]
        print(f"| {name} | {statistics.median(rates[name]):,.0f} | {statistics.median(ratios):.2f} | "
              f"{', '.join(f'{r:.2f}' for r in ratios)} |")
    even, balanced = rates[SIDES[1][0]], rates[SIDES[2][0]]
    print(f"\nbalanced / even, median of rounds: {statistics.median(b / e for b, e in zip(balanced, even)):.3f}")
    print("final test losses: " + "; ".join(f"{name}: {', '.join(f'{l:.9g}' for l in sorted(losses[name]))}"
                                             for name, _, _ in SIDES))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "workload": args.workload, "steps": args.steps,
                       "neighbour": bool(busy), "rates": rates}, f, indent=1)


if __name__ == "__main__":
    main()

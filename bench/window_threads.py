#!/usr/bin/env python3
"""Does a fair race in the window scale with threads as the CLI's does?

The window waits passively (it starts itself with OMP_WAIT_POLICY=PASSIVE: its live lanes share
the cores). A fair race there now runs each CPU lane of several threads in a process of its own,
whose threads keep libgomp's spinning waits (race_plan.h, spinsOnlyInProcesses). This runs the
same fair race (cpu·1 vs cpu·2) three ways, --runs times each, alternating the order:
  window   the window as a user starts it (OMP_WAIT_POLICY unset: it sets PASSIVE itself)
  before   the window with OMP_WAIT_POLICY=PASSIVE from outside: every lane a thread of the
           passive window, as window races once ran
  cli      devicerace-cli race --fair, OMP_WAIT_POLICY unset (it spins: waitPolicyFor)
and prints, per workload and way, each lane's median rate and the 2-thread/1-thread ratio
(median, min-max) as a Markdown table naming the CPU. The window runs offscreen to the race's
end (--start --screenshot), recording; its rates are read back with `devicerace-cli replay`.

    python3 bench/window_threads.py [--runs 3] [--workloads char-gpt:200,fashion-mlp:600]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)

BUILD = os.path.join(ROOT, "build", "release", "app")
CLI = os.path.join(BUILD, "cli", "devicerace-cli")
GUI = os.path.join(BUILD, "gui", "devicerace")
LANES = ["--lane", "cpu,threads=1", "--lane", "cpu,threads=2"]


def rates(table):
    """Lane name -> samples/s (tokens/s for a language model) from a summary table's rows."""
    out = {}
    for line in table.splitlines():
        m = re.match(r"^(cpu·[12])\s+cpu\s+([\d,.]+)\s", line)
        if m:
            out[m.group(1)] = float(m.group(2).replace(",", ""))
    if len(out) != 2:
        raise SystemExit("no rates for both lanes in:\n" + table)
    return out


def env_for(way):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "DEVICERACE_OMP_WAIT")}
    if way == "before":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["QT_QPA_PLATFORM"] = "offscreen"
    return env


def race(way, workload, steps):
    # One evaluation, at the end: the window's default (about ten) made a char-gpt lane's
    # evaluations take longer than its training.
    common = ["--workload", workload, "--fair", "--steps", str(steps), "--eval-every", str(steps), *LANES]
    if way == "cli":
        r = subprocess.run([CLI, "race", *common, "--quiet"], capture_output=True, text=True, env=env_for(way),
                           timeout=1800)
        if r.returncode != 0:
            raise SystemExit(r.stdout + r.stderr)
        return rates(r.stdout)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([GUI, *common, "--start", "--screenshot", os.path.join(tmp, "end.png"), "--record",
                            os.path.join(tmp, "rec")], capture_output=True, text=True, env=env_for(way), timeout=1800)
        if r.returncode != 0:
            raise SystemExit(r.stdout + r.stderr)
        (rec,) = os.listdir(os.path.join(tmp, "rec"))
        r = subprocess.run([CLI, "replay", os.path.join(tmp, "rec", rec)], capture_output=True, text=True, timeout=300)
        return rates(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workloads", default="char-gpt:200,fashion-mlp:600", help="NAME:STEPS,...")
    ap.add_argument("--ways", default="window,before,cli")
    args = ap.parse_args()
    ways = args.ways.split(",")
    rows = []
    for spec in args.workloads.split(","):
        workload, steps = spec.split(":")
        seen = {w: [] for w in ways}
        for run in range(args.runs):
            for way in ways if run % 2 == 0 else list(reversed(ways)):
                r = race(way, workload, int(steps))
                seen[way].append(r)
                print(f"{workload} run {run + 1} {way}: cpu·1 {r['cpu·1']:,.0f} cpu·2 {r['cpu·2']:,.0f} "
                      f"({r['cpu·2'] / r['cpu·1']:.2f}x)", file=sys.stderr, flush=True)
        for way in ways:
            ratios = [r["cpu·2"] / r["cpu·1"] for r in seen[way]]
            rows.append((workload, way, statistics.median(r["cpu·1"] for r in seen[way]),
                         statistics.median(r["cpu·2"] for r in seen[way]), statistics.median(ratios), min(ratios),
                         max(ratios)))
    print(f"{cpu_model()} ({os.cpu_count()} CPUs), fair races, {args.runs} runs each, order alternating\n")
    print("| workload | way | cpu·1 rate | cpu·2 rate | cpu·2 ÷ cpu·1 (median) | min–max |")
    print("|---|---|---:|---:|---:|---|")
    for workload, way, one, two, ratio, lo, hi in rows:
        print(f"| {workload} | {way} | {one:,.0f} | {two:,.0f} | **{ratio:.2f}** | {lo:.2f}–{hi:.2f} |")


if __name__ == "__main__":
    main()

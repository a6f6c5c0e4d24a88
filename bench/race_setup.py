#!/usr/bin/env python3
"""How long a race with framework lanes takes to set up: from starting devicerace-cli to its first
line, which it prints once every lane's worker is ready (the framework's import, the data, the
model). With --old-lib, the same race against another build of the engine library, alternating
(LD_LIBRARY_PATH goes before the CLI's RUNPATH), medians of --pairs pairs.

    .venv/bin/python bench/race_setup.py --pairs 3 [--old-lib /tmp/old_engine]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402

LANES = ["cpu,threads=1,framework=keras-jax,name=jax", "cpu,threads=1,framework=keras-tensorflow,name=tf",
         "cpu,threads=1,framework=keras-torch,name=ktorch", "cpu,threads=1,framework=pytorch,name=pytorch"]


def one_race(cli, lib):
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    args = [cli, "race", "--workload", "fashion-mlp", "--steps", "2", "--warmup-steps", "0", "--train-limit", "256",
            "--test-limit", "64", "--eval-every", "0"]
    for lane in LANES:
        args += ["--lane", lane]
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = p.stdout.readline()
    setup = time.monotonic() - t0
    out, err = p.communicate(timeout=600)
    if p.returncode != 0 or not first:
        raise SystemExit(f"the race failed ({p.returncode}): {first}{out[-800:]}{err[-1500:]}")
    return setup


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli"))
    ap.add_argument("--old-lib", help="a folder with another build's libdevicerace_engine.so.0")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    sides = [("this build", None)] + ([("--old-lib", args.old_lib)] if args.old_lib else [])
    times = {name: [] for name, _ in sides}
    for i in range(args.pairs):
        order = sides if i % 2 == 0 else list(reversed(sides))
        for name, lib in order:
            times[name].append(one_race(args.cli, lib))
            print(f"pair {i + 1}, {name}: set up in {times[name][-1]:.1f} s", file=sys.stderr)
    print(f"Race set-up, {len(LANES)} framework lanes ({', '.join(l.split('framework=')[1].split(',')[0] for l in LANES)}), "
          f"fashion-mlp; {cpu_model()}, {os.cpu_count()} logical CPUs; {args.pairs} runs a side\n")
    print("| engine | set-up s (median) | runs |")
    print("|---|---:|---|")
    for name, _ in sides:
        print(f"| {name} | {statistics.median(times[name]):.1f} | {', '.join(f'{t:.1f}' for t in times[name])} |")
    if args.old_lib:
        ratios = [o / n for o, n in zip(times["--old-lib"], times["this build"])]
        print(f"\nold ÷ this build: median **{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()

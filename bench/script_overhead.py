#!/usr/bin/env python3
"""What DeviceRace's instrumentation of an unchanged PyTorch script costs: the same small script
(tests/scripts/train_fashion.py: an MLP on Fashion-MNIST, batch 64, ~1 ms a step on one thread)
run alternately without and with the instrumentation a script lane gives it (the devicerace
sitecustomize on PYTHONPATH, the report channel open and drained as the lane drains it), one
thread each, one process at a time. The figure is the script's own steps/s over its steps after
the warm-up, as the script timed them; the ratio is instrumented / plain per pair, and the
median of the pairs is printed with the machine's CPU.

    .venv/bin/python bench/script_overhead.py [--pairs 7] [--steps 3000] [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANES = os.path.join(ROOT, "lanes", "python")
SCRIPT = os.path.join(ROOT, "tests", "scripts", "train_fashion.py")
WARMUP = 100


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(instrumented, steps, out):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    for key in [k for k in env if k.startswith("DEVICERACE_")]:
        env.pop(key)
    pass_fds = ()
    reader = None
    lines = []
    if instrumented:
        read_fd, write_fd = os.pipe()
        env["DEVICERACE_REPORT_FD"] = str(write_fd)
        env["DEVICERACE_REPORT_INTERVAL"] = "0.1"
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(LANES, "devicerace_site"), LANES])
        pass_fds = (write_fd,)

        def drain():
            with os.fdopen(read_fd, "rb") as f:
                for line in f:
                    lines.append(line)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
    subprocess.run([sys.executable, SCRIPT, "--steps", str(steps), "--out", out], env=env, check=True,
                   pass_fds=pass_fds, stdout=subprocess.DEVNULL, cwd=ROOT)
    if instrumented:
        os.close(write_fd)
        reader.join(10)
    with open(out) as f:
        ends = json.load(f)["ends"]
    rate = (len(ends) - WARMUP) / (ends[-1] - ends[WARMUP - 1])
    reports = [json.loads(l) for l in lines if l.startswith(b"{")]
    counted = max((r.get("step", 0) for r in reports if r.get("t") == "step"), default=0)
    return rate, counted


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=7)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--json", default="")
    a = p.parse_args()
    out = os.path.join(tempfile.mkdtemp(prefix="devicerace-overhead-"), "own.json")
    pairs = []
    for i in range(a.pairs):
        plain, _ = run(False, a.steps, out)
        hooked, counted = run(True, a.steps, out)
        if counted != a.steps:
            sys.exit(f"the instrumentation counted {counted} steps of {a.steps}")
        pairs.append({"plain": plain, "instrumented": hooked, "ratio": hooked / plain})
        print(f"pair {i + 1}: plain {plain:8.1f} steps/s, instrumented {hooked:8.1f} steps/s, "
              f"ratio {hooked / plain:.3f}", flush=True)
    ratio = statistics.median(p["ratio"] for p in pairs)
    plain = statistics.median(p["plain"] for p in pairs)
    print(f"\n{cpu_model()}, 1 thread, {a.steps} steps of batch 64 per run, median of {a.pairs} pairs:")
    print(f"  plain {plain:.1f} steps/s ({1000 / plain:.2f} ms a step); instrumented / plain = {ratio:.3f} "
          f"(cost {max(0.0, 1 - ratio):.1%})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_model(), "steps": a.steps, "pairs": pairs, "median_ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()

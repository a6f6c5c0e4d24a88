#!/usr/bin/env python3
"""What DeviceRace's instrumentation of an unchanged PyTorch script costs (way 1 of "Race your own
training"): a small training loop (an MLP on Fashion-MNIST-shaped data, 784-256-10, batch 64,
Adam, one thread: about 1-2 ms a step) run in one process as a script lane runs it (the devicerace
sitecustomize loaded, the report channel open and drained as the lane drains it), in alternate
blocks of steps with the instrumentation in (its wrappers and optimizer hooks) and out
(PyTorch's own functions put back: devicerace._torch.set_enabled). Alternating blocks in one
process takes the machine's slow drifts out of the comparison (runs of separate processes on a
2-vCPU VM differed by up to 30%). The figure per pair of blocks is instrumented / plain steps/s;
the median of the pairs is printed with the machine's CPU, and beside it the ratio of each way's
fastest tenth of blocks (the least disturbed by the machine's noise) and what that makes in
microseconds per step.

    .venv/bin/python bench/script_overhead.py [--pairs 150] [--block 100] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANES = os.path.join(ROOT, "lanes", "python")
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402


def child(pairs, block, tiny):
    """In the lane's environment: the loop, its blocks timed, the ratios printed as JSON."""
    import torch
    import torch.nn.functional as F
    from devicerace import _torch, lane

    assert _torch._installed and lane().in_race, "the instrumentation is not installed"
    torch.manual_seed(0)
    width = 8 if tiny else 784  # --tiny: a step of a few tens of microseconds, all overhead shows
    x, y = torch.rand(4096, width), torch.randint(0, 10, (4096,))
    hidden = 8 if tiny else 256
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    position = 0

    def run(steps):
        nonlocal position
        t0 = time.perf_counter()
        for _ in range(steps):
            i = position % (4096 - 64)
            position += 64
            loss = F.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
        return steps / (time.perf_counter() - t0)

    run(block)  # warm-up
    out = []
    for k in range(pairs):
        order = (True, False) if k % 2 == 0 else (False, True)  # which goes first alternates too
        rates = {}
        for on in order:
            _torch.set_enabled(on)
            rates[on] = run(block)
        out.append({"instrumented": rates[True], "plain": rates[False]})
    _torch.set_enabled(True)
    counted = lane()._step
    print(json.dumps({"pairs": out, "counted": counted}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=150)
    p.add_argument("--block", type=int, default=100)
    p.add_argument("--json", default="")
    p.add_argument("--tiny", action="store_true",
                   help="a network of 8 inputs and 8 hidden units: the instrumentation's own microseconds a step")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.pairs, a.block, a.tiny)
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE",
               DEVICERACE_REPORT_FD=str(write_fd), DEVICERACE_REPORT_INTERVAL="0.1",
               PYTHONPATH=os.pathsep.join([os.path.join(LANES, "devicerace_site"), LANES]))
    reports = []

    def drain():
        with os.fdopen(read_fd, "rb") as f:
            for line in f:
                reports.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    r = subprocess.run([sys.executable, __file__, "--child", "--pairs", str(a.pairs), "--block", str(a.block)]
                       + (["--tiny"] if a.tiny else []),
                       env=env, pass_fds=(write_fd,), capture_output=True, text=True)
    os.close(write_fd)
    reader.join(10)
    if r.returncode != 0:
        sys.exit(r.stderr)
    result = json.loads(r.stdout.strip().splitlines()[-1])
    ratios = [p["instrumented"] / p["plain"] for p in result["pairs"]]
    plain = statistics.median(p["plain"] for p in result["pairs"])
    ratio = statistics.median(ratios)
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    net = "MLP 8-8-10" if a.tiny else "MLP 784-256-10"
    print(f"{cpu_model()}, 1 thread, {net} batch 64, {a.pairs} pairs of {a.block}-step blocks "
          f"({len(reports)} reports sent):")
    def best(key):  # the mean of the fastest tenth of blocks
        rates = sorted((p[key] for p in result["pairs"]), reverse=True)
        top = rates[:max(1, len(rates) // 10)]
        return sum(top) / len(top)

    best_on, best_off = best("instrumented"), best("plain")
    print(f"  plain {plain:.1f} steps/s ({1000 / plain:.2f} ms a step); instrumented / plain = {ratio:.3f} "
          f"(median of the pairs; quartiles {q1:.3f}-{q3:.3f})")
    print(f"  fastest tenth of blocks: plain {best_off:.1f}, instrumented {best_on:.1f} steps/s: ratio "
          f"{best_on / best_off:.3f}, {1e6 / best_on - 1e6 / best_off:.1f} us a step")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_model(), "block": a.block, "pairs": result["pairs"], "median_ratio": ratio,
                       "best_ratio": best_on / best_off}, f, indent=1)


if __name__ == "__main__":
    main()

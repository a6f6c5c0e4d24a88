#!/usr/bin/env python3
"""Explain the race, measured: what the step-time breakdown costs, and how much of
this CPU's peak every CPU workload uses.

Usage (from the repository root, after scripts/build; the machine otherwise idle):
    .venv/bin/python bench/explain/explain.py [--pairs 5] [--runs 3] [--json OUT.json]
                                              [--frameworks pytorch,keras-jax] [--overhead-only]
On a GPU machine (bench/gpu/explain.sh):
    python3 bench/explain/explain.py --cli .gpu/bin/devicerace-cli --device cuda [--frameworks pytorch]

1. Breakdown overhead: fashion-mlp on one thread (the smallest CPU step, where the marks weigh
   most; CPU lanes time every step), `DEVICERACE_BREAKDOWN=0` against the default, in
   alternating A/B pairs; the median of the per-pair ratios of median interval samples/s.
   With --frameworks, the same for those framework lanes (their own clocks: lane_common.py).
2. Utilisation: per workload, `race --fair` with a 1-thread and a 2-thread lane, --runs times;
   each lane's median samples/s, the engine's FLOPs per sample (counted from the network), the
   achieved FLOP/s, the measured GEMM peak of its precision and thread count, the share of it,
   and the step's phases.
With --device cuda the lanes are `cuda:0` (the step in a CUDA graph where it helps) and
`cuda:0,graph=false` (eager), each --frameworks lane on cuda:0 too, each in a race of its own; the peak is the datasheet's (the race's
`peak_flops_per_sec`), the energy NVML's where the driver has it; more steps, since a GPU step
is short.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)
CLI = os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")

# workload -> (steps, extra race options): enough steps for several intervals after warm-up.
WORKLOADS = {
    "fashion-mlp": (600, []),
    "fashion-cnn": (120, []),
    "cifar-vgg": (60, ["--data", "synthetic"]),
    "cifar-resnet20": (50, ["--data", "synthetic"]),
    "charlstm": (120, []),
    "char-gpt": (150, []),
    "fasttext": (300, ["--data", "synthetic"]),
}
# On a GPU: steps enough for several report intervals past the warm-up.
CUDA_WORKLOADS = {
    "fashion-mlp": (4000, []),
    "fashion-cnn": (3000, []),
    "cifar-vgg": (1500, ["--data", "synthetic"]),
    "cifar-resnet20": (1500, ["--data", "synthetic"]),
    "char-gpt": (1500, []),
}



def race(args, env=None, check=True):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        r = subprocess.run([CLI, "race", "--fair", "--quiet", "--json", out, *args], capture_output=True, text=True,
                           env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", **(env or {})))
        if r.returncode != 0 and check:
            sys.exit(f"race {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
        if not os.path.exists(out):  # refused before it started (check=False)
            return {"refused": (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]}
        with open(out, encoding="utf-8") as f:
            return json.load(f)


def overhead(pairs, lane="cpu,threads=1", steps=800):
    ratios, on_rates, off_rates = [], [], []
    args = ["--workload", "fashion-mlp", "--lane", lane, "--steps", str(steps)]
    for i in range(pairs):
        # Alternate which goes first, so a drift in the machine hits both sides.
        order = [("on", {}), ("off", {"DEVICERACE_BREAKDOWN": "0"})]
        if i % 2:
            order.reverse()
        rate = {}
        for name, env in order:
            rate[name] = race(args, env)["lanes"][0]["samples_per_sec"]
        on_rates.append(rate["on"])
        off_rates.append(rate["off"])
        ratios.append(rate["on"] / rate["off"])
    return {"pairs": pairs, "ratio_on_over_off": statistics.median(ratios), "ratios": ratios,
            "on_samples_per_sec": statistics.median(on_rates), "off_samples_per_sec": statistics.median(off_rates)}


def utilisation(runs, device="cpu", frameworks=(), only=()):
    rows = []
    table = CUDA_WORKLOADS if device == "cuda" else WORKLOADS
    for workload, (steps, extra) in table.items():
        if only and workload not in only:
            continue
        if device == "cuda":
            # The default lane captures the step in a graph where it helps; the eager one beside it.
            lanes = ["cuda:0", "cuda:0,graph=false"] + [f"cuda:0,framework={f}" for f in frameworks]
        else:
            lanes = ["cpu,threads=1", "cpu,threads=2"]
        args = ["--workload", workload, "--steps", str(steps), *extra]
        if device == "cuda":
            # One race per lane: a lane the workload refuses (a graph where it has none) costs
            # only its own row, which says why.
            groups = [["--lane", lane] for lane in lanes]
        else:
            groups = [[x for lane in lanes for x in ("--lane", lane)]]
        for group in groups:
            results = [race(args + group, check=device != "cuda") for _ in range(runs)]
            if "refused" in results[0]:
                rows.append({"workload": workload, "lane": group[1], "failed": results[0]["refused"][0]})
                continue
            rows += rows_of(workload, results, group[1] if device == "cuda" else None)
    return rows


def rows_of(workload, results, label=None):
    """Table rows of one race's lanes (medians over its runs), each named by `label` if given."""
    rows = []
    for i, lane in enumerate(results[0]["lanes"]):
        lanes = [r["lanes"][i] for r in results]
        if any(l.get("samples_per_sec") is None or l.get("status") not in (None, "finished") for l in lanes):
            rows.append({"workload": workload, "lane": lane["name"], "failed": lane.get("error") or lane.get("status")})
            continue
        rate = statistics.median(l["samples_per_sec"] for l in lanes)
        phases = {}
        for l in lanes:
            for k, v in (l["step_breakdown"] or {}).items():
                phases.setdefault(k, []).append(v)
        phases = {k: statistics.median(v) for k, v in phases.items()}
        total = sum(phases.values()) or 1
        rows.append({
            "workload": workload, "lane": label or lane["name"], "samples_per_sec": rate,
            "flops_per_sample": lane["flops_per_sample"],
            "achieved_gflops": rate * lane["flops_per_sample"] / 1e9,
            "peak_gflops": (lane["peak_flops_per_sec"] or 0) / 1e9,
            "utilization": rate * lane["flops_per_sample"] / (lane["peak_flops_per_sec"] or float("inf")),
            "phases": {k: v / total for k, v in phases.items()},
            "step_ms": 1000 * total if phases else None,
            "energy_joules": statistics.median(l["energy_joules"] for l in lanes) if all(
                l.get("energy_joules") for l in lanes) else None,
            "samples_per_joule": statistics.median(l["samples_per_joule"] for l in lanes) if all(
                l.get("samples_per_joule") for l in lanes) else None,
            "input_bound": any(l.get("input_bound") for l in lanes),
        })
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--frameworks", default="",
                    help="also the framework lanes' breakdown cost, e.g. pytorch,keras-jax (scripts/setup --frameworks)")
    ap.add_argument("--overhead-only", action="store_true", help="only the breakdown cost, no utilisation table")
    ap.add_argument("--cli", help="the devicerace-cli to race with (default: build/release's)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--workloads", default="", help="only these (comma-separated) in the utilisation table")
    a = ap.parse_args()
    global CLI
    CLI = a.cli or CLI
    base, steps = ("cuda:0", 4000) if a.device == "cuda" else ("cpu,threads=1", 800)
    cpu = cpu_model()
    print(f"CPU: {cpu} · {os.cpu_count()} logical CPUs")
    o = overhead(a.pairs, base, steps)
    print(f"\nbreakdown overhead, fashion-mlp {base}: on/off = {o['ratio_on_over_off']:.3f} "
          f"(median of {a.pairs} pairs; {o['on_samples_per_sec']:,.0f} vs {o['off_samples_per_sec']:,.0f} samples/s)")
    framework_rows = {}
    for framework in a.frameworks.split(",") if a.frameworks else []:
        f = overhead(a.pairs, f"{base},framework={framework}", steps)
        framework_rows[framework] = f
        print(f"breakdown overhead, framework={framework}, fashion-mlp {base}: on/off = "
              f"{f['ratio_on_over_off']:.3f} (median of {a.pairs} pairs; {f['on_samples_per_sec']:,.0f} vs "
              f"{f['off_samples_per_sec']:,.0f} samples/s)")
    rows = [] if a.overhead_only else utilisation(a.runs, a.device, [f for f in a.frameworks.split(",") if f],
                                                  [w for w in a.workloads.split(",") if w])
    if rows:
        print(f"\n| workload | lane | samples/s | FLOPs/sample | GFLOP/s | peak GFLOP/s | of peak | ms/step | data | forward "
              f"| backward | optimizer | compute | other | samples/J |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if "failed" in r:
                print(f"| {r['workload']} | {r['lane']} | failed: {r['failed']} |")
                continue
            p = r["phases"]
            ms = f"{r['step_ms']:.3g}" if r["step_ms"] else "-"
            spj = f"{r['samples_per_joule']:,.0f}" if r["samples_per_joule"] else "-"
            cell = lambda k: f"{100 * p[k]:.0f}%" if k in p else "-"
            print(f"| {r['workload']} | {r['lane']} | {r['samples_per_sec']:,.0f} | {r['flops_per_sample']:.3g} | "
                  f"{r['achieved_gflops']:.1f} | {r['peak_gflops']:.0f} | {100 * r['utilization']:.1f}% | {ms} | "
                  f"{cell('data')} | {cell('forward')} | {cell('backward')} | {cell('optimizer')} | {cell('compute')} | "
                  f"{cell('other')} | {spj} |")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"cpu": cpu, "overhead": o, "framework_overhead": framework_rows, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

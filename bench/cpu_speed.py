#!/usr/bin/env python3
"""CPU speed side by side: DeviceRace's CPU lanes against Keras 3 on JAX (XLA) and
the PyTorch lane, fp32 against bf16, 1 thread against every core, and each lane's fraction of
this CPU's measured GEMM peak, in one run.

Usage (from the repository root, after scripts/setup --frameworks and scripts/build):
    .venv/bin/python bench/cpu_speed.py [--runs 3] [--steps 600] [--json OUT.json]
        [--workloads fashion-mlp,fashion-cnn,char-gpt]   (with bf16 units the default adds
                                                          cifar-resnet20: the issue's four bf16 rows)
        [--threads N]          the "every core" lanes' threads (default: every core)
        [--lanes devicerace]   DeviceRace's fp32 and bf16 lanes only: no framework lanes, no
                               autograd lane (a machine without Keras, or a short lease: bench/gpu/amx.sh)
        [--lanes plain]        plain LibTorch (fused=false) against the PyTorch lane (eager) and
                               DeviceRace's fast paths, fp32, at 1 thread and every core
        [--cli PATH]           the devicerace-cli to race (default: build/release's)
        [--budget SECONDS]     start no race that the last one's duration says would end past
                               this; the tables then give the runs made (a device lease's
                               time limit). SIGTERM (`timeout`) also ends in the tables so far.

What it does:
1. The peaks: torch (the LibTorch the app links, MKL for fp32, oneDNN for bf16) multiplies
   2048x2048 matrices on 1 thread and on every core, fp32 and bf16; the median of 5 timings;
   and a 3x3 convolution (oneDNN) as the engine's second probe: a lane's peak is the faster.
   Also the fashion-mlp forward GEMM's own shape (128x784x512). Probed once at the start and
   again before every race, and each peak is the median of all its probes: a VM's speed drifts
   by 10-30% within an hour, so one probe at the start could set every lane's "of peak" against
   a moment of the machine's that no race saw. The table gives the probes' min-max.
2. Per workload, one `devicerace-cli race --fair` per run with every lane (fair: each lane
   alone on the machine, one after another), runs interleaved; each lane's figure is the
   median over the runs of its median interval samples/s.
3. FLOPs per training sample as the engine counts them from the network's layer shapes (the
   race summary's flops_per_sample): the forward multiply-adds x 2, the weight gradients the
   same again, and the input gradients of every layer but the first (nothing computes the
   image's gradient). "of peak" is samples/s x FLOPs per sample / the peak of the lane's
   precision and thread count (bf16: never below the fp32 one, as the engine holds it). Any workload the CLI races can be listed.
4. Whether oneDNN used AMX for a bf16 lane: one short run with ONEDNN_VERBOSE=1, the ISA
   names its primitives report.
5. The issue's goals as ratios within each race (every lane of a race ran on the same machine
   minutes apart): DeviceRace over Keras/JAX at 1 and at every core, 1 -> every core, bf16 over
   fp32; each the median of the runs' ratios, with the runs' figures beside it.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import signal
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_flags, cpu_model  # noqa: E402  (bench/support/host.py)
CLI = os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")

def flops_per_sample(specs, runs):
    """FLOPs per training sample as the engine counts them (a lane summary's flops_per_sample; see
    point 3 above), from the first lane in the race's order that has one; None if none does."""
    for label, _, _, _ in specs:
        for run in runs:
            if run.get(label, {}).get("flops_per_sample"):
                return run[label]["flops_per_sample"]
    return None


# The lanes of each race: (label, lane spec without name, precision, threads or None for all).
# Without bf16 units the bf16 lanes race too: emulated on the fp32 units, their GEMMs on the routes
# timed there (MKL's bf16 GEMM or fp32 on the bf16 values); the "routes" column says "emulated".
# devicerace_only: DeviceRace's own fp32 and bf16 lanes (no autograd, Keras/JAX or PyTorch lane).
# plain: plain LibTorch (fused=false) beside the PyTorch lane and the fast paths, at 1 and every core.
def lanes(cores, devicerace_only=False, plain=False):
    if plain:
        return [(f"plain LibTorch, {t}", f"cpu,threads={n},fused=false", "fp32", n) for n, t in thread_labels(cores)] + \
               [(f"PyTorch lane, {t}", f"cpu,threads={n},framework=pytorch", "fp32", n) for n, t in thread_labels(cores)] + \
               [(f"DeviceRace, {t}", f"cpu,threads={n}", "fp32", n) for n, t in thread_labels(cores)]
    out = [
        ("DeviceRace, 1 thread", "cpu,threads=1", "fp32", 1),
        (f"DeviceRace, {cores} threads", f"cpu,threads={cores}", "fp32", cores),
    ]
    if not devicerace_only:
        out += [
            ("DeviceRace autograd (fused=false), 1 thread", "cpu,threads=1,fused=false", "fp32", 1),
            ("Keras 3 on JAX, 1 thread", "cpu,threads=1,framework=keras-jax", "fp32", 1),
            (f"Keras 3 on JAX, {cores} threads", f"cpu,threads={cores},framework=keras-jax", "fp32", cores),
            (f"PyTorch lane, {cores} threads", f"cpu,threads={cores},framework=pytorch", "fp32", cores),
        ]
    out += [("DeviceRace, 1 thread, bf16", "cpu,threads=1,precision=bf16", "bf16", 1),
            (f"DeviceRace, {cores} threads, bf16", f"cpu,threads={cores},precision=bf16", "bf16", cores)]
    return out


def thread_labels(cores):
    """(threads, label) of the 1-thread and every-core lanes."""
    return [(1, "1 thread")] + ([(cores, f"{cores} threads")] if cores > 1 else [])


def default_workloads(bf16_native):
    """The issue's rows: its bf16 goal names cifar-resnet20 too (on this machine's Fashion-MNIST,
    adapted to 3x32x32, where CIFAR-10 is absent), raced only where bf16 has units to run on."""
    return "fashion-mlp,fashion-cnn,char-gpt" + (",cifar-resnet20" if bf16_native else "")


PEAK_PROBE = r"""
import json, statistics, sys, time, torch
out = {}
native_bf16 = sys.argv[2] == "1"
for threads in sorted({1, int(sys.argv[1])}):
    torch.set_num_threads(threads)
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for shape in ((2048, 2048, 2048), (128, 784, 512)):
            if name == "bf16" and not native_bf16 and shape[0] == 2048:
                continue  # emulated bf16: minutes per 2048^3 product
            m, k, n = shape
            a = torch.randn(m, k, dtype=dt); b = torch.randn(k, n, dtype=dt)
            reps = max(3, int(2e9 / (2 * m * k * n)))
            for _ in range(3): torch.mm(a, b)
            times = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(reps): torch.mm(a, b)
                times.append((time.perf_counter() - t) / reps)
            out[f"{name}/{threads}/{m}x{k}x{n}"] = 2 * m * k * n / statistics.median(times)
        if name == "bf16" and not native_bf16:
            continue
        # The engine's second peak probe (devices/peak_flops.cpp): a 3x3 convolution, 32 x 64 -> 64
        # channels x 32 x 32, channels_last (oneDNN), the faster library on some CPUs.
        cl = torch.channels_last
        x = torch.randn(32, 64, 32, 32, dtype=dt).contiguous(memory_format=cl)
        w = torch.randn(64, 64, 3, 3, dtype=dt).contiguous(memory_format=cl)
        flops = 2 * 32 * 64 * 64 * 32 * 32 * 9
        with torch.no_grad():
            for _ in range(3): torch.conv2d(x, w, padding=1)
            times = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(3): torch.conv2d(x, w, padding=1)
                times.append((time.perf_counter() - t) / 3)
        out[f"{name}/{threads}/conv3x3"] = flops / statistics.median(times)
print(json.dumps(out))
"""


def venv_python():
    p = os.path.join(ROOT, ".venv", "bin", "python")
    return p if os.path.exists(p) else sys.executable



OMP_SEEN = set()  # the races' OMP_WAIT_POLICY as their summaries report it


def race(workload, specs, steps, env=None):
    """One fair race of every lane: {label: lane summary}."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "race.json")
        argv = [CLI, "race", "--workload", workload, "--fair", "--steps", str(steps), "--test-limit", "1000",
                "--quiet", "--json", out]
        for i, (label, spec, _, _) in enumerate(specs):
            argv += ["--lane", f"{spec},name=lane{i}"]
        # OMP_WAIT_POLICY as the caller has it: unset, the CLI chooses for the race (fair: libgomp's
        # spinning default, for every lane's process alike); the summary says what ran.
        r = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=dict(os.environ, **(env or {})))
        if not os.path.exists(out):
            raise SystemExit(f"the race failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
        with open(out) as f:
            summary = json.load(f)
    OMP_SEEN.add(summary.get("omp_wait_policy") or "?")
    by_name = {l["name"]: l for l in summary["lanes"]}
    return {label: by_name.get(f"lane{i}", {}) for i, (label, _, _, _) in enumerate(specs)}, r.stdout + r.stderr


def isa_evidence(log):
    """What a bf16 run's ONEDNN_VERBOSE=1 and MKL_VERBOSE=1 lines say ran: oneDNN's ISA, its executed
    primitives as "kind implementation source-type" with counts, MKL's own banner (its ISA on an AMX
    CPU) and its calls by function name with counts."""
    isa = re.search(r"onednn_verbose,[^,\n]*,info,cpu,isa:([^\n]*)", log)
    banner = re.search(r"MKL_VERBOSE (?:oneMKL|Intel\(R\) (?:oneAPI )?Math Kernel Library|Intel\(R\) MKL)[^\n]*", log)
    primitives, calls = {}, {}
    for kind, impl, src in re.findall(r"onednn_verbose,(?:v1,)?primitive,exec,cpu,([a-z_]+),([^,]+),[^,]*,src:([a-z0-9]+)", log):
        key = f"{kind} {impl} {src}"
        primitives[key] = primitives.get(key, 0) + 1
    for name in re.findall(r"MKL_VERBOSE ([A-Z][A-Z0-9_]*)\(", log):
        calls[name] = calls.get(name, 0) + 1
    return {"onednn_isa": isa.group(1).strip() if isa else None, "onednn_primitives": primitives,
            "mkl": banner.group(0)[len("MKL_VERBOSE "):].strip() if banner else None, "mkl_calls": calls}


def bf16_evidence(workload):
    """isa_evidence of a short 1-thread bf16 lane of the workload."""
    _, log = race(workload, [("bf16", "cpu,threads=1,precision=bf16", "bf16", 1)], 20,
                  {"ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1"})
    return isa_evidence(log)


def print_evidence(workload, ev):
    print(f"\n{workload}, a 1-thread bf16 lane under ONEDNN_VERBOSE=1 and MKL_VERBOSE=1: "
          f"oneDNN's ISA: {ev['onednn_isa'] or 'not reported'}; MKL: {ev['mkl'] or 'no call'}")
    for key, n in sorted(ev["onednn_primitives"].items(), key=lambda kv: -kv[1]):
        print(f"- oneDNN {key}: {n} calls")
    for name, n in sorted(ev["mkl_calls"].items(), key=lambda kv: -kv[1]):
        print(f"- MKL {name}: {n} calls")


def probe_peaks(cores, native):
    """One probe of every GEMM peak (PEAK_PROBE, in a fresh python): {key: FLOP/s}."""
    return json.loads(subprocess.run([venv_python(), "-c", PEAK_PROBE, str(cores), "1" if native else "0"],
                                     capture_output=True, text=True, check=True).stdout)


def median_peaks(probes):
    """Each peak's median over the probes."""
    return {key: statistics.median(p[key] for p in probes if key in p) for key in probes[0]}


def lane_peak(peaks, precision, threads):
    """A lane's peak as the engine takes it: the faster of the 2048^3 GEMM and the convolution, of
    its precision (the fp32 ones where bf16 is emulated); a bf16 lane's is never below the fp32 one
    (where this CPU's bf16 arithmetic is the slower, its GEMMs and convolutions may run in fp32)."""
    def of(p):
        return max(peaks.get(f"{p}/{threads}/{shape}", 0) for shape in ("2048x2048x2048", "conv3x3"))
    return max(of(precision), of("fp32"))


def print_peaks(probes, peaks, cores, native):
    print(f"\nPeaks: the median of {len(probes)} probes (one at the start, one before every race), min-max beside it.")
    print("\n| probe | threads | fp32 GFLOP/s (min-max) | bf16 GFLOP/s | bf16 / fp32 |\n|---|---:|---:|---:|---:|")
    for shape in ("2048x2048x2048", "128x784x512", "conv3x3"):
        for t in sorted({1, cores}):
            key = f"fp32/{t}/{shape}"
            if key not in peaks:
                continue
            f, b = peaks[key], peaks.get(f"bf16/{t}/{shape}")
            spread = [p[key] / 1e9 for p in probes if key in p]
            fp32 = f"{f / 1e9:,.0f} ({min(spread):,.0f}-{max(spread):,.0f})"
            print(f"| {shape} | {t} | {fp32} | {b / 1e9:,.0f} | {b / f:.2f} |" if b else
                  f"| {shape} | {t} | {fp32} | not measured (emulated) | |")
    if not native:
        print("\nNo bf16 units: a bf16 lane's \"of peak\" is of the fp32 peak (the emulation runs on the "
              "fp32 units).")


def goal_ratios(specs, runs, cores):
    """The issue's ratios, one per run (lanes of one race): {name: [ratio per run]}."""
    pairs = [("DeviceRace / Keras-JAX, 1 thread", "DeviceRace, 1 thread", "Keras 3 on JAX, 1 thread"),
             ("bf16 / fp32, 1 thread", "DeviceRace, 1 thread, bf16", "DeviceRace, 1 thread")]
    if cores > 1:  # on one core the every-core lanes are 1-thread lanes again: nothing more to give
        many = f"{cores} threads"
        pairs += [(f"DeviceRace / Keras-JAX, {many}", f"DeviceRace, {many}", f"Keras 3 on JAX, {many}"),
                  (f"DeviceRace 1 -> {many}", f"DeviceRace, {many}", "DeviceRace, 1 thread"),
                  (f"DeviceRace / PyTorch lane, {many}", f"DeviceRace, {many}", f"PyTorch lane, {many}"),
                  (f"bf16 / fp32, {many}", f"DeviceRace, {many}, bf16", f"DeviceRace, {many}")]
    for n, t in thread_labels(cores):
        pairs += [(f"plain LibTorch / PyTorch lane, {t}", f"plain LibTorch, {t}", f"PyTorch lane, {t}"),
                  (f"fast paths / plain LibTorch, {t}", f"DeviceRace, {t}", f"plain LibTorch, {t}")]
    labels = {label for label, _, _, _ in specs}
    out = {}
    for name, top, bottom in pairs:
        if top not in labels or bottom not in labels:
            continue
        values = [run[top]["samples_per_sec"] / run[bottom]["samples_per_sec"] for run in runs
                  if run[top].get("samples_per_sec") and run[bottom].get("samples_per_sec")]
        if values:
            out[name] = values
    return out


def routes_through_reason(text):
    """The routes at the start of `text` through their parenthesised reason, whose own ";" and
    nested parentheses stay inside: "fp32 for every GEMM shape (15) (the fastest timed ...; with no
    bf16 units ...)"; without a reason, up to the first ";"."""
    reason = re.search(r"\((?:the fastest timed|DEVICERACE_BF16_ROUTE)", text)
    if not reason:
        return text.split(";")[0].strip()
    depth = 0
    for i in range(reason.start(), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i + 1].strip()
    return text.strip()


def bf16_routes(execution):
    """The bf16 GEMM routes a lane's execution text names ("MKL bf16 for 12 of 14 GEMM shapes, ..."),
    "autocast" for an autograd lane, "" when it names none; then the measured peaks where this CPU's
    bf16 one is below its fp32 one ("bf16 slower than fp32 on this CPU (...)")."""
    slower = re.search(r"bf16 slower than fp32 on this CPU \(([^)]*)\)", execution)
    slower = f"; bf16 slower than fp32 here ({slower.group(1)})" if slower else ""
    emulated = "emulated (no bf16 units)" if "bf16 emulated" in execution else ""
    m = re.search(r"bf16 GEMMs with fp32 (?:results|sums): ", execution)
    if m:
        return routes_through_reason(execution[m.end():]) + (f"; {emulated}" if emulated else "") + slower
    # an autograd lane's dense layers: "dense layers' bf16 GEMMs: <routes> (the fastest timed ...)"
    dense = re.search(r"dense layers' bf16 GEMMs: (.*?\((?:the fastest timed[^)]*|DEVICERACE_BF16_ROUTE)\))",
                      execution)
    if dense:
        return f"autocast, dense layers: {dense.group(1)}" + (f"; {emulated}" if emulated else "") + slower
    if emulated:
        return emulated
    return ("autocast (ATen's ops)" if "autocast" in execution else "") + slower


def print_bf16_table(result, cores):
    """The issue's table: per workload, the every-core fp32 and bf16 lanes' samples/s, their
    ratio (the median of the runs' ratios) and the routes the bf16 lane's GEMMs took."""
    many = f"{cores} threads" if cores > 1 else "1 thread"
    rows = []
    for workload, w in result["workloads"].items():
        lanes = {row["lane"]: row for row in w["lanes"]}
        fp32, bf16 = lanes.get(f"DeviceRace, {many}"), lanes.get(f"DeviceRace, {many}, bf16")
        ratio = w["ratios"].get(f"bf16 / fp32, {many}")
        if fp32 and bf16 and ratio:
            rows.append(f"| {workload} | {fp32['samples_per_sec']:,.0f} | {bf16['samples_per_sec']:,.0f} | "
                        f"{ratio['median']:.2f} | {bf16_routes(bf16['execution'])} |")
    if rows:
        print(f"\n## bf16 against fp32 at {many} · {cpu_model()}\n\n"
              "| workload | fp32 samples/s | bf16 samples/s | bf16 ÷ fp32 (median of the runs') | bf16 GEMM routes |\n"
              "|---|---:|---:|---:|---|\n" + "\n".join(rows))


class Stopped(Exception):
    """SIGTERM (a `timeout` around the script): stop racing and print what was measured."""


def stop_on_sigterm(*_):
    raise Stopped()


def main(argv=None):
    global CLI
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600, help="steps per lane for fashion-mlp (char-gpt: a quarter, "
                    "at least 100; cifar-resnet20: a sixth, at least 100; any other: a tenth, at least 60)")
    ap.add_argument("--workloads", help="comma-separated (default: fashion-mlp,fashion-cnn,char-gpt, and "
                    "cifar-resnet20 where the CPU has bf16 units)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--threads", type=int, help="the every-core lanes' threads (default: every core)")
    ap.add_argument("--lanes", choices=("all", "devicerace", "plain"), default="all",
                    help="devicerace: DeviceRace's fp32 and bf16 lanes only; plain: plain LibTorch (fused=false) "
                         "against the PyTorch lane and the fast paths, fp32")
    ap.add_argument("--cli", default=CLI, help="the devicerace-cli to race")
    ap.add_argument("--budget", type=float, metavar="SECONDS",
                    help="start no race that would end past this many seconds from the start")
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        ap.error("--threads: at least 1")
    CLI = args.cli
    cores = args.threads or os.cpu_count() or 1
    started = datetime.datetime.now(datetime.timezone.utc)
    flags = cpu_flags()
    units = "AMX" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else "none"
    print(f"# CPU speed · {cpu_model()} · {os.cpu_count()} CPUs, lanes of 1 and {cores} threads · "
          f"bf16 units: {units} · {started:%Y-%m-%d %H:%M} UTC", flush=True)
    native = units != "none"
    workloads = args.workloads or default_workloads(native)
    probes = [probe_peaks(cores, native)]
    result = {"cpu": cpu_model(), "cpus": os.cpu_count(), "cores": cores, "bf16_units": units,
              "date": started.isoformat(), "peak_probes": probes, "workloads": {}}
    tables, cut = [], []
    stopped = False  # SIGTERM came: no more races, the tables of those made
    start = time.monotonic()

    def time_left(took):
        return args.budget is None or time.monotonic() - start + took <= args.budget

    previous = signal.signal(signal.SIGTERM, stop_on_sigterm)
    try:
        for workload in workloads.split(","):
            if tables and not time_left(0):  # the first race always runs
                break
            steps = {"fashion-mlp": args.steps, "char-gpt": max(100, args.steps // 4),
                     "cifar-resnet20": max(100, args.steps // 6)}.get(workload, max(60, args.steps // 10))
            specs = lanes(cores, args.lanes == "devicerace", args.lanes == "plain")
            runs = []
            tables.append((workload, steps, specs, runs))
            for r in range(args.runs):
                began = time.monotonic()
                probes.append(probe_peaks(cores, native))
                lanes_out, _ = race(workload, specs, steps)
                runs.append(lanes_out)
                print(f"{workload} run {r + 1}: " + ", ".join(
                    f"{label} {l.get('samples_per_sec') or 0:,.0f}"
                    for label, l in lanes_out.items()), file=sys.stderr, flush=True)
                if r + 1 < args.runs and not time_left(time.monotonic() - began):
                    cut.append(f"{workload}: {r + 1} of {args.runs} runs (--budget {args.budget:g} s)")
                    break
    except Stopped:
        stopped = True
        cut.append("stopped by SIGTERM during a race; that race is not counted")
    tables = [t for t in tables if t[3]]
    raced = {t[0] for t in tables}
    cut += [f"{w}: not raced" for w in workloads.split(",") if w not in raced]
    result["cut"] = cut
    if cut:
        print("\nCut short: " + "; ".join(cut) + ".")
    peaks = median_peaks(probes)
    result["peaks"] = peaks
    print_peaks(probes, peaks, cores, native)
    for workload, steps, specs, runs in tables:
        flops = flops_per_sample(specs, runs)
        omp = "OMP_WAIT_POLICY " + "/".join(sorted(OMP_SEEN))
        print(f"\n## {workload} · fair mode · {steps} steps · median of {len(runs)} runs · {omp} · "
              f"{flops / 1e6:.2f} MFLOP per training sample\n" if flops else f"\n## {workload} · {omp}\n")
        print("| lane | samples/s (min-max) | × DeviceRace 1 thread | GFLOP/s | of peak | execution |\n"
              "|---|---:|---:|---:|---:|---|")
        base = None
        rows = []
        for label, spec, precision, threads in specs:
            rates = [run[label].get("samples_per_sec") for run in runs if run[label].get("samples_per_sec")]
            if not rates:
                err = runs[-1][label].get("error") or runs[-1][label].get("status") or "no result"
                print(f"| {label} | {err} | | | | |")
                continue
            med = statistics.median(rates)
            base = base or med
            peak = lane_peak(peaks, precision, threads)
            achieved = med * flops if flops else None
            execution = runs[-1][label].get("execution", "")
            rows.append({"lane": label, "spec": spec, "samples_per_sec": med, "runs": rates,
                         "achieved_flops_per_sec": achieved, "peak_flops_per_sec": peak,
                         "fraction_of_peak": achieved / peak if achieved else None, "execution": execution})
            print(f"| {label} | {med:,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | {med / base:.2f} | "
                  f"{achieved / 1e9:,.0f} | {achieved / peak:.0%} | {execution} |" if achieved else
                  f"| {label} | {med:,.0f} | {med / base:.2f} | | | {execution} |")
        ratios = goal_ratios(specs, runs, cores)
        if ratios:
            print("\nRatios within each race (the issue's goals), the median of the runs':\n")
        for name, values in ratios.items():
            print(f"- {name}: **{statistics.median(values):.2f}** (runs: {', '.join(f'{v:.2f}' for v in values)})")
        result["workloads"][workload] = {"steps": steps, "flops_per_sample": flops, "lanes": rows,
                                         "ratios": {k: {"median": statistics.median(v), "runs": v}
                                                    for k, v in ratios.items()}}
    print_bf16_table(result, cores)
    write_json(args.json, result)
    # Which library ran a bf16 lane's products, on which ISA (the issue asks for the evidence); an
    # emulated bf16 lane takes minutes for it, so only where bf16 has units, and only in the budget.
    result["bf16_evidence"] = {}
    try:
        for workload in sorted(raced, key=workloads.split(",").index) if native else []:
            if stopped or not time_left(0):
                print(f"\n{workload}: no bf16 evidence run (out of time)")
                continue
            result["bf16_evidence"][workload] = bf16_evidence(workload)
            print_evidence(workload, result["bf16_evidence"][workload])
    except Stopped:
        print("\nbf16 evidence: stopped by SIGTERM")
    finally:
        signal.signal(signal.SIGTERM, previous)
    write_json(args.json, result)


def write_json(path, result):
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

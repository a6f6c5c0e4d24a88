#!/usr/bin/env python3
"""DeviceRace against PyTorch, side by side (the one command: bench/compare, which builds first).

Sections (--sections, default: every one that applies to the device):
  peers    DeviceRace lanes vs their PyTorch peers (bench/peers/peer.py: the same network,
           optimizer, schedule, batch, data, threads and device), run alternately A B A B ...
  scaling  (CPU) DeviceRace fashion-mlp / fashion-cnn at 1, 2, ... threads
  data     DeviceRace on real vs synthetic data (fashion-mlp, fashion-cnn, cifar-resnet32)
  self     (CUDA) DeviceRace against itself: bf16 + channels_last vs fp32, fused LSTM vs
           LSTMCell loop, CUDA graph vs eager
  gui      (CPU, needs the GUI build) the window's figures: lane speed with the window open vs
           headless (bench_gui_overhead) and the redraw of 8 lanes x 1,000,000 samples
           (bench_gui_redraw), offscreen

Each figure is a lane's samples/s: the median over the intervals measured after warm-up inside
one run; a row's figure is the median over --pairs runs, and its ratio the median of the
per-pair ratios (min-max beside it). Stand-alone on a machine with torch but no .venv:
    python3 bench/compare.py --cli /path/to/devicerace-cli --device cuda
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import select
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "bench", "peers", "peer.py")
DEFAULT_CLI = os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")

# ---------------------------------------------------------------------------------------------
# Run lengths: row -> {device: (batch or None for the workload's default, steps, warm-up steps)}.
# CPU: rates at 1 thread on a 2-core AMD EPYC VM, each run a few s to ~30 s. CUDA: sized so the
# slower side (the PyTorch peer, "PT") trains ~4-6 s on an H100; DeviceRace ("DR", CUDA graphs
# where they apply) is often several times faster there.
# ---------------------------------------------------------------------------------------------
RUNS = {
    "fashion-mlp":            {"cpu": (None, 600, 20), "cuda": (None, 3000, 100)},  # CPU ~16,000 samples/s; CUDA PT ~500, DR ~5,200 steps/s
    "fashion-cnn":            {"cpu": (None, 100, 10), "cuda": (None, 2000, 100)},  # CPU ~550 samples/s; CUDA PT ~320, DR ~1,650 steps/s
    "cifar-resnet20":         {"cpu": (None, 40, 5), "cuda": (None, 450, 30)},      # CPU ~2.1 steps/s; CUDA PT ~93, DR ~270 steps/s
    "cifar-resnet32":         {"cpu": (None, 25, 5), "cuda": (None, 300, 30)},      # CPU ~1.2 steps/s; CUDA PT ~58, DR ~170 steps/s
    "cifar-resnet56":         {"cpu": (None, 15, 3), "cuda": (None, 180, 30)},      # CPU ~0.7 steps/s; CUDA PT ~36, DR ~96 steps/s
    "cifar-vgg":              {"cpu": (None, 250, 20), "cuda": (None, 1500, 50)},   # batch 32: CPU ~14 steps/s; CUDA PT ~310, DR ~1,700 steps/s
    "davidnet":               {"cpu": (64, 12, 3), "cuda": (None, 250, 20)},        # CPU batch 64 ~0.55 steps/s; CUDA batch 512 PT ~67, DR ~69 steps/s
    "imdb-bilstm":            {"cpu": (None, 300, 20), "cuda": (None, 1200, 50)},   # fused LSTM: CPU ~28 steps/s; CUDA PT ~290, DR ~350 steps/s
    "imdb-bilstm/cells":      {"cpu": (None, 100, 10), "cuda": (None, 60, 10)},     # LSTMCell loop: CPU ~7 steps/s; CUDA PT ~12, DR ~13 steps/s
    "fasttext":               {"cpu": (None, 1500, 50), "cuda": (None, 2000, 50)},  # CPU ~130 steps/s; CUDA PT ~460, DR ~5,000 steps/s
    "charlstm":               {"cpu": (None, 250, 20), "cuda": (None, 1500, 50)},   # CPU ~17 steps/s; CUDA PT ~350, DR ~430 steps/s
    "char-gpt":               {"cpu": (None, 150, 15), "cuda": (None, 2000, 100)},  # CPU ~17 steps/s (batch 12 x 64 tokens)
    "char-gpt-6l":            {"cpu": (None, 8, 2), "cuda": (None, 300, 30)},       # CPU ~0.07 steps/s (batch 64 x 256 tokens): ~150 s a run
    "imagenet-resnet50":      {"cpu": (8, 8, 3), "cuda": (256, 60, 15)},            # CPU batch 8 ~0.37 steps/s; CUDA batch 256 bf16+CL ~15.5 steps/s both
    "imagenet-resnet50/fp32": {"cuda": (256, 30, 10)},                              # self section only: CUDA batch 256 fp32 DR ~7.3 steps/s
}

# Goals for the DeviceRace/PyTorch ratio (CPU, CUDA); None: reported, no goal.
GOALS = {
    "fashion-mlp": (1.15, 2.0),
    "fashion-cnn": (1.05, 1.2),
    "cifar-resnet32": (1.0, 1.1),
    "cifar-vgg": (1.0, 1.1),
    "davidnet": (1.0, 1.1),
    "imdb-bilstm": (1.0, None),
    "imdb-bilstm/cells": (1.0, None),
    "imagenet-resnet50": (1.0, None),
    "char-gpt": (1.15, 1.5),  # tokens/s at 1 and 2 threads; the 6-layer config on a GPU
    "char-gpt-6l": (1.0, 1.5),
}
DEFAULT_GOAL = (1.0, 1.0)  # cifar-resnet20/56, fasttext, charlstm: reported against 1.0
# CUDA imagenet-resnet50 (batch 256, bf16, channels_last): DeviceRace's own images/s goal.
IMAGENET_CUDA_IMG_PER_SEC = 2470

# Peers rows: (row id, workload, options for both sides). Options: precision, channels_last,
# lstm; CUDA-only options are applied in peer_rows().
PEER_ROWS = [
    ("fashion-mlp", "fashion-mlp", {}),
    ("fashion-cnn", "fashion-cnn", {}),
    ("cifar-resnet20", "cifar-resnet20", {}),
    ("cifar-resnet32", "cifar-resnet32", {}),
    ("cifar-resnet56", "cifar-resnet56", {}),
    ("cifar-vgg", "cifar-vgg", {}),
    ("davidnet", "davidnet", {}),
    ("imdb-bilstm", "imdb-bilstm", {"lstm": "fused"}),
    ("imdb-bilstm/cells", "imdb-bilstm", {"lstm": "cells"}),
    ("fasttext", "fasttext", {}),
    ("charlstm", "charlstm", {}),
    ("char-gpt", "char-gpt", {}),  # samples/s = sequences/s; tokens/s is 64x both, the ratio the same
    ("char-gpt-6l", "char-gpt-6l", {}),
    ("imagenet-resnet50", "imagenet-resnet50", {}),
]
BF16_CL = {"precision": "bf16", "channels_last": True}

# Self rows (CUDA): (label, workload, (run row A, options A), (run row B, options B), goal A/B).
SELF_ROWS = [
    ("cifar-resnet32 bf16+CL / fp32", "cifar-resnet32", ("cifar-resnet32", BF16_CL), ("cifar-resnet32", {}), 1.3),
    ("cifar-vgg bf16+CL / fp32", "cifar-vgg", ("cifar-vgg", BF16_CL), ("cifar-vgg", {}), 1.3),
    ("davidnet bf16+CL / fp32", "davidnet", ("davidnet", BF16_CL), ("davidnet", {}), 1.3),
    ("imagenet-resnet50 bf16+CL / fp32", "imagenet-resnet50", ("imagenet-resnet50", BF16_CL),
     ("imagenet-resnet50/fp32", {}), 1.3),
    ("imdb-bilstm fused / cells", "imdb-bilstm", ("imdb-bilstm", {"lstm": "fused"}),
     ("imdb-bilstm/cells", {"lstm": "cells"}), 5.0),
    ("char-gpt-6l bf16 / fp32", "char-gpt-6l", ("char-gpt-6l", {"precision": "bf16"}), ("char-gpt-6l", {}), 1.3),
    ("char-gpt-6l graph / eager (bf16)", "char-gpt-6l", ("char-gpt-6l", {"precision": "bf16", "graph": True}),
     ("char-gpt-6l", {"precision": "bf16", "graph": False}), None),
    ("char-gpt graph / eager", "char-gpt", ("char-gpt", {"graph": True}), ("char-gpt", {"graph": False}), None),
    ("fashion-mlp graph / eager", "fashion-mlp", ("fashion-mlp", {"graph": True}), ("fashion-mlp", {"graph": False}),
     None),
    ("fashion-cnn graph / eager", "fashion-cnn", ("fashion-cnn", {"graph": True}), ("fashion-cnn", {"graph": False}),
     None),
]
SCALING_WORKLOADS = ["fashion-mlp", "fashion-cnn"]
DATA_WORKLOADS = ["fashion-mlp", "fashion-cnn", "cifar-resnet32"]
# Workloads with no real data in the peer (or none on a stock machine): raced on synthetic data.
SYNTHETIC_WORKLOADS = {"imdb-bilstm", "fasttext", "charlstm", "char-gpt", "char-gpt-6l", "imagenet-resnet50"}
# Longest a single run may take before it counts as failed (seconds).
RUN_TIMEOUT = 900


class RunError(Exception):
    pass


def env():
    e = dict(os.environ)
    e.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return e


# --peer-malloc tuned: glibc settings a PyTorch user can give the peer from outside (no code
# change) to get most of what DeviceRace's caching CPU allocator does for itself: large blocks
# kept in the heap instead of being returned to the kernel after every step (docs/ENGINEERING.md).
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(512 << 20),
                "MALLOC_TOP_PAD_": str(64 << 20)}


def run_length(row, device, quick):
    batch, steps, warmup = RUNS[row][device]
    if quick:
        steps = max(warmup + 5, steps // 3)
    return batch, steps, warmup


def data_mode(workload):
    return "synthetic" if workload in SYNTHETIC_WORKLOADS else "real"


class PeerServer:
    """One `peer.py --serve` process for the whole run: torch is imported once (seconds on a GPU
    machine), each request still builds its model, optimizer and data afresh. It sleeps on stdin
    while DeviceRace runs, so the sides still run one at a time."""

    def __init__(self, stderr_path, extra_env=None):
        self.stderr_path = stderr_path
        self.extra_env = extra_env or {}
        self.proc = None

    def request(self, argv, timeout):
        if self.proc is None or self.proc.poll() is not None:
            self.stderr = open(self.stderr_path, "a")
            self.proc = subprocess.Popen([sys.executable, PEER, "--serve"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                         env=dict(env(), **self.extra_env), cwd=ROOT)
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            self.proc = None
            with open(self.stderr_path) as f:
                tail = " / ".join(f.read().strip().splitlines()[-3:])
            return {"ok": False, "error": f"no answer within {timeout} s" if not ready else f"the peer died: {tail}"}
        return json.loads(line)


class Harness:
    def __init__(self, args):
        self.args = args
        self.cuda = args.device == "cuda"
        self.dev = "cuda" if self.cuda else "cpu"
        self.runs = []  # every run's raw numbers (--json)
        self.failed = False
        self.tmp = tempfile.mkdtemp(prefix="devicerace-compare-")
        self.peer_server = PeerServer(os.path.join(self.tmp, "peer-stderr.txt"),
                                      TUNED_MALLOC if args.peer_malloc == "tuned" else None)

    def log(self, text):
        print(text, file=sys.stderr, flush=True)

    # -- one run of each side ------------------------------------------------------------------

    def devicerace(self, workload, batch, steps, warmup, threads, options, data):
        lane = ["cuda:0" if self.cuda else "cpu", f"threads={threads}"]
        if batch:
            lane.append(f"batch={batch}")
        for key in ("precision", "lstm"):
            if key in options:
                lane.append(f"{key}={options[key]}")
        for key in ("channels_last", "graph", "fused"):
            if key in options:
                lane.append(f"{key}={'true' if options[key] else 'false'}")
        out = os.path.join(self.tmp, "race.json")
        if os.path.exists(out):
            os.remove(out)
        # --test-limit keeps the lane's evaluations (outside its throughput intervals) short.
        cmd = [self.args.cli, "race", "--workload", workload, "--lane", ",".join(lane), "--steps", str(steps),
               "--warmup-steps", str(warmup), "--quiet", "--json", out, "--data", data,
               "--test-limit", str(max(batch or 1, 256))]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=RUN_TIMEOUT, cwd=ROOT)
        except subprocess.TimeoutExpired:
            raise RunError(f"DeviceRace timed out after {RUN_TIMEOUT} s: {shlex.join(cmd)}")
        wall = time.perf_counter() - t0
        if not os.path.exists(out):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RunError(f"DeviceRace exited {proc.returncode} without a summary: {' / '.join(tail)} "
                           f"({shlex.join(cmd)})")
        with open(out) as f:
            lane0 = json.load(f)["lanes"][0]
        state = lane0.get("status", lane0.get("state"))
        if state != "finished" or not lane0.get("samples_per_sec"):
            raise RunError(f"DeviceRace lane {state}: {lane0.get('error') or 'no throughput measured'} "
                           f"({shlex.join(cmd)})")
        return {"samples_per_sec": lane0["samples_per_sec"], "steps_per_sec": lane0.get("steps_per_sec"),
                "execution": lane0.get("execution"), "batch": lane0.get("batch"), "wall_s": wall,
                "cmd": shlex.join(cmd)}

    def peer(self, workload, batch, steps, warmup, threads, options, data):
        argv = ["--workload", workload, "--device", self.dev, "--threads", str(threads),
                "--steps", str(steps), "--warmup", str(warmup), "--data", data]
        if batch:
            argv += ["--batch", str(batch)]
        if "precision" in options:
            argv += ["--precision", options["precision"]]
        if options.get("channels_last"):
            argv.append("--channels-last")
        if "lstm" in options:
            argv += ["--lstm", options["lstm"]]
        cmd = shlex.join([sys.executable, PEER] + argv)
        t0 = time.perf_counter()
        out = self.peer_server.request(argv, RUN_TIMEOUT)
        wall = time.perf_counter() - t0
        if not out.get("ok"):
            raise RunError(f"the peer failed: {out.get('error')} ({cmd})")
        return {"samples_per_sec": out["samples_per_sec"], "steps_per_sec": out["steps_per_sec"],
                "intervals": out.get("intervals"), "batch": out.get("batch"), "torch": out.get("torch"),
                "wall_s": wall, "cmd": cmd}

    def record(self, section, row, side, pair, fn, *a):
        try:
            r = fn(*a)
        except RunError as e:
            self.runs.append({"section": section, "row": row, "side": side, "pair": pair, "error": str(e)})
            raise
        self.runs.append(dict(r, section=section, row=row, side=side, pair=pair))
        self.log(f"  {section} | {row} | {side} | pair {pair + 1}: {r['samples_per_sec']:,.1f} samples/s "
                 f"({r['wall_s']:.1f} s)")
        return r

    # -- sections ----------------------------------------------------------------------------

    def selected(self, *names):
        if not self.args.workloads:
            return True
        return any(n in self.args.workloads for n in names)

    def peer_rows(self):
        rows = []
        for row, workload, options in PEER_ROWS:
            if not self.selected(row, workload):
                continue
            options = dict(options)
            if self.cuda and workload == "imagenet-resnet50":
                options.update(BF16_CL)
            if self.cuda and workload == "char-gpt-6l":  # the GPU config in bf16 (flash attention)
                options["precision"] = "bf16"
            rows.append((row, workload, options))
        return rows

    def section_peers(self):
        threads = self.threads()
        header = ("| workload / variant | DeviceRace samples/s | PyTorch samples/s | ratio (median) | min–max | goal | |\n"
                  "|---|---:|---:|---:|---|---|:-:|")
        lines, notes = [header], []
        for row, workload, options in self.peer_rows():
            batch, steps, warmup = run_length(row, self.dev, self.short())
            data = data_mode(workload)
            label = self.label(row, workload, options, batch)
            self.log(f"peers: {label} ({steps} steps, warm-up {warmup}, {self.pairs()} pair(s))")
            try:
                ours, theirs, ratios = self.alternate(
                    "peers", row, ("devicerace", self.devicerace, workload, batch, steps, warmup, threads, options, data),
                    ("pytorch", self.peer, workload, batch, steps, warmup, threads, options, data))
                execution = self.runs[-2].get("execution")
                if execution:
                    notes.append(f"{label}: {execution}")
            except RunError as e:
                self.failed = True
                lines.append(f"| {label} | FAILED: {e} | | | | | ✗ |")
                continue
            mo, mt, mr = statistics.median(ours), statistics.median(theirs), statistics.median(ratios)
            goal = GOALS.get(row, DEFAULT_GOAL)[1 if self.cuda else 0]
            if self.cuda and workload == "imagenet-resnet50":
                goal_text = f"≥ {IMAGENET_CUDA_IMG_PER_SEC:,} img/s"
                ok = "✓" if mo >= IMAGENET_CUDA_IMG_PER_SEC else "✗"
            elif goal is None:
                goal_text, ok = "–", "–"
            else:
                goal_text, ok = f"≥ {goal:.2f}", "✓" if mr >= goal else "✗"
            lines.append(f"| {label} | {mo:,.0f} | {mt:,.0f} | {mr:.3f} | {min(ratios):.3f}–{max(ratios):.3f} | "
                         f"{goal_text} | {ok} |")
        title = (f"### DeviceRace vs PyTorch ({self.dev}, {threads} thread{'s' if threads > 1 else ''}, "
                 f"{self.pairs()} alternating pair{'s' if self.pairs() > 1 else ''})")
        text = title + "\n\n" + "\n".join(lines)
        if notes:
            text += "\n\nDeviceRace execution (from its summary):\n" + "\n".join(f"- {n}" for n in notes)
        return text

    def section_scaling(self):
        workloads = [w for w in SCALING_WORKLOADS if self.selected(w)]
        if not workloads:
            return None
        n = os.cpu_count() or 1
        # Every count up to 8 cores; beyond, powers of two and the total.
        counts = list(range(1, n + 1)) if n <= 8 else sorted({2 ** k for k in range(n.bit_length()) if 2 ** k <= n} | {n})
        lines = ["| workload | threads | samples/s (median) | speedup vs 1 thread | efficiency |",
                 "|---|---:|---:|---:|---:|"]
        for w in workloads:
            batch, steps, warmup = run_length(w, "cpu", self.short())
            self.log(f"scaling: {w} at {counts} threads ({steps} steps, {self.pairs()} round(s))")
            rates = {t: [] for t in counts}
            try:
                for p in range(self.pairs()):
                    for t in counts:
                        r = self.record("scaling", w, f"threads={t}", p, self.devicerace, w, batch, steps, warmup, t,
                                        {}, data_mode(w))
                        rates[t].append(r["samples_per_sec"])
            except RunError as e:
                self.failed = True
                lines.append(f"| {w} | FAILED: {e} | | | |")
                continue
            for t in counts:
                speedups = [rt / r1 for rt, r1 in zip(rates[t], rates[1])]
                s = statistics.median(speedups)
                lines.append(f"| {w} | {t} | {statistics.median(rates[t]):,.0f} | {s:.2f}× | {s / t:.0%} |")
        return (f"### CPU thread scaling (DeviceRace, threads 1–{n}, {self.pairs()} round"
                f"{'s' if self.pairs() > 1 else ''}, thread counts alternating)\n\n" + "\n".join(lines))

    def section_data(self):
        workloads = [w for w in DATA_WORKLOADS if self.selected(w)]
        if not workloads:
            return None
        threads = self.threads()
        lines = ["| workload | real samples/s | synthetic samples/s | real / synthetic (median) | min–max |",
                 "|---|---:|---:|---:|---|"]
        for w in workloads:
            batch, steps, warmup = run_length(w, self.dev, self.short())
            self.log(f"data: {w} real vs synthetic ({steps} steps, {self.pairs()} pair(s))")
            try:
                real, synth, ratios = self.alternate(
                    "data", w, ("real", self.devicerace, w, batch, steps, warmup, threads, {}, "real"),
                    ("synthetic", self.devicerace, w, batch, steps, warmup, threads, {}, "synthetic"))
            except RunError as e:
                self.failed = True
                lines.append(f"| {w} | FAILED: {e} | | | |")
                continue
            lines.append(f"| {w} | {statistics.median(real):,.0f} | {statistics.median(synth):,.0f} | "
                         f"{statistics.median(ratios):.3f} | {min(ratios):.3f}–{max(ratios):.3f} |")
        return f"### Real vs synthetic data (DeviceRace, {self.dev})\n\n" + "\n".join(lines)

    def section_self(self):
        rows = [r for r in SELF_ROWS if self.selected(r[1])]
        if not rows:
            return None
        lines = ["| workload: A / B | A samples/s | B samples/s | A / B (median) | min–max | goal | |",
                 "|---|---:|---:|---:|---|---|:-:|"]
        for label, w, (run_a, opt_a), (run_b, opt_b), goal in rows:
            la, lb = run_length(run_a, "cuda", self.short()), run_length(run_b, "cuda", self.short())
            self.log(f"self: {label} (A {la[1]} steps, B {lb[1]} steps, {self.pairs()} pair(s))")
            try:
                ra, rb, ratios = self.alternate("self", label, ("A", self.devicerace, w, *la, 1, opt_a, data_mode(w)),
                                                ("B", self.devicerace, w, *lb, 1, opt_b, data_mode(w)))
            except RunError as e:
                self.failed = True
                lines.append(f"| {label} | FAILED: {e} | | | | | ✗ |")
                continue
            m = statistics.median(ratios)
            goal_text, ok = ("–", "–") if goal is None else (f"≥ {goal:g}", "✓" if m >= goal else "✗")
            lines.append(f"| {label} | {statistics.median(ra):,.0f} | {statistics.median(rb):,.0f} | {m:.3f} | "
                         f"{min(ratios):.3f}–{max(ratios):.3f} | {goal_text} | {ok} |")
        return "### DeviceRace against itself (cuda)\n\n" + "\n".join(lines)

    def section_gui(self):
        bench = os.path.join(os.path.dirname(self.args.cli), "..", "..", "bench")
        redraw, overhead = os.path.join(bench, "bench_gui_redraw"), os.path.join(bench, "bench_gui_overhead")
        if not (os.access(redraw, os.X_OK) and os.access(overhead, os.X_OK)):
            self.log("gui: no bench_gui_* next to the CLI's build (a build without Qt); skipped")
            return None
        e = dict(env(), QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
        self.log("gui: redraw of 8 lanes x 1,000,000 samples, then the window's overhead (3 pairs x 1,500 steps)")
        lines = ["| figure | goal | measured |", "|---|---|---|"]
        for cmd, pattern, goal in (([redraw, "1000000", "40"], "redraw:", "< 16 ms per tick"),
                                   ([overhead, str(self.pairs()), "1500"], "gui overhead:", "≥ 0.98")):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=RUN_TIMEOUT, cwd=ROOT)
            found = [l for l in proc.stdout.splitlines() if l.startswith(pattern)]
            if proc.returncode != 0 or not found:
                self.failed = True
                found = [f"FAILED (exit {proc.returncode}): {' / '.join(proc.stderr.strip().splitlines()[-2:])}"]
            lines.append(f"| {os.path.basename(cmd[0])} | {goal} | {found[-1]} |")
            self.runs.append({"section": "gui", "row": os.path.basename(cmd[0]), "output": proc.stdout})
        return "### The window (offscreen)\n\n" + "\n".join(lines)

    # -- helpers -------------------------------------------------------------------------------

    def alternate(self, section, row, side_a, side_b):
        """Runs (label, fn, *args) A and B alternately for every pair: samples/s of A, of B, A/B."""
        ra, rb, ratios = [], [], []
        for p in range(self.pairs()):
            a = self.record(section, row, side_a[0], p, *side_a[1:])
            b = self.record(section, row, side_b[0], p, *side_b[1:])
            ra.append(a["samples_per_sec"])
            rb.append(b["samples_per_sec"])
            ratios.append(a["samples_per_sec"] / b["samples_per_sec"])
        return ra, rb, ratios

    def threads(self):
        return 1 if self.cuda else self.args.threads

    def short(self):
        return self.args.quick or self.args.short

    def pairs(self):
        return 1 if self.args.quick else self.args.pairs

    def label(self, row, workload, options, batch):
        parts = []
        if row != workload:
            parts.append(row.split("/", 1)[1])
        elif "lstm" in options:
            parts.append(options["lstm"])
        if batch:
            parts.append(f"batch {batch}")
        if options.get("precision", "fp32") != "fp32":
            parts.append(options["precision"])
        if options.get("channels_last"):
            parts.append("channels_last")
        return workload + (f" / {', '.join(parts)}" if parts else "")


def check_peers(cli):
    """The peers' defaults against the engine's (devicerace-cli workloads --json): a list of
    mismatches, so a changed engine default cannot silently make the comparison unfair."""
    try:
        engine = json.loads(subprocess.run([cli, "workloads", "--json"], capture_output=True, text=True, check=True,
                                           timeout=120, env=env()).stdout)
        peer = json.loads(subprocess.run([sys.executable, PEER, "--describe"], capture_output=True, text=True,
                                         check=True, timeout=300, env=env()).stdout)
    except (subprocess.SubprocessError, ValueError) as e:
        return [f"could not compare the workload definitions: {e}"]
    problems = []
    for w in engine:
        mine = peer.get(w["name"])
        if mine is None:
            problems.append(f"{w['name']}: no peer")
            continue
        for key, theirs in (("batch", w.get("batch")), ("lr", w.get("lr")), ("weight_decay", w.get("weight_decay")),
                            ("momentum", w.get("momentum")), ("schedule", w.get("schedule")),
                            ("input_shape", w.get("input_shape")), ("classes", w.get("classes")),
                            ("parameters", w.get("parameters"))):
            if theirs is not None and mine[key] != theirs:
                problems.append(f"{w['name']}: {key} {theirs} in DeviceRace, {mine[key]} in the peer")
    return problems


def machine_header(args, cuda):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    probe = "import torch; print(torch.__version__); print(torch.cuda.get_device_name(0) if %s else '')" % cuda
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                             env=env()).stdout.splitlines()
    except subprocess.TimeoutExpired:
        out = []
    torch_version = out[0] if out else "?"
    gpu = out[1] if len(out) > 1 and out[1] else None
    machine = f"{cpu} ({os.cpu_count()} CPUs)" + (f" / {gpu}" if gpu else "")
    threads = 1 if cuda else args.threads
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    launcher = os.environ.get("DEVICERACE_COMPARE_COMMAND")  # set by bench/compare
    command = shlex.join(([launcher] if launcher else [os.path.basename(sys.executable), sys.argv[0]]) + sys.argv[1:])
    return (f"`{command}` · {now} · {machine} · torch {torch_version} · {threads} CPU thread"
            f"{'s' if threads > 1 else ''} per lane · OMP_WAIT_POLICY={env()['OMP_WAIT_POLICY']}"), torch_version, gpu


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of both sides (CPU rows; default 1)")
    ap.add_argument("--pairs", type=int, default=3, help="alternating A/B pairs per row (default 3)")
    ap.add_argument("--workloads", help="comma-separated workloads or row ids (e.g. imdb-bilstm/cells); "
                                        "default: every row for the device")
    ap.add_argument("--sections", help="comma-separated: peers, scaling, data, self, gui (default: those that apply)")
    ap.add_argument("--cli", default=DEFAULT_CLI, help="devicerace-cli (default: the release build)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: a third of the steps, 1 pair")
    ap.add_argument("--short", action="store_true",
                    help="a third of the steps, all the pairs (a GPU machine's short lease)")
    ap.add_argument("--peer-malloc", choices=("default", "tuned"), default="default",
                    help="the PyTorch peer's glibc malloc: as a fresh python gets it (default), or tuned from "
                         "the environment to keep freed blocks (MALLOC_*_ variables; a fairer match for "
                         "DeviceRace's caching CPU allocator)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the tables, with a header line, to FILE")
    ap.add_argument("--json", metavar="FILE", help="write every run's raw numbers to FILE")
    ap.add_argument("--docs", action="store_true",
                    help="also put the tables into docs/BENCHMARKS.md, between its bench/compare markers")
    ap.add_argument("--no-build", action="store_true", help="(bench/compare) skip the build")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.pairs < 1:
        ap.error("--threads and --pairs must be 1 or more")
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()] if args.workloads else []
    known = {r[0] for r in PEER_ROWS} | {r[1] for r in PEER_ROWS}
    unknown = [w for w in args.workloads if w not in known]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    applicable = ["peers", "scaling", "data", "gui"] if args.device == "cpu" else ["peers", "data", "self"]
    if args.sections:
        args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
        bad = [s for s in args.sections if s not in ("peers", "scaling", "data", "self", "gui")]
        if bad:
            ap.error(f"unknown section(s) {', '.join(bad)} (expected peers, scaling, data, self, gui)")
        for s in args.sections:
            if s not in applicable:
                print(f"compare: section '{s}' does not apply to --device {args.device}; skipped", file=sys.stderr)
        args.sections = [s for s in args.sections if s in applicable]
    else:
        args.sections = applicable
    args.cli = os.path.abspath(args.cli)
    if not os.access(args.cli, os.X_OK):
        ap.error(f"{args.cli}: no devicerace-cli there (build it, or pass --cli PATH)")
    # The peers read the workload schema from the same CLI (lanes/python/engine_schema.py).
    os.environ["DEVICERACE_CLI"] = args.cli
    return args


DOCS = os.path.join(ROOT, "docs", "BENCHMARKS.md")


def write_docs(device, text):
    """Replaces the block between `<!-- bench/compare DEVICE begin -->` and `... end -->`."""
    begin, end = f"<!-- bench/compare {device} begin -->", f"<!-- bench/compare {device} end -->"
    with open(DOCS) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        print(f"compare: {DOCS} has no '{begin}' ... '{end}' markers; tables not written there", file=sys.stderr)
        return
    head, rest = doc.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(DOCS + ".tmp", "w") as f:
        f.write(head + begin + "\n" + text.strip() + "\n" + end + tail)
    os.replace(DOCS + ".tmp", DOCS)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    header, torch_version, gpu = machine_header(args, args.device == "cuda")
    if args.device == "cuda" and not gpu:
        sys.exit("compare: --device cuda, but this python's torch sees no CUDA device")
    print(header + "\n", flush=True)
    h = Harness(args)
    problems = check_peers(args.cli)
    if problems:
        h.failed = True
        print("**The peers do not match DeviceRace's workloads:** " + "; ".join(problems) + "\n", flush=True)
        header += "\n\n**The peers do not match DeviceRace's workloads:** " + "; ".join(problems)
    tables = []
    started = time.perf_counter()
    try:
        for name in args.sections:
            table = getattr(h, f"section_{name}")()
            if table:
                tables.append(table)
                print(table + "\n", flush=True)
    finally:
        shutil.rmtree(h.tmp, ignore_errors=True)
    h.log(f"compare: done in {time.perf_counter() - started:.0f} s")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(header + "\n\n" + "\n\n".join(tables) + "\n")
    if args.docs:
        write_docs(args.device, header + "\n\n" + "\n\n".join(tables))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": sys.argv, "header": header, "device": args.device, "torch": torch_version,
                       "gpu": gpu, "threads": h.threads(), "pairs": h.pairs(), "quick": args.quick, "short": args.short,
                       "runs": h.runs, "tables": tables}, f, indent=1)
            f.write("\n")
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())

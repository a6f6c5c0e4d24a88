"""What DeviceRace's Python lane programs share beyond the protocol (devicerace_worker.py): the
data a lane trains on (decided as the engine decides it), the lane keys every lane reads the
same way, injected faults, and the training loop with its report points. The workloads both
lanes build from are the engine's (engine_schema.py, read through workload_table.py, in this
folder; nothing here imports from bench/).

pytorch_lane.py and keras_lane.py both run `train_loop`: one step at a time, the step's loss
and correct count kept on the device, read at report points only (the warm-up step, every
report_interval seconds, each epoch end, before each evaluation, the last step, a full step
buffer), evaluations outside throughput intervals (engine trainer.cpp Trainer::loop).

Imports no framework and nothing beyond the standard library and numpy (numpy only where data
is read), so a lane can say hello and refuse cleanly when its framework is missing.
"""
import os
import signal
import time

import devicerace_worker as dw

# ---------------------------------------------------------------------------------------------
# Where a step's time goes: the framework lanes' step breakdown.
# ---------------------------------------------------------------------------------------------


def breakdown_enabled():
    """DEVICERACE_BREAKDOWN=0 turns the step breakdown off, as in the engine (step_timer.cpp)."""
    return os.environ.get("DEVICERACE_BREAKDOWN", "1") != "0"


class CompiledStepClock:
    """The breakdown of a step the backend runs as one compiled program (jax.jit, tf.function) or
    dispatches asynchronously: "data", the host's batch assembly, timed on every step (numpy
    indexing: done when it returns), and "compute", the whole step, timed alone on every `every`-th
    step (the queue drained first, the step waited for: one pipeline drain per `every` steps).
    A step timed alone can take longer than the pipelined mean, where batch assembly overlaps the
    previous step: `take()` says which phase absorbs that overlap (Meter.report)."""

    def __init__(self, every=8):
        self.every = every if breakdown_enabled() else 0
        self.data = self.compute = 0.0
        self.data_steps = self.compute_steps = 0

    def due(self, step):
        return self.every > 0 and step % self.every == 0

    def add_data(self, seconds):
        if self.every:
            self.data += seconds
            self.data_steps += 1

    def add_compute(self, seconds):
        self.compute += seconds
        self.compute_steps += 1

    def take(self):
        """({"data": s, "compute": s} per step, "compute") or (None, None) without a timed step."""
        out = (None, None)
        if self.compute_steps and self.data_steps:
            out = ({"data": self.data / self.data_steps, "compute": self.compute / self.compute_steps}, "compute")
        self.data = self.compute = 0.0
        self.data_steps = self.compute_steps = 0
        return out


class PhaseClock:
    """Seconds by phase over a report interval's timed steps, on the host's clock: `start()` where a
    timed step begins, `mark(phase)` where each phase ends (time since the last mark goes to it),
    `step_done()` after the step. `take()` gives seconds per timed step by phase and starts the next
    interval. Every `every`-th step is timed (`due(step)`); DEVICERACE_BREAKDOWN=0 turns it off,
    as in the engine (step_timer.cpp). Host time is the step's time only where the work is done
    when the call returns (eager CPU) or the caller waited for it first."""

    def __init__(self, every=1):
        self.every = every if breakdown_enabled() else 0
        self.sums, self.steps, self.last = {}, 0, None

    def due(self, step):
        return self.every > 0 and step % self.every == 0

    def start(self):
        self.last = time.perf_counter()

    def mark(self, phase):
        now = time.perf_counter()
        self.sums[phase] = self.sums.get(phase, 0.0) + now - self.last
        self.last = now

    def step_done(self):
        self.steps += 1

    def take(self):
        """{phase: seconds per step} over the timed steps since the last take, or None."""
        out = {k: v / self.steps for k, v in self.sums.items()} if self.steps else None
        self.sums, self.steps = {}, 0
        return out


# ---------------------------------------------------------------------------------------------
# Lane keys every lane reads alike (thread_lane.cpp's checks).
# ---------------------------------------------------------------------------------------------


def check_threads(spec, name):
    """The threads= key checked against the CPUs present; (threads or None, cpu report)."""
    cpu = dw.cpu_report()
    threads = spec.get("threads")
    if threads and threads > cpu["logical_cpus"] * dw.max_threads_per_cpu():
        raise dw.LaneRefused(f"lane {name}: threads={threads} is far more than the {cpu['logical_cpus']} "
                             f"CPUs present (at most {cpu['logical_cpus'] * dw.max_threads_per_cpu()})")
    return threads, cpu


def check_parameters(workload, count, expected, framework):
    """Refuses a network whose parameter count differs from the engine's (config's expected_parameters)."""
    if expected is not None and count != expected:
        raise dw.LaneRefused(f"{workload}: the {framework} model has {count:,} parameters but DeviceRace's has "
                             f"{expected:,}: not the same network, so the race would not be fair")


def parse_fault(field):
    """The lane's fault field {"kind", "step", "rank"} as (kind, step): STEP 0 fires before
    training starts, unset is step 1; a rank is a data-parallel lane's (the parent keeps it)."""
    if not field:
        return None, 0
    return field["kind"], field.get("step", 1)


def inject_fault(kind, step, program):
    """fault=KIND[:STEP], as engine/src/train/fault.cpp (tests of how a parent copes)."""
    if kind == "throw":
        raise dw.LaneError(f"injected fault at step {step}")
    dw.log(f"{program}: injecting fault '{kind}' at step {step}")
    if kind == "abort":
        os.abort()
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "exit":
        os._exit(42)
    while kind == "hang":
        time.sleep(1)

# ---------------------------------------------------------------------------------------------
# Data (engine race.cpp resolveData, dataset.cpp, lane_data.cpp; workload_table's reader).
# ---------------------------------------------------------------------------------------------


def resolve_data(name, w, mode, data_dir, train_limit, test_limit, lane="the PyTorch lane"):
    """What the lane trains on, decided as the engine decides it: a dict with the ready
    message's dataset fields plus "fashion" (the IDX folder) or "counts" (synthetic train, test)."""
    import workload_table as wt
    shape = "x".join(str(d) for d in w["shape"])
    Lane = lane[0].upper() + lane[1:]

    def limited(train, test):
        return (min(train_limit, train) if train_limit else train, min(test_limit, test) if test_limit else test)

    def synthetic(train, test, note):  # the engine's sizes (w["synthetic_train"], w["synthetic_test"])
        tr, te = limited(train, test)
        return {"name": f"synthetic ({shape})", "source": "synthetic", "synthetic": True, "train": tr, "test": te,
                "note": note, "counts": (tr, te)}

    want_synthetic, explicit_real = mode == "synthetic", mode == "real"
    ds = w["dataset"]
    if ds == "imagenet":
        if want_synthetic or (not explicit_real and not data_dir):
            return synthetic(w["synthetic_train"], w["synthetic_test"],
                             "" if mode else "no ImageNet here: racing on synthetic data (tf_cnn_benchmarks style)")
    elif ds == "imdb":
        if want_synthetic or (not explicit_real and not data_dir):
            return synthetic(w["synthetic_train"], w["synthetic_test"],
                             "" if mode else "no IMDb reviews given (--data-dir aclImdb): racing on synthetic tokens")
        raise dw.LaneRefused(f"{name}: {lane} has no IMDb reader; race it on synthetic tokens "
                             "(--data synthetic or data=synthetic) or on a DeviceRace lane")
    elif ds == "text":
        if want_synthetic:
            return synthetic(w["synthetic_train"], w["synthetic_test"], "")
        if w.get("lm"):  # the language models: the engine's corpus reader (workload_table.load_text)
            path = data_dir or wt.text_corpus()
            return {"name": f"text: {path}", "source": path, "synthetic": False, "note": "", "text": path}
        raise dw.LaneRefused(f"{name}: {lane} has no text-corpus reader; race it on synthetic text "
                             "(--data synthetic or data=synthetic) or on a DeviceRace lane")
    elif want_synthetic:
        return synthetic(w["synthetic_train"], w["synthetic_test"], "")
    if ds == "cifar10" and data_dir:
        raise dw.LaneRefused(f"{name}: {Lane} cannot read CIFAR-10 binaries ({data_dir}); without "
                             "--data-dir it races on Fashion-MNIST adapted to 3x32x32, or use --data synthetic")
    folder = data_dir if (data_dir and ds == "fashion-mnist") else wt.fashion_dir()
    if not os.path.isdir(folder):
        raise dw.LaneRefused(f"{folder}: not a folder; expected the Fashion-MNIST IDX files (install "
                             "dataset-fashion-mnist, pass --data-dir, or use --data synthetic)")
    out = {"name": "Fashion-MNIST", "source": folder, "synthetic": False, "note": "", "fashion": folder}
    if ds != "fashion-mnist":
        out["name"] = f"Fashion-MNIST (adapted to {shape})"
        out["note"] = (f"{name} races on real Fashion-MNIST, padded/resized and channel-expanded to {shape}"
                       + (" (pass --data-dir with CIFAR-10 binaries to use CIFAR-10)" if ds == "cifar10" else ""))
    return out


def load_lm_text(w, d, c):
    """A language model's real text (resolve_data gave `d["text"]`): the engine's windows of the
    corpus as (train ids (N, T+1) int64, validation ids, alphabet), or the lane refused with the
    reader's message."""
    import workload_table as wt
    length, stride, lower, only = wt.text_windows(w, c["data_dir"])
    try:
        return wt.load_text(d["text"], length, stride, lower, only, c["train_limit"], c["test_limit"])
    except (OSError, ValueError) as e:
        raise dw.LaneRefused(str(e)) from None


def load_fashion_split(folder, prefix, limit, classes):
    """(images (N, 28, 28) uint8, labels (N,) int64) numpy arrays, the first `limit` examples
    (dataset.cpp loadSplit)."""
    import numpy as np
    import workload_table as wt
    try:
        x = wt.read_idx(folder, f"{prefix}-images-idx3-ubyte")
        y = wt.read_idx(folder, f"{prefix}-labels-idx1-ubyte")
    except FileNotFoundError as e:  # the reader's message for a missing file
        raise dw.LaneRefused(str(e)) from None
    if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise dw.LaneRefused(f"{folder}: {prefix} images {tuple(x.shape)} and labels {tuple(y.shape)} do not match")
    if x.shape[1] != 28 or x.shape[2] != 28:
        raise dw.LaneRefused(f"{folder}: {prefix} images are {x.shape[1]}x{x.shape[2]}, expected 28x28 (Fashion-MNIST)")
    if y.size and int(y.max()) >= classes:
        raise dw.LaneRefused(f"{folder}: {prefix} labels go up to {int(y.max())}, expected 0 to {classes - 1}")
    n = min(limit, x.shape[0]) if limit else x.shape[0]
    return x[:n].copy(), y[:n].astype(np.int64)

# ---------------------------------------------------------------------------------------------
# The loop (engine trainer.cpp Trainer::loop).
# ---------------------------------------------------------------------------------------------


def train_loop(lane, session, program):
    """Trains `lane` to its last step, or until stopped, paused time excluded; returns (final
    state, message). The lane provides:
      meter, c (the parsed config), total_steps, train_count, batch, fault ((kind, step) or (None, 0)),
      describe()                 -> the execution text
      new_order()                -> an epoch's order of the train_count examples (any indexable)
      step(order, pos, take, k)  -> queues optimizer step k (0-based) on order[pos:pos + take]: the
                                    loss and correct count stay on the device until report()
      pending()                  -> steps queued since the last report
      report()                   -> synchronises, reads the queued values into meter.report
                                    (its result: ("diverged", message) or None)
      evaluate()                 -> the whole test set, between meter.state("evaluating") and "running"
    """
    meter, c = lane.meter, lane.c
    n, b = lane.train_count, lane.batch
    total, warmup = lane.total_steps, c["warmup"]
    fault_kind, fault_step = lane.fault
    meter.begin()
    meter.state("running")
    session.execution(lane.describe())
    last_eval = -1
    order, pos = None, n
    if fault_kind and fault_step == 0:
        inject_fault(fault_kind, 0, program)
    while meter.step < total:
        if session.stop_requested:
            return lane.report() or ("stopped", f"stopped at step {meter.step}")
        if session.pause_requested:
            diverged = lane.report()
            if diverged:
                return diverged
            meter.state("paused")
            meter.paused_for(session.wait_while_paused())
            meter.state("running")
            continue
        if pos >= n:
            order, pos = lane.new_order(), 0
        step = meter.step
        if c["fail_at_step"] > 0 and step + 1 == c["fail_at_step"]:
            raise dw.LaneError(f"injected fault at step {step + 1}")
        if fault_kind and step + 1 == fault_step:
            inject_fault(fault_kind, fault_step, program)
        take = min(b, n - pos)
        lane.step(order, pos, take, step)
        pos += take
        meter.advance(take)

        step = meter.step
        epoch_end = pos >= n
        last = step == total
        eval_due = epoch_end or (c["eval_every"] > 0 and step % c["eval_every"] == 0)
        if (lane.pending() >= lane.step_buffer or step == warmup or eval_due or last
                or meter.interval_elapsed() >= c["report_interval"]):
            diverged = lane.report()
            if diverged:
                return diverged
        if eval_due or (last and last_eval != step):
            lane.evaluate()
            last_eval = step
    return "finished", ""

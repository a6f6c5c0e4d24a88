"""What the tests of the Python lane programs (tests/lanes/test_*_lane.py) share: a lane process
driven over the worker protocol as DeviceRace drives it, the sample schema, and the
measurement-integrity check (a lane's reported samples/s against samples / wall time seen from
outside the lane).
"""
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LANES = os.path.join(ROOT, "lanes", "python")
PYTHON = os.environ.get("DEVICERACE_PYTHON") or sys.executable
sys.path.insert(0, LANES)
import devicerace_worker as dw  # noqa: E402,F401  (no framework in this process)

FASHION = os.environ.get("DEVICERACE_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
TYPES = {"hello", "ready", "error", "sample", "execution", "hb", "ack", "bye"}
STATES = {"preparing", "running", "evaluating", "paused", "finished", "failed", "diverged", "stopped"}
# Seconds a lane may take to say hello / to answer (torch imports slowly on a busy machine).
PATIENCE = 60
# How far a lane's reported samples/s may be from samples / wall time of its measured steps.
RATE_TOLERANCE = 0.03


def cli():
    """The devicerace-cli whose workload schema the tests send (ctest sets DEVICERACE_CLI)."""
    return os.environ.get("DEVICERACE_CLI") or os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")


_schema = None


def schema():
    """`devicerace-cli workloads --schema`, read once."""
    global _schema
    if _schema is None:
        r = subprocess.run([cli(), "workloads", "--schema"], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{cli()} workloads --schema exited {r.returncode}: {r.stderr[-300:]}")
        _schema = json.loads(r.stdout)
    return _schema


def engine_fields(workload):
    """What the engine's config message carries of the schema for `workload` (protocol 1.2):
    its entry, the shared constants and its parameter count."""
    entry = next((w for w in schema()["workloads"] if w["name"] == workload), None)
    return {"workload_info": entry, "constants": schema()["constants"],
            "expected_parameters": entry["parameters"] if entry else None}


def engine_config(defaults, over):
    """A config message as the engine sends it: `defaults`, the schema's fields for the workload
    they name after `over`, then `over` (a test may send a wrong count or no schema at all)."""
    c = dict(defaults, type="config", proto=dw.PROTO)
    c.update(engine_fields(over.get("workload", c["workload"])))
    c.update(over)
    return c


# Seconds of our silence after which next() sends the lane an empty line (it ignores it).
KEEPALIVE_S = 5.0


class Lane:
    """One lane process and its pipes, read on threads (as the parent's poll loop does)."""

    def __init__(self, argv, proto="1", env=None):
        env = dict(env or os.environ, OMP_WAIT_POLICY="PASSIVE")
        self.p = subprocess.Popen(argv + ["--proto", proto], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env)
        self.lines = queue.Queue()
        self.raw = []  # every stdout line, as bytes
        self.received = []  # (time.monotonic() when read, message) of every message next() returned
        self.err = []
        self.last_word = time.monotonic()  # when the lane last heard from us
        threading.Thread(target=self._read_out, daemon=True).start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read_out(self):
        for line in self.p.stdout:
            self.raw.append(line)
            self.lines.put((time.monotonic(), line))
        self.lines.put(None)

    def _read_err(self):
        for line in self.p.stderr:
            self.err.append(line.decode("utf-8", "replace"))

    def send(self, message):
        self.send_raw((json.dumps(message) + "\n").encode())

    def send_raw(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()
        self.last_word = time.monotonic()

    def keep_alive(self):
        """An empty line when the lane has heard nothing for KEEPALIVE_S: DeviceRace pings every 2 s,
        and a lane stops itself after 20 s without a word (a slow machine's long test run did)."""
        if time.monotonic() - self.last_word < KEEPALIVE_S or self.p.stdin.closed:
            return
        try:
            self.send_raw(b"\n")
        except (BrokenPipeError, ValueError, OSError):
            pass  # the lane has gone or its input was closed on purpose

    def next(self, timeout=PATIENCE, skip=("hb",)):
        """The next message (hb skipped), or None at the end of its output."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no message within {timeout} s; stderr: {self.stderr()[-1500:]}")
            if line is None:
                return None
            self.keep_alive()  # heartbeats arrive every second: a chance to speak while waiting
            arrival, line = line
            m = json.loads(line)  # every stdout line is a protocol message
            if m.get("type") not in skip:
                self.received.append((arrival, m))
                return m

    def until(self, pred, timeout=PATIENCE):
        seen = []
        while True:
            m = self.next(timeout)
            if m is None:
                raise AssertionError(f"output ended waiting; saw {[x.get('type') for x in seen][-10:]}; "
                                     f"stderr: {self.stderr()[-1500:]}")
            seen.append(m)
            if pred(m):
                return m, seen

    def wait(self, timeout=PATIENCE):
        return self.p.wait(timeout)

    def stderr(self):
        """What the lane wrote to stderr; once it has exited, all of it (the reader thread may still
        be reading its last lines when wait() returns: a loaded machine showed it)."""
        if self.p.poll() is not None:
            self._err_reader.join(timeout=10)
        return "".join(self.err)

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            try:
                f.close()
            except OSError:
                pass


def check_sample(test, s):
    """One sample against docs/EVENTS.md's schema (what sampleFromJsonLine needs, and types)."""
    test.assertIn(s["kind"], ("train", "eval", "state"))
    test.assertIsInstance(s["lane"], str)
    for key in ("step", "samples"):
        test.assertIsInstance(s[key], int)
        test.assertGreaterEqual(s[key], 0)
    for key in ("epoch", "t", "wall_time"):
        test.assertIsInstance(s[key], (int, float))
        test.assertTrue(math.isfinite(s[key]))
    for key in ("loss", "accuracy", "samples_per_sec", "steps_per_sec", "interval_s"):
        test.assertIn(key, s)
        test.assertTrue(s[key] is None or isinstance(s[key], (int, float)), key)
    test.assertIn("memory_bytes", s)
    test.assertIsInstance(s["warmup"], bool)
    if s["kind"] == "train":
        for key in ("accuracy", "samples_per_sec", "steps_per_sec", "interval_s"):
            test.assertIsInstance(s[key], float, key)
        test.assertGreaterEqual(s["accuracy"], 0)
        test.assertLessEqual(s["accuracy"], 1)
    elif s["kind"] == "eval":
        test.assertIsInstance(s["loss"], float)
        test.assertIsInstance(s["interval_s"], float)
        test.assertTrue(0 <= s["accuracy"] <= 1)
    else:
        test.assertIn(s["state"], STATES)
        test.assertIsInstance(s["message"], str)


def assert_rate_integrity(test, lane, tolerance=RATE_TOLERANCE):
    """A lane's throughput against what the parent sees: the samples trained between the warm-up
    report and the last training report, over the wall time between their arrivals. The run must
    have no evaluation or pause between those two reports (one epoch longer than the steps, no
    eval_every).

    Two checks. (1) The lane's own clock: its measured intervals' samples over their summed
    seconds must be within `tolerance` of the observed rate, and each interval's rate times its
    seconds must be its samples. A lane that leaves work out of its intervals (time between them,
    or a clock read before the device finished whose work lands in no interval) or counts samples
    wrongly fails this, whatever the machine's noise, since both sides see the same stalls.
    (2) The figure DeviceRace shows, the median of the intervals' rates (engine summary.cpp): a
    median is meant to differ from the mean when a few intervals stall (another process, a
    collection), so its tolerance widens by the interquartile spread of the intervals' rates the
    lane itself measured; on a steady machine that spread is ~1%. (CI once failed the median
    against a 3% bound, 13,653 vs 12,353 samples/s, on a loaded machine.)
    Returns (reported median, observed) samples/s."""
    train = [(t, m["sample"]) for t, m in lane.received
             if m["type"] == "sample" and m["sample"]["kind"] == "train"]
    measured = [s for _, s in train if not s["warmup"]]
    test.assertGreaterEqual(len(measured), 10, "too few measured intervals for a rate")
    first = max(i for i, (_, s) in enumerate(train) if s["warmup"])  # the report that ends the warm-up
    (t0, s0), (t1, s1) = train[first], train[-1]
    between = [m["sample"] for t, m in lane.received if t0 < t < t1 and m["type"] == "sample"
               and m["sample"]["kind"] != "train"]
    test.assertEqual(between, [], "an evaluation or pause inside the measured window")
    samples = s1["samples"] - s0["samples"]
    observed = samples / (t1 - t0)
    counted = sum(s["samples_per_sec"] * s["interval_s"] for s in measured)
    test.assertLessEqual(abs(counted / samples - 1), 0.001,
                         f"the intervals' rates hold {counted:.0f} samples, the counters {samples}")
    own = samples / sum(s["interval_s"] for s in measured)
    test.assertLessEqual(abs(own / observed - 1), tolerance,
                         f"the lane's intervals say {own:.1f} samples/s, observed {observed:.1f} "
                         f"({samples} samples in {t1 - t0:.3f} s)")
    rates = [s["samples_per_sec"] for s in measured]
    reported = statistics.median(rates)
    q1, _, q3 = statistics.quantiles(rates, n=4)
    spread = (q3 - q1) / reported
    test.assertLessEqual(abs(reported / observed - 1), tolerance + spread,
                         f"reported {reported:.1f} samples/s (median; intervals' spread "
                         f"{spread:.1%}), observed {observed:.1f} ({samples} samples in {t1 - t0:.3f} s)")
    return reported, observed


def assert_step_breakdown(test, samples, phases, tolerance=0.05):
    """breakdown in a framework lane's train samples: the phases `phases` (and "other"),
    each >= 0, summing to the interval's mean step time within `tolerance`, in every interval after
    the warm-up that has one (an interval may have no timed step: the Keras lanes time one in
    eight). Returns the breakdowns."""
    train = [s for s in samples if s["kind"] == "train"]
    previous = {id(s): (train[i - 1]["step"] if i else 0) for i, s in enumerate(train)}
    measured = [s for s in train if not s["warmup"]]
    with_breakdown = [s for s in measured if s.get("step_breakdown")]
    # At least one: how many intervals hold a timed step depends on the machine's speed (an interval
    # is report_interval seconds; the Keras lanes time one step in eight).
    test.assertGreaterEqual(len(with_breakdown), 1, f"none of {len(measured)} intervals has a step breakdown")
    for s in with_breakdown:
        b = s["step_breakdown"]
        test.assertEqual(set(b), set(phases) | {"other"}, b)
        test.assertTrue(all(v >= 0 for v in b.values()), b)
        steps = s["step"] - previous[id(s)]
        mean_step = s["interval_s"] / steps
        test.assertLessEqual(abs(sum(b.values()) / mean_step - 1), tolerance,
                             f"phases sum to {sum(b.values()) * 1e3:.3f} ms, the step is {mean_step * 1e3:.3f} ms: {b}")
    # The rest of the machine, as the engine's lanes read it (other_cpus, steal): in the intervals
    # long enough for /proc/stat to tick.
    if os.path.exists("/proc/stat"):
        loaded = [s for s in train if "other_cpus" in s]
        test.assertTrue(loaded, "no train sample read the machine's load")
        for s in loaded:
            test.assertGreaterEqual(s["other_cpus"], 0.0, s)
            test.assertTrue(0.0 <= s["steal"] <= 1.0, s)
    return [s["step_breakdown"] for s in with_breakdown]

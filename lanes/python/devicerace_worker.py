"""The DeviceRace worker protocol (version 1.0, docs/EVENTS.md) for lanes written in Python.

A lane program (pytorch_lane.py; later Keras) calls `guard_stdout()` first, then hands a
*program* object to `serve()`. This module does everything on the wire the way the C++ worker
(engine/src/workers/worker_server.cpp) does:

- stdout carries protocol lines only: fd 1 is duplicated for the protocol and then pointed at
  stderr, so a print() from model code, a library warning or a C-level printf lands in the
  lane's log (the parent keeps the last stderr lines), never in the protocol stream;
- `hello` at once; `hb` every second; `ack` for every command with an `id`;
- control lines from stdin on a reader thread: at most 64 KiB (longer ones are dropped), not
  JSON / no `type` / nesting over 64 levels: logged and ignored, unknown types ignored;
- the lane stops on `stop`, stdin's end, SIGTERM/SIGINT/SIGHUP, EPIPE on stdout, or 20 s
  without a line from the parent; it ends with its final state sample, then `bye`;
- exit statuses: 0 finished/stopped (or never started), 1 failed/diverged, 2 lane refused,
  3 protocol refused; never 126, 127 or 255.

The program object provides:
  hello()                 -> {"version": "pytorch 2.11.0", "devices": {...device report...}}
  configure(config, sess) -> a lane (raise LaneRefused, or any exception, to refuse it)
and the lane:
  ready                   -> {"batch", "total_steps", "threads", "dataset": {...}}
  meter                   -> the lane's Meter (samples, the lane clock, divergence)
  run(sess)               -> (final state, message): "finished", "stopped", "diverged", "failed"
`Meter` and `lane_fields` / `parse_config` are the framework-neutral parts of a lane.
"""
import json
import math
import os
import queue
import signal
import socket
import sys
import threading
import time

import engine_schema

PROTO_MAJOR = 1
PROTO_MINOR = 2  # 1.1: the lane travels as typed fields (config.lane_fields); 1.2: config.workload_info, constants
PROTO = f"{PROTO_MAJOR}.{PROTO_MINOR}"

# Seconds between heartbeats (the parent declares a worker lost after 15 s of silence).
HEARTBEAT_S = 1.0
# Seconds without a line from the parent (it pings every 2 s) before the lane stops itself.
PARENT_SILENCE_S = 20.0
# Longest control line accepted from the parent.
MAX_CONTROL_LINE = 64 * 1024
# JSON nesting deeper than any message has.
MAX_DEPTH = 64

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_PROTOCOL = 0, 1, 2, 3
TERMINAL = ("finished", "stopped", "failed", "diverged")


def max_threads_per_cpu():
    """CPU threads per logical CPU a lane may ask for (the engine's, from the config)."""
    return engine_schema.constant("max_threads_per_cpu")


class LaneRefused(Exception):
    """The lane cannot run as configured; the message is shown to the user as is."""


class LaneError(Exception):
    """A lane failure whose message is shown as is (no exception type in front)."""


def log(text):
    """One line for the lane's log (stderr; the parent keeps the last 20 lines)."""
    try:
        sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------------------------------------
# The protocol stream.
# ---------------------------------------------------------------------------------------------

_protocol_fd = None


def guard_stdout():
    """Keeps the real stdout for protocol lines and sends everything else written to fd 1
    (print(), C/C++ libraries) to stderr. Call it first, before importing the framework."""
    global _protocol_fd
    if _protocol_fd is None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        _protocol_fd = os.dup(1)  # not inherited by children (PEP 446)
        os.dup2(2, 1)
    return _protocol_fd


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _clean(obj):
    """Non-finite numbers become null (JSON has none; a chart keeps its last finite point)."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _finite(obj)


def encode_message(message):
    text = json.dumps(_clean(message), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8", "replace")


class Writer:
    """Protocol lines, whole, one writer at a time; broken once the parent stops reading."""

    def __init__(self, fd):
        self._fd = fd
        self._lock = threading.Lock()
        self.broken = False

    def send(self, message):
        data = encode_message(message)
        with self._lock:
            if self.broken:
                return False
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self._fd, view)
                except InterruptedError:
                    continue
                except OSError:  # EPIPE (BrokenPipeError), EBADF: the parent is gone
                    self.broken = True
                    return False
                if n <= 0:
                    self.broken = True
                    return False
                view = view[n:]
            return True


def parse_message(line):
    """A control line as a dict with a string `type`, or None (not a message)."""
    if not line or len(line) > MAX_CONTROL_LINE or line[:1] != b"{":
        return None
    depth = deepest = 0
    for c in line:
        if c in (0x7B, 0x5B):  # { [
            depth += 1
            deepest = max(deepest, depth)
        elif c in (0x7D, 0x5D) and depth > 0:
            depth -= 1
    if deepest > MAX_DEPTH:
        return None
    try:
        m = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(m, dict) or not isinstance(m.get("type"), str):
        return None
    return m


class LineSplitter:
    """Bytes in, lines out; a line longer than `limit` is dropped whole (and counted)."""

    def __init__(self, limit):
        self.limit = limit
        self.partial = bytearray()
        self.skipping = False
        self.dropped = 0

    def feed(self, data):
        lines = []
        while data:
            nl = data.find(b"\n")
            chunk = data if nl < 0 else data[:nl]
            if not self.skipping:
                if len(self.partial) + len(chunk) > self.limit:
                    self.skipping = True
                    self.partial = bytearray()
                else:
                    self.partial += chunk
            if nl < 0:
                break
            data = data[nl + 1:]
            if self.skipping:
                self.dropped += 1
                self.skipping = False
                continue
            line = bytes(self.partial)
            self.partial = bytearray()
            if line.endswith(b"\r"):
                line = line[:-1]
            lines.append(line)
        return lines


# ---------------------------------------------------------------------------------------------
# Lane specs and config messages (engine lane_spec.cpp parseLaneSpec, protocol.cpp).
# ---------------------------------------------------------------------------------------------

# The JSON type of each lane field (the engine's lane-key table, engine/src/lanes/lane_keys.cpp,
# checked every value with its key's parser before sending it).
FIELD_TYPES = {"name": str, "threads": int, "batch": int, "lr": float, "precision": str, "cost": float,
               "channels_last": bool, "eval_batch": int, "wd": float, "momentum": float, "schedule": str,
               "lstm": str, "data": str, "augment": str, "fused": bool, "graph": bool, "resident": bool, "isolate": str,
               "cli": str, "fault": dict, "framework": str, "cmd": str, "workers": int, "backend": str,
               "global_batch": str, "master": str, "instrument": bool, "printed": bool, "logdir": str, "loss_tag": str,
               "acc_tag": str, "quiet": float, "workdir": str, "copy": str, "args": str}


def lane_fields(c, accepted, ignored, program="this lane"):
    """The config's lane (its typed fields) as a dict {"device", key: value...}. Keys in
    `accepted` are returned, keys in `ignored` dropped, any other key is refused naming the ones
    this program takes; a value of the wrong JSON type is refused."""
    fields, label = c["lane_fields"], c["lane"]
    device = fields.get("device")
    if not isinstance(device, str) or not device:
        raise LaneRefused(f"lane '{label}': no device")
    if device.startswith("ssh://"):
        raise LaneRefused(f"lane '{label}': {program} runs its lane where it is: the lane may not name another host")
    if device != "cpu" and device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise LaneRefused(f"lane '{label}': unknown device '{device}' (expected cpu, cuda or cuda:N)")
    spec = {"device": device}
    for key, value in fields.items():
        if key == "device":
            continue
        if key not in accepted and key not in ignored:
            known = "an engine key " if key in FIELD_TYPES else ""
            raise LaneRefused(f"lane '{label}': {program} does not take {known}'{key}' (it takes "
                              f"{', '.join(accepted)}; it ignores {', '.join(ignored)})")
        want = FIELD_TYPES[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or (isinstance(value, bool) and want is not bool):
            raise LaneRefused(f"lane '{label}': {key} must be a JSON {want.__name__}, not {value!r}")
        if key == "fault" and not (isinstance(value.get("kind"), str)
                                   and all(isinstance(value.get(k, 0), int) and value.get(k, 0) >= 0
                                           for k in ("step", "rank"))):
            raise LaneRefused(f"lane '{label}': fault must be {{\"kind\", \"step\", \"rank\"}}, not {value!r}")
        if key in accepted:  # ignored keys are checked, then dropped
            spec[key] = value
    return spec


def parse_config(m):
    """The config message's settings, checked like configFromMessage (LaneRefused otherwise)."""
    proto = m.get("proto")
    major = None
    if isinstance(proto, str) and "." in proto and proto.split(".", 1)[0].isdigit():
        major = int(proto.split(".", 1)[0])
    if major != PROTO_MAJOR:
        raise LaneRefused(f"config for protocol '{proto if isinstance(proto, str) else ''}'; this lane speaks {PROTO}")

    def get(key, kind, default=None, optional=True):
        v = m.get(key, default)
        if v is None and optional:
            return None
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
            raise LaneRefused(f"malformed config message: '{key}' must be {kind.__name__}")
        return v

    if not isinstance(m.get("workload"), str):
        raise LaneRefused("malformed config message: no workload")
    if not isinstance(m.get("lane_fields"), dict):
        raise LaneRefused("config without lane_fields: this lane needs a DeviceRace parent that speaks protocol "
                          "1.1 or later (update the DeviceRace that started it)")
    c = {
        "workload": m["workload"],
        "lane": m["lane"] if isinstance(m.get("lane"), str) else m["lane_fields"].get("device", "?"),
        "lane_fields": m["lane_fields"],
        "data": get("data", str),
        "data_dir": get("data_dir", str, "") or "",
        "train_limit": get("train_limit", int),
        "test_limit": get("test_limit", int),
        "epochs": get("epochs", int),
        "steps": get("steps", int),
        "target": get("target", float),
        "seed": get("seed", int, 0, optional=False),
        "eval_every": get("eval_every", int, 0, optional=False),
        "warmup": get("warmup", int, 20, optional=False),
        "report_interval": get("report_interval", float, 0.1, optional=False),
        "fail_at_step": get("fail_at_step", int, 0, optional=False),
        "expected_parameters": get("expected_parameters", int),
    }
    # Protocol 1.2: the engine's definition of the workload and its shared constants (engine_schema).
    info, constants = m.get("workload_info"), m.get("constants")
    if info is not None and not (isinstance(info, dict) and info.get("name") == c["workload"]):
        raise LaneRefused("malformed config message: 'workload_info' is not the workload's entry")
    if constants is not None and not isinstance(constants, dict):
        raise LaneRefused("malformed config message: 'constants' must be an object")
    try:
        engine_schema.install(info, constants)
    except (KeyError, TypeError) as e:
        raise LaneRefused(f"malformed config message: 'workload_info' lacks {e}") from None
    if c["data"] is not None and c["data"] not in ("real", "synthetic"):
        raise LaneRefused(f"config: data '{c['data']}' (expected real or synthetic)")
    if (any(c[k] is not None and c[k] < 1 for k in ("train_limit", "test_limit", "epochs", "steps"))
            or c["eval_every"] < 0 or c["warmup"] < 0 or c["seed"] < 0
            or not 0.01 <= c["report_interval"] <= 60):
        raise LaneRefused("config: a count or interval is out of range")
    return c


# ---------------------------------------------------------------------------------------------
# The machine.
# ---------------------------------------------------------------------------------------------

def cpu_report():
    """{"model", "physical_cores", "logical_cpus", "bf16_units"} from /proc/cpuinfo (distinct
    physical id/core id pairs, as the engine counts them; bf16 units from the flags, as
    engine/src/devices/cpu_info.cpp reads them)."""
    model, cores, phys, bf16 = "", set(), "0", None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and not model:
                    model = value
                elif key == "physical id":
                    phys = value
                elif key == "core id":
                    cores.add((phys, value))
                elif key == "flags" and bf16 is None:
                    flags = set(value.split())
                    bf16 = "AMX" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else ""
    except OSError:
        pass
    logical = os.cpu_count() or 1
    try:
        logical = len(os.sched_getaffinity(0)) or logical
    except (AttributeError, OSError):
        pass
    physical = max(1, min(len(cores) or logical, logical))
    return {"model": model or "unknown CPU", "physical_cores": physical, "logical_cpus": logical,
            "bf16_units": bf16 or ""}


def host_name():
    try:
        return socket.gethostname()
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Samples and the lane clock.
# ---------------------------------------------------------------------------------------------

class MachineLoad:
    """How busy the rest of the machine kept its CPUs, as the engine's devices/machine_load.h
    reads it: /proc/stat's busy ticks less this process's own CPU time (`other_cpus`, CPUs), and
    the hypervisor's steal share of the machine's CPU time (`steal`). `read` gives the figures
    since the previous read (the first starts the count and gives None), None where /proc/stat
    cannot be read."""

    def __init__(self, path="/proc/stat", own=None):
        self.path = path
        self.own = own or time.process_time  # the lane's own CPU seconds (a script lane: its command's)
        try:
            self.hz = float(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError, AttributeError):
            self.hz = 100.0
        first = self._ticks()
        self.cpus = first[3] if first else 0
        self._last = None

    @staticmethod
    def parse(text):
        """(busy, steal, total, cpus) ticks from /proc/stat's text, or None."""
        ticks, cpus = None, 0
        for line in text.splitlines():
            if line.startswith("cpu") and len(line) > 3 and line[3].isdigit():
                cpus += 1
            elif line.startswith("cpu "):
                v = [int(x) for x in line.split()[1:11]]
                if len(v) < 8:
                    return None
                busy = v[0] + v[1] + v[2] + v[5] + v[6]  # user nice system irq softirq
                ticks = (busy, v[7], busy + v[3] + v[4] + v[7])
        return ticks + (cpus,) if ticks else None

    def _ticks(self):
        try:
            with open(self.path) as f:
                return self.parse(f.read())
        except (OSError, ValueError):
            return None

    def read(self):
        now = (self._ticks(), self.own(), time.perf_counter())
        last, self._last = self._last, now
        if not last or not last[0] or not now[0]:
            return None
        (b0, s0, t0, _), own0, w0 = last
        (b1, s1, t1, _), own1, w1 = now
        wall = w1 - w0
        if wall <= 0 or t1 <= t0 or b1 < b0 or s1 < s0:
            return None
        other = max(0.0, ((b1 - b0) / self.hz - (own1 - own0)) / wall)
        return other, (s1 - s0) / (t1 - t0)


class Meter:
    """A lane's metric samples (docs/EVENTS.md), its clock (seconds since training started,
    paused time excluded) and the engine's divergence rule. One per lane, used by its
    training thread only; `emit` sends a sample."""

    def __init__(self, emit, lane, steps_per_epoch, warmup, memory=None):
        self.emit = emit
        self.lane = lane
        self.steps_per_epoch = steps_per_epoch
        self.warmup = warmup
        self.memory = memory or (lambda: None)
        self.step = self.samples = 0
        self.reported_step = self.reported_samples = 0
        self.start = None
        self.paused = 0.0
        self.interval_start = time.perf_counter()
        self.first_loss = None
        # A training loss this many times its first value (at least 1) is a divergence.
        self.divergence = engine_schema.constant("divergence_factor")
        self.last_t = 0.0
        self.load = MachineLoad()
        self.cpus_sent = False

    def begin(self):
        """Training starts now: the lane clock and the first interval."""
        self.start = self.interval_start = time.perf_counter()
        self.load.read()

    def restart_interval(self):
        """A new throughput interval (after an evaluation or a pause): the clock and the load."""
        self.interval_start = time.perf_counter()
        self.load.read()

    def t(self, now=None):
        if self.start is None:
            return 0.0
        self.last_t = max(self.last_t, (now or time.perf_counter()) - self.start - self.paused)
        return self.last_t

    def interval_elapsed(self):
        return time.perf_counter() - self.interval_start

    def base(self, kind, now=None):
        return {"kind": kind, "lane": self.lane, "step": self.step, "samples": self.samples,
                "epoch": self.step / self.steps_per_epoch if self.steps_per_epoch > 0 else 0.0,
                "t": self.t(now), "wall_time": time.time(), "loss": None, "accuracy": None,
                "samples_per_sec": None, "steps_per_sec": None, "interval_s": None,
                "memory_bytes": self.memory(), "warmup": False}

    def state(self, state, message=""):
        s = self.base("state")
        s["state"] = state
        s["message"] = message
        if state == "running" and not self.cpus_sent and self.load.cpus > 0:
            s["machine_cpus"] = self.load.cpus
            self.cpus_sent = True
        self.emit(s)

    def advance(self, samples):
        """One optimizer step of `samples` examples finished (queued; not yet synchronised)."""
        self.step += 1
        self.samples += samples

    def report(self, losses, correct, breakdown=None, overlapped=None):
        """A report point: `losses` (floats, one per step since the last report) and the
        correct count over those steps, read from the device after synchronising, and the timed
        steps' seconds per step by phase (`breakdown`, or None). Where the phases add up to more
        than the interval's mean step (steps timed alone, the others pipelined), the phase
        `overlapped` gives up the excess. Emits a train sample; returns ("diverged", message)
        when a loss diverged, else None."""
        if not losses:
            return None
        now = time.perf_counter()
        dt = now - self.interval_start
        steps = self.step - self.reported_step
        samples = self.samples - self.reported_samples
        total, summed, bad = 0.0, 0, None
        for i, loss in enumerate(losses):
            finite = math.isfinite(loss)
            if self.first_loss is None and finite:
                self.first_loss = loss
            if not finite:
                bad = (self.reported_step + i + 1, "the training loss became " + ("NaN" if math.isnan(loss) else "infinite"))
                break
            if self.first_loss is not None and loss > self.divergence * max(1.0, self.first_loss):
                bad = (self.reported_step + i + 1, f"the training loss reached {loss:.3g}, over "
                       f"{self.divergence:.0f}x its first value {self.first_loss:.3g}")
                break
            total += loss
            summed += 1
        s = self.base("train", now)
        s["loss"] = total / summed if summed else None
        s["accuracy"] = correct / samples if samples > 0 else None
        s["samples_per_sec"] = samples / dt if dt > 0 else None
        s["steps_per_sec"] = steps / dt if dt > 0 else None
        s["interval_s"] = dt
        s["warmup"] = self.reported_step < self.warmup
        if breakdown and steps > 0 and dt > 0:
            # "other": what the timed phases leave of the interval's mean step (never negative),
            # as the engine's trainer reports it (docs/EVENTS.md, step_breakdown).
            phases = {k: v for k, v in breakdown.items() if v >= 0}
            excess = sum(phases.values()) - dt / steps
            if excess > 0 and overlapped in phases:
                phases[overlapped] = max(0.0, phases[overlapped] - excess)
            phases["other"] = max(0.0, dt / steps - sum(phases.values()))
            s["step_breakdown"] = phases
        load = self.load.read()
        if load:
            s["other_cpus"], s["steal"] = load
        self.emit(s)
        self.reported_step, self.reported_samples = self.step, self.samples
        self.interval_start = time.perf_counter()
        if bad:
            return "diverged", f"diverged at step {bad[0]}: {bad[1]}"
        return None

    def evaluation(self, loss, accuracy, seconds, text=""):
        s = self.base("eval")
        s["loss"], s["accuracy"], s["interval_s"] = loss, accuracy, seconds
        if text:
            s["text"] = text
        self.emit(s)
        # Evaluation is on the lane clock (time to accuracy) but outside throughput intervals.
        self.restart_interval()

    def paused_for(self, seconds):
        self.paused += seconds
        self.restart_interval()


# ---------------------------------------------------------------------------------------------
# The session: what a lane sees of the protocol while it trains.
# ---------------------------------------------------------------------------------------------

class Session:
    def __init__(self, writer, name="lane"):
        self._writer = writer
        self.name = name
        self._cond = threading.Condition(threading.RLock())
        self.stop_requested = False
        self.pause_requested = False
        self.stop_reason = ""

    def send(self, message):
        return self._writer.send(message)

    def emit(self, sample):
        self._writer.send({"type": "sample", "sample": sample})

    def execution(self, text):
        self._writer.send({"type": "execution", "text": text})

    def request_stop(self, why):
        if not self.stop_requested:
            self.stop_reason = why
            log(f"{self.name}: stopping: {why}")
        self.stop_requested = True
        with self._cond:
            self._cond.notify_all()

    def set_paused(self, paused):
        self.pause_requested = paused
        with self._cond:
            self._cond.notify_all()

    def wait_while_paused(self):
        """Blocks while paused (until resume or stop); returns the seconds it waited."""
        t0 = time.perf_counter()
        with self._cond:
            while self.pause_requested and not self.stop_requested:
                self._cond.wait(0.1)  # a timeout: a signal handler sets the flags without notifying
        return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# The worker.
# ---------------------------------------------------------------------------------------------

def parse_proto(argv):
    """The --proto N argument (1 when absent); None when it is not a number."""
    for i, a in enumerate(argv):
        value = None
        if a == "--proto" and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith("--proto="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return 1


def refuse_protocol(requested, version, name="this lane"):
    """Says hello with our version, explains on stderr and returns exit status 3."""
    Writer(guard_stdout()).send({"type": "hello", "proto": PROTO, "version": version})
    log(f"{name}: the parent asked for protocol {requested}; {name} ({version}) speaks {PROTO}")
    return EXIT_PROTOCOL


class Worker:
    def __init__(self, program, name="lane"):
        self.program = program
        self.name = name
        self.writer = Writer(guard_stdout())
        self.session = Session(self.writer, name)
        self.inbox = queue.Queue()
        self.last_from_parent = time.monotonic()
        self.input_open = True
        self.lane = None
        self.started = False
        self.stopping = False
        self.signal_number = 0
        self.ended = False
        self.done = threading.Event()

    # Threads -----------------------------------------------------------------------------

    def _reader(self):
        splitter = LineSplitter(MAX_CONTROL_LINE)
        while True:
            try:
                data = os.read(0, 65536)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                break
            self.last_from_parent = time.monotonic()
            for line in splitter.feed(data):
                m = parse_message(line)
                if m is None:
                    if line.strip():
                        log(f"{self.name}: ignored a line that is not a message")
                    continue
                self._control(m)
        self.input_open = False
        if self.lane is not None and not self.stopping and not self.ended:
            self._stop("the parent closed the connection")
        self.inbox.put(None)

    def _control(self, m):
        """Reader thread: commands that act at once; config and start go to the main thread."""
        kind = m["type"]
        if kind in ("config", "start"):
            self.inbox.put(m)  # the main thread acks them once handled
            return
        if kind == "stop":
            self._stop("asked to")
        elif kind == "pause" and self.lane is not None:
            self.session.set_paused(True)
        elif kind == "resume" and self.lane is not None:
            self.session.set_paused(False)
        self._ack(m)  # ping and unknown types: nothing else to do

    def _ack(self, m):
        if "id" in m:
            self.writer.send({"type": "ack", "id": m["id"]})

    def _heartbeat(self):
        next_beat = time.monotonic() + HEARTBEAT_S
        reported_signal = 0
        while not self.done.wait(0.05):
            now = time.monotonic()
            if self.signal_number and not reported_signal:
                reported_signal = self.signal_number
                self._stop(f"signal {reported_signal}")
            if self.writer.broken and not self.stopping:
                self._stop("the parent stopped reading")
            if (self.input_open and now - self.last_from_parent > PARENT_SILENCE_S
                    and not self.stopping):
                self._stop(f"no word from the parent for {PARENT_SILENCE_S:.0f} s")
            if now >= next_beat:
                next_beat = now + HEARTBEAT_S
                hb = {"type": "hb"}
                if self.lane is not None:
                    hb["cpu"] = getattr(self.lane, "cpu_seconds", time.process_time)()
                self.writer.send(hb)

    def _on_signal(self, sig, frame):
        # Runs in the main thread between bytecodes: plain assignments and a raw write only
        # (no locks: the main thread may hold them).
        if not self.signal_number:
            try:
                os.write(2, f"{self.name}: stopping: signal {sig}\n".encode())
            except OSError:
                pass
        self.signal_number = sig
        self.stopping = True
        self.session.stop_requested = True

    def _stop(self, why):
        self.stopping = True
        self.session.request_stop(why)

    # The main thread ---------------------------------------------------------------------

    def run(self):
        hello = self.program.hello()
        self.writer.send({"type": "hello", "proto": PROTO, "version": hello["version"], "host": host_name(),
                          "pid": os.getpid(), "devices": hello["devices"]})
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        threading.Thread(target=self._heartbeat, name="devicerace-heartbeat", daemon=True).start()
        threading.Thread(target=self._reader, name="devicerace-reader", daemon=True).start()
        try:
            return self._loop()
        finally:
            self.done.set()

    def _loop(self):
        while True:
            if not self.input_open and self.lane is None:
                return EXIT_OK  # the parent left before a lane was set up
            if self.lane is not None and not self.started and (not self.input_open or self.stopping):
                return EXIT_OK  # accepted but never started
            try:
                m = self.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if m is None:
                continue
            if m["type"] == "config":
                if self.lane is not None:
                    return self._refuse("the lane is already configured")
                try:
                    self.lane = self.program.configure(m, self.session)
                except LaneRefused as e:
                    return self._refuse(str(e))
                except SystemExit as e:  # library code that exits with a message
                    return self._refuse(str(e.code) if e.code is not None else "the lane was refused")
                except Exception as e:
                    return self._refuse(f"{type(e).__name__}: {e}")
                self.writer.send(dict({"type": "ready"}, **self.lane.ready))
                self._ack(m)
            elif m["type"] == "start":
                if self.lane is not None and not self.started and not self.stopping:
                    self.started = True
                    self._ack(m)
                    return self._train()
                self._ack(m)

    def _refuse(self, why):
        self.writer.send({"type": "error", "phase": "config", "message": " ".join(str(why).split())})
        return EXIT_REFUSED

    def _train(self):
        lane = self.lane
        try:
            state, message = lane.run(self.session)
        except LaneError as e:
            state, message = "failed", str(e)
        except Exception as e:
            log(f"{self.name}: training failed: {type(e).__name__}: {e}")
            state, message = "failed", " ".join(f"{type(e).__name__}: {e}".split())
        try:
            lane.meter.state(state, message)
        except Exception as e:  # the meter itself failed: a bare final sample
            log(f"{self.name}: final sample: {type(e).__name__}: {e}")
            self.session.emit({"kind": "state", "lane": "", "step": 0, "samples": 0, "t": 0.0,
                               "wall_time": time.time(), "state": state, "message": message})
        self.ended = True
        self.writer.send({"type": "bye", "reason": state})
        return EXIT_OK if state in ("finished", "stopped") else EXIT_FAILED


def finish(code):
    """Ends the process with `code` now: no interpreter shutdown (a stderr the parent no
    longer reads must not turn the status into 120, nor a library's atexit hang it)."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    if code in (126, 127, 255) or not 0 <= code <= 125:
        code = EXIT_FAILED
    os._exit(code)


def run_main(main, name):
    """A lane program's entry point: runs main(argv) and ends the process with its exit code.
    Anything unforeseen becomes a line for the log and EXIT_FAILED, never status 120/255."""
    try:
        code = main(sys.argv[1:])
    except BaseException as e:
        log(f"{name}: {type(e).__name__}: {e}")
        code = EXIT_FAILED
    finish(code)

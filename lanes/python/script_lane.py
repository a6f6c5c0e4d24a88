#!/usr/bin/env python3
"""DeviceRace's script lane: a user's own training command raced as a lane (README, "Race your
own training"). DeviceRace starts it for each lane of a race run with `-- COMMAND...` as
    python lanes/python/script_lane.py --proto 1
(on an ssh:// host: `devicerace-cli worker --framework script` there) and speaks the worker
protocol with it on stdin/stdout (devicerace_worker.py). The lane's config carries the command.

On `start` it runs the command (an argv, never through a shell) in a session of its own, with
  - the lane's device: DEVICERACE_DEVICE ("cpu", or "cuda:0": the lane's GPU, the only one
    CUDA_VISIBLE_DEVICES leaves visible; empty on a CPU lane, so torch.cuda.is_available() is
    False there);
  - its threads: OMP/MKL/OpenBLAS/NumExpr thread counts, TensorFlow's and XLA's flags, and a CPU
    affinity of that many CPUs (the race picks CPUs no other live lane uses where there are enough);
  - workers=N: N processes with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); rank 0 reports for the lane;
  - DEVICERACE_REPORT_FD, the write end of a pipe its reports come back on (devicerace/_channel.py),
    and on PYTHONPATH the devicerace package and, unless instrument=off, the sitecustomize that
    instruments PyTorch (devicerace/_torch.py);
  - logdir=DIR: DEVICERACE_LOGDIR, and DIR's TensorBoard event files read live (tb_watch.py).
The command's stdout and stderr are its own (they never reach the protocol): kept as the lane's
log tail, the stderr's last lines naming a failure. Rank 0's lines are matched for held-out
figures (printed_metrics.py: "test accuracy 0.83", "val_loss: 0.41"), taken as evaluations at the
time each was read unless printed=false, logdir= is given, or the script reports its own
evaluations (lane.evaluate).

The timing rules are the engine's: the lane clock starts at the first training step (what comes
before it - imports, data, compilation - is "preparing", its length said as the time to the
first step), the warm-up steps' intervals are greyed, throughput is taken over report intervals
between steps as the script's own clock saw them, evaluations are outside those intervals, and
paused time (SIGSTOP/SIGCONT of the command's process groups) is left out.
"""
import atexit
import math
import os
import re
import select
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque

import devicerace_worker as dw
from notebook_script import NotebookError, is_notebook, write_notebook_script
from printed_metrics import figures
from script_file import python_script_index, python_script_of, script_file_problem
from script_processes import (Command, NvmlEnergy, Rapl, become_subreaper, device_report, failure_lines,
                              free_port, gpu_report, stat_of)

NAME = "the script lane"
HERE = os.path.dirname(os.path.abspath(__file__))
# Seconds without a step before the lane fails (quiet=).
DEFAULT_QUIET_S = 120.0
# Longest report line read from the channel.
MAX_REPORT_LINE = 64 * 1024
# Seconds between reads of a logdir.
LOGDIR_POLL_S = 0.5
# Seconds a printed figure waits before it is taken: a report the script sent before printing
# (lane.evaluate) is read first, and then the printed one is left out.
PRINTED_HOLD_S = 0.3
# Figures taken lately that a line printing the same again does not repeat (the same line on
# stdout and stderr, a progress bar's postfix shown each epoch).
PRINTED_REPEATS = 4
ACCEPTED = ("name", "threads", "batch", "workers", "precision", "instrument", "printed", "logdir", "loss_tag",
            "acc_tag", "quiet", "workdir", "fault", "args")
IGNORED = ("framework", "cost", "isolate", "cli", "copy")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def script_name(command):
    """The word a message names the command by: the script of `python3 train.py`, else the program."""
    script = python_script_of(command)
    if script is not None:
        return os.path.basename(script)
    if len(command) > 2 and command[1] == "-m":
        return command[2]
    return os.path.basename(command[0]) if command else "the command"


# ---------------------------------------------------------------------------------------------
# The lane.
# ---------------------------------------------------------------------------------------------


def flop_text(flops):
    """FLOPs as the execution text says them: "0.8 MFLOP", "20.2 kFLOP", "4.12 GFLOP", "24 FLOP"."""
    if flops >= 1e9:
        return f"{flops / 1e9:,.2f} GFLOP"
    if flops >= 1e5:
        return f"{flops / 1e6:,.1f} MFLOP"
    if flops >= 100:
        return f"{flops / 1e3:,.1f} kFLOP"
    return f"{flops:,.0f} FLOP"


class ScriptLane:
    def __init__(self, config, session):
        c = dw.parse_config(config)
        spec = dw.lane_fields(c, ACCEPTED, IGNORED, "a script lane")
        command = config.get("command")
        if (not isinstance(command, list) or not command or len(command) > 4096
                or not all(isinstance(w, str) and "\0" not in w for w in command)):
            raise dw.LaneRefused("a script lane needs its command: the words after -- (devicerace-cli race "
                                 "--lane cpu -- python3 train.py)")
        command = list(command)
        if spec.get("args"):
            # This lane's own words after the race's command (args=--compile): split as a shell would.
            try:
                command += shlex.split(str(spec["args"]))
            except ValueError as e:
                raise dw.LaneRefused(f"lane '{spec.get('name') or c['lane']}': args={spec['args']}: {e}") from None
        self.config, self.spec, self.command = c, spec, command
        self.argv = self.command  # what runs: the command, or for a notebook the script of its cells
        self.notebook = None      # a notebook's (code cells, lines left out)
        self.session = session
        self.name = script_name(self.command)
        self.label = spec.get("name") or c["lane"]
        self.device = spec["device"]
        self.threads = spec.get("threads")
        self.ranks = spec.get("workers", 1)
        self.launched_ranks = 1  # a launcher in the command (torchrun --nproc-per-node N): its ranks
        self.steps_by_hand = False  # the script updates its weights itself: steps end at zero_grad()
        self.trainer_processes = 1  # processes of the script's that report steps (summed when several)
        self.batch = spec.get("batch")
        self.quiet = spec.get("quiet", DEFAULT_QUIET_S)
        self.instrument = spec.get("instrument", True)
        self.read_prints = spec.get("printed", True)
        self.printed = deque()        # (time, accuracy, loss) from rank 0's printed lines
        self.last_printed = deque(maxlen=PRINTED_REPEATS)  # the last (accuracy, loss) taken
        self.previous_line = {}       # reader thread (stdout's, stderr's): the line it read before
        self.reports = deque(maxlen=4096)  # (time, step, samples) of the step reports, for a printed figure's step
        self.reported_evaluations = False  # the script reports its own (lane.evaluate)
        self.fault = spec.get("fault")
        self.workdir = os.path.expanduser(spec["workdir"]) if spec.get("workdir") else os.getcwd()
        self.logdir = spec.get("logdir")
        if self.logdir:
            self.logdir = os.path.join(self.workdir, os.path.expanduser(self.logdir))
        cpus = config.get("cpus")
        self.cpus = [c for c in cpus if isinstance(c, int) and c >= 0] if isinstance(cpus, list) else []
        if self.threads is not None:
            if not 1 <= self.threads <= dw.max_threads_per_cpu() * (os.cpu_count() or 1):
                raise dw.LaneRefused(f"lane '{self.label}': threads={self.threads} is out of range for this machine")
        if not 1 <= self.ranks <= 64:
            raise dw.LaneRefused(f"lane '{self.label}': workers={self.ranks}: a script lane runs 1 to 64 processes")
        if self.batch is not None and self.batch < 1:
            raise dw.LaneRefused(f"lane '{self.label}': batch={self.batch} must be 1 or more")
        if not 1 <= self.quiet <= 86400:
            raise dw.LaneRefused(f"lane '{self.label}': quiet={self.quiet:g} must be 1 to 86400 seconds")
        self.check_command()
        self.check_device()
        self.watcher = None
        if self.logdir:
            self.open_logdir()
        self.steps_limit = c["steps"]
        # A GPU lane's peak memory: what rank 0's script reports (its tensors on the lane's GPUs).
        self.peak_memory = None
        # The FLOPs per sample the instrumentation counted over one step, and its precision.
        self.flops = None
        self.meter = dw.Meter(session.emit, self.label, 0, c["warmup"], lambda: self.peak_memory)
        self.ready = {"batch": (self.batch or 0) * self.ranks, "total_steps": self.steps_limit or 0,
                      "threads": self.threads or 0,
                      "dataset": {"name": "the script's own", "source": " ".join(self.command)[:400],
                                  "synthetic": False, "train": 0, "test": 0}}
        if not self.threads:
            self.ready.pop("threads")
        if os.environ.get("SLURM_JOB_ID"):  # a slurm:// script lane: srun's one task
            self.ready.update({"job": os.environ["SLURM_JOB_ID"], "nodes": os.environ.get("SLURMD_NODENAME", "")})

    # Checks before the race ------------------------------------------------------------------

    def where(self):
        return f"on {dw.host_name()}" if os.environ.get("SSH_CONNECTION") else "here"

    def check_command(self):
        if not os.path.isdir(self.workdir):
            raise dw.LaneRefused(f"workdir {self.workdir}: no such folder {self.where()}")
        program = self.command[0]
        if "/" in program:
            path = program if os.path.isabs(program) else os.path.join(self.workdir, program)
            if not os.path.exists(path):
                raise dw.LaneRefused(f"{program}: no such file {self.where()}")
            if os.path.isdir(path) or not os.access(path, os.X_OK):
                raise dw.LaneRefused(f"{program}: not executable {self.where()} (chmod +x it, or name its "
                                     "interpreter first: -- python3 train.py)")
        elif shutil.which(program) is None:
            raise dw.LaneRefused(f"{program}: command not found {self.where()} (not on PATH)")
        # python3 SCRIPT: the script must be there (a remote host without it fails here, not at start),
        # and be something Python runs (script_file.py).
        script = python_script_of(self.command)
        if script is not None:
            path = os.path.join(self.workdir, os.path.expanduser(script))
            if not os.path.exists(path):
                hint = (" (copy it there: copy=DIR, or rsync; README, \"Race your own training\")"
                        if os.environ.get("SSH_CONNECTION") else "")
                raise dw.LaneRefused(f"{script}: no such file in {self.workdir} {self.where()}{hint}")
            if is_notebook(path):
                return self.run_notebook(python_script_index(self.command), path)
            problem = script_file_problem(script, path, os.path.basename(program))
            if problem:
                raise dw.LaneRefused(problem)
            return
        # A launcher's script (accelerate launch train.ipynb): a notebook is run the same way.
        for i, word in enumerate(self.command[1:], start=1):
            path = os.path.join(self.workdir, os.path.expanduser(word))
            if word.endswith(".ipynb") and os.path.isfile(path):
                return self.run_notebook(i, path)

    def run_notebook(self, i, path):
        """Python cannot run a notebook: the command runs a script of its code cells instead of
        the notebook, word i (notebook_script.py), written to a folder of this lane's, removed
        when it ends."""
        name = os.path.basename(self.command[i])
        folder = tempfile.mkdtemp(prefix="devicerace-notebook-")
        atexit.register(shutil.rmtree, folder, True)
        out = os.path.join(folder, name + ".py")
        try:
            cells, skipped = write_notebook_script(path, name, out)
        except NotebookError as e:
            raise dw.LaneRefused(str(e)) from None
        self.argv = self.command[:i] + [out] + self.command[i + 1:]
        self.notebook = (cells, skipped)

    def gpu_index(self):
        """The lane's GPU as NVML and the engine number it ("cuda:1": 1, "cuda": 0)."""
        return int(self.device[5:]) if self.device.startswith("cuda:") else 0

    def check_device(self):
        if self.device.startswith("cuda"):
            index = self.gpu_index()
            gpus, reason = gpu_report()
            if gpus and index >= len(gpus):
                raise dw.LaneRefused(f"lane '{self.label}': {self.device}: this machine has {len(gpus)} GPU(s)")
            if not gpus and shutil.which("nvidia-smi"):
                raise dw.LaneRefused(f"lane '{self.label}': {self.device}: {reason}")
            if not gpus:
                dw.log(f"{NAME}: {reason}; the script is run on {self.device} anyway (its framework may see one)")
            if self.ranks > 1:
                raise dw.LaneRefused(f"lane '{self.label}': workers={self.ranks} on one GPU: NCCL refuses two ranks "
                                     "on one device; race cuda:0+cuda:1 as a data-parallel lane of the built-in "
                                     "workloads, or run your own torchrun on one lane")

    def open_logdir(self):
        try:
            import tb_watch
            self.watcher = tb_watch.LogdirWatcher(self.logdir, self.spec.get("loss_tag"), self.spec.get("acc_tag"))
        except ImportError as e:
            raise dw.LaneRefused(f"logdir= needs the tensorboard package for {sys.executable} ({e}); "
                                 "run scripts/setup or pip install tensorboard")
        except re.error as e:
            raise dw.LaneRefused(f"lane '{self.label}': loss_tag/acc_tag is not a regular expression: {e}")

    # The environment -------------------------------------------------------------------------

    def base_env(self):
        env = dict(os.environ)
        for key in list(env):
            if key.startswith("DEVICERACE_") and key not in ("DEVICERACE_OMP_WAIT",):
                env.pop(key)
        env["DEVICERACE_LANE"] = self.label
        env["DEVICERACE_LANE_DEVICE"] = self.device
        env["DEVICERACE_REPORT_INTERVAL"] = str(self.config["report_interval"])
        env["DEVICERACE_PRECISION"] = self.spec.get("precision", "fp32")
        env["PYTHONUNBUFFERED"] = "1"  # the log tail keeps up with the script
        if self.device == "cpu":
            env["DEVICERACE_DEVICE"] = "cpu"
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            index = self.gpu_index()
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
            env["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
            env["DEVICERACE_DEVICE"] = "cuda:0"
        if self.threads:
            n = str(self.threads)
            for key in THREAD_VARIABLES:
                env[key] = n
            env["DEVICERACE_THREADS"] = n
            env["TF_NUM_INTEROP_THREADS"] = "1"
            flags = env.get("XLA_FLAGS", "")
            env["XLA_FLAGS"] = (flags + f" --xla_cpu_multi_thread_eigen={'true' if self.threads > 1 else 'false'}"
                                f" intra_op_parallelism_threads={n}").strip()
        if os.environ.get("DEVICERACE_OMP_WAIT") != "spin":
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the engine's and the shipped lanes' processes
        if self.logdir:
            env["DEVICERACE_LOGDIR"] = self.logdir
        paths = [HERE]
        if self.instrument:
            paths.insert(0, os.path.join(HERE, "devicerace_site"))
        else:
            env["DEVICERACE_INSTRUMENT"] = "off"
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def rank_env(self, port):
        def env(rank):
            if self.ranks == 1:
                return {}
            return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(self.ranks),
                    "LOCAL_WORLD_SIZE": str(self.ranks), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                    "ROLE_WORLD_SIZE": str(self.ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    "TORCHELASTIC_RUN_ID": "devicerace"}
        return env

    def cpu_sets(self):
        """The CPUs of each rank: the race's choice (cpus), else the first ones this process may use;
        None where the lane names no thread count (the script's processes get every CPU)."""
        if not self.threads or self.device != "cpu":
            return lambda rank: None
        try:
            allowed = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return lambda rank: None
        pool = [c for c in self.cpus if c in allowed] or allowed
        need = self.threads * self.ranks
        if len(pool) < need:
            pool = (pool + [c for c in allowed if c not in pool])
        def cpus(rank):
            if len(pool) >= need:
                return set(pool[rank * self.threads:(rank + 1) * self.threads])
            # Fewer CPUs than threads: they share, rank by rank round the pool.
            return {pool[(rank * self.threads + i) % len(pool)] for i in range(min(self.threads, len(pool)))}
        return cpus

    # The race --------------------------------------------------------------------------------

    def describe(self):
        parts = [f"your command: {' '.join(self.command)}"]
        if self.notebook:
            cells, skipped = self.notebook
            run = f"its {cells} code cell{'s' if cells > 1 else ''} run in order in the notebook's folder"
            if skipped:
                more = f" and {len(skipped) - 6} more" if len(skipped) > 6 else ""
                run += f", without what only IPython runs: {', '.join(skipped[:6])}{more}"
            parts.append(run)
        if self.threads:
            parts.append(f"{self.threads} thread{'s' if self.threads > 1 else ''} (OMP/MKL/OpenBLAS/TF/XLA, "
                         "CPU affinity)")
        if self.ranks > 1:
            parts.append(f"{self.ranks} ranks with torchrun's environment (rank 0 reports)")
        if self.launched_ranks > 1:
            parts.append(f"{self.launched_ranks} ranks started by the command itself (a launcher or a spawn; rank 0 "
                         "reports, samples are its × the ranks)")
        ways = []
        if self.logdir:
            ways.append(f"TensorBoard scalars from {self.logdir}")
        ways.append("devicerace.lane() / callbacks")
        if self.instrument:
            ways.append("PyTorch's optimizer steps and backward() losses, Keras' fit() (instrument=on)")
        parts.append("reports: " + ", or ".join(ways))
        if self.trainer_processes > 1:
            parts.append(f"{self.trainer_processes} processes of the script's report steps (trainers it started "
                         "itself without torch.distributed, as Hogwild's): the lane's steps and samples are "
                         "their sum")
        if self.steps_by_hand:
            parts.append("steps: the backward() passes between a module's zero_grad() calls (the script updates "
                         "its weights itself, no torch.optim optimizer)")
        if self.batch:
            parts.append(f"samples = steps × batch {self.batch}")
        if self.flops and self.flops[0] is None:
            parts.append(f"FLOPs not counted: {self.flops[1]}")
        elif self.flops:
            parts.append(f"{flop_text(self.flops[0])} a sample in {self.flops[1]}, {self.flops[2]}")
        return "; ".join(parts)

    def run(self, session):
        self.session.execution(self.describe())
        self.meter.state("preparing")
        become_subreaper()
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        # The lane keeps its own write end open for the race: the channel never reads as ended while
        # a launcher's rank 0 may still reopen it by path (after the launcher closed its copy).
        try:
            self.proc = Command(self.argv, self.workdir, self.base_env(), self.ranks,
                                self.rank_env(free_port() if self.ranks > 1 else 0), self.cpu_sets(), write_fd,
                                f"/proc/{os.getpid()}/fd/{read_fd}",
                                self.on_printed if self.read_prints and not self.watcher else None)
        except BaseException:
            os.close(write_fd)
            os.close(read_fd)
            raise
        self.meter.load = dw.MachineLoad(own=self.cpu_seconds)
        self.meter.load.read()
        try:
            return self.supervise(session, read_fd)
        finally:
            self.proc.stop()  # the command's processes, and what they left behind
            os.close(write_fd)
            os.close(read_fd)
            # The final state sample stands at the last thing the script reported (its exit, or
            # the stop, is not training time).
            end = self.lane_time(self.last[2]) if self.last else 0.0
            self.meter.t = lambda now=None: end

    def cpu_seconds(self):
        """CPU seconds of this process and the command's: each rank with its reaped children, and
        the live processes below them (a launcher's ranks)."""
        total = time.process_time()
        proc = getattr(self, "proc", None)
        pids = [p.pid for p in proc.procs] if proc else []
        # The processes below are looked for once a second (a kernel without /proc children
        # lists makes it a scan of /proc); their times are read at every call.
        now = time.monotonic()
        if now >= getattr(self, "below_until", 0.0):
            self.below, self.below_until = list(proc.below()) if proc else [], now + 1.0
        ticks = [st[2] for st in map(stat_of, pids + self.below) if st]
        return total + sum(ticks) / self.meter.load.hz

    def supervise(self, session, read_fd):
        self.splitter = dw.LineSplitter(MAX_REPORT_LINE)
        self.first_time = None       # the first step's time (the lane clock's zero)
        self.last = None             # (step, samples, time) at the end of the last interval
        self.step = 0
        self.samples = 0
        self.refused = 0
        self.source = None
        self.hint = None             # what the script's instrumentation said of its missing steps
        self.process_counts = {}     # pid: (step, samples) of each process that reports
        self.held_report = None      # a report of several processes' too soon after the last
        self.paused_total = 0.0      # seconds paused, on the monotonic clock
        self.pauses = []             # (start, end) of each pause
        self.last_progress = time.monotonic()
        self.tb_offset = time.time() - time.monotonic()
        next_logdir = 0.0
        channel_open = True
        paused_at = None
        while True:
            if session.stop_requested:
                self.proc.stop()
                self.drain(read_fd)
                self.settle_printed()
                return "stopped", ""
            if session.pause_requested and paused_at is None:
                self.proc.signal(signal.SIGSTOP)
                paused_at = time.monotonic()
            elif not session.pause_requested and paused_at is not None:
                self.proc.signal(signal.SIGCONT)
                now = time.monotonic()
                self.pauses.append((paused_at, now))
                self.paused_total += now - paused_at
                self.meter.paused = self.paused_total
                self.last_progress += now - paused_at
                paused_at = None
            if paused_at is not None:
                time.sleep(0.05)
                continue
            if channel_open:
                ready, _, _ = select.select([read_fd], [], [], 0.05)
                if ready:
                    channel_open = self.read_channel(read_fd)
            else:
                time.sleep(0.05)
            if self.watcher and time.monotonic() >= next_logdir:
                next_logdir = time.monotonic() + LOGDIR_POLL_S
                self.read_logdir()
            self.take_printed(time.monotonic() - PRINTED_HOLD_S)
            if self.steps_limit and self.step >= self.steps_limit:
                self.proc.stop()
                self.settle_printed()
                return "finished", f"finished at step {self.step:,} (--steps {self.steps_limit:,}; the command was stopped)"
            ended = self.proc.ended()
            if ended is not None:
                self.drain(read_fd)
                self.settle_printed()
                if self.watcher:
                    self.read_logdir()
                return self.end(*ended)
            if time.monotonic() - self.last_progress > self.quiet:
                self.proc.stop()
                return "failed", self.quiet_message()
            self.fire_fault()

    def fire_fault(self):
        # fault=exit|abort|hang (tests): the command's process, as a user's script could end.
        if not self.fault or self.step < max(1, self.fault.get("step", 1)):
            return
        kind = self.fault["kind"]
        if kind == "abort":
            self.proc.signal(signal.SIGABRT)
        elif kind == "segv":
            self.proc.signal(signal.SIGSEGV)
        elif kind == "hang":
            self.proc.signal(signal.SIGSTOP)
        self.fault = None

    def quiet_message(self):
        how = self.hint or "is it instrumented? (README, \"Race your own training\")"
        if self.step == 0:
            return f"{self.name} reported no step in {self.quiet:.0f} s; {how}"
        return f"{self.name} reported no step for {self.quiet:.0f} s after step {self.step:,}"

    def end(self, rank, code):
        who = self.name if self.ranks == 1 else f"{self.name} (rank {rank})"
        if code == 0:
            if self.step == 0:
                hint = (f"; its logdir {self.logdir} " + ("got no event file" if not os.path.isdir(self.logdir) or
                                                          not self.watcher.files_seen else
                                                          "had no scalar matching the loss tag")
                        if self.watcher else "")
                how = self.hint or "is it instrumented? (README, \"Race your own training\")"
                return "failed", f"{who} exited (status 0) without reporting a training step{hint}; {how}"
            return "finished", ""
        tail = self.proc.stderr_tail(rank) or self.proc.output_tail(rank)
        why = failure_lines(tail)
        at = f" at step {self.step:,}" if self.step else " before its first step"
        if code < 0:
            sig = -code
            try:
                signame = signal.Signals(sig).name
            except ValueError:
                signame = f"signal {sig}"
            oom = " (out of memory? the kernel's OOM killer sends SIGKILL)" if sig == signal.SIGKILL else ""
            message = f"{who} was killed by signal {sig} ({signame}){at}{oom}"
        else:
            message = f"{who} failed{at} (exit status {code})"
        return "failed", message + (f": {why}" if why else "")

    # Reports -------------------------------------------------------------------------------------

    def drain(self, read_fd):
        while self.read_channel(read_fd):
            ready, _, _ = select.select([read_fd], [], [], 0)
            if not ready:
                break

    def read_channel(self, read_fd):
        try:
            data = os.read(read_fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        for line in self.splitter.feed(data):
            m = dw.parse_message(line.replace(b'"t":', b'"type":', 1)) if line[:1] == b"{" else None
            if m is None:
                self.refuse(f"not a report: {line[:80]!r}")
                continue
            self.on_report(m)
        return True

    def refuse(self, why):
        self.refused += 1
        if self.refused <= 20:
            dw.log(f"{NAME}: refused a report ({why})")

    @staticmethod
    def number(m, key, integer=False):
        v = m.get(key)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if integer and not float(v).is_integer():
            return None
        return int(v) if integer else float(v) if math.isfinite(v) else None

    def on_report(self, m):
        kind = m["type"]
        if kind == "hello" and not self.watcher:
            world = self.number(m, "world", True)
            if world and 1 < world <= 4096 and self.ranks == 1 and self.launched_ranks != world:
                # Rank 0 of ranks the command started itself (torchrun, accelerate launch,
                # torch.multiprocessing.spawn): each rank trains on its share, as with workers=N.
                self.launched_ranks = world
                self.session.execution(self.describe())
            return
        if kind == "hello" or self.watcher:
            return  # with logdir= the TensorBoard scalars are the lane's one source
        if kind == "hint":
            if isinstance(m.get("text"), str) and m["text"]:
                self.hint = m["text"][:400]
            return
        source = m.get("source")
        if kind == "step":
            step, t = self.number(m, "step", True), self.number(m, "time")
            samples = self.number(m, "samples", True)
            if step is None or t is None or step < 1:
                return self.refuse(f"step report without a finite step and time: {m!r:.120}")
            if source != self.source and self.source is not None and source == "api":
                self.restart_count()  # the script's own reports take over from the hooks
            self.source = source
            step, samples = self.processes_count(self.number(m, "pid", True), step, samples)
            if step is None:
                return self.refuse(f"a process's counters went back: {m!r:.120}")
            if m.get("steps_by") == "zero_grad" and source == "torch" and not self.steps_by_hand:
                self.steps_by_hand = True
                self.session.execution(self.describe())
            samples = self.lane_samples(step, samples)
            if step < self.step or (samples is not None and samples < self.samples):
                return self.refuse(f"counters went back: step {step} after {self.step}")
            memory = self.number(m, "memory", True)
            if memory is not None and memory >= 0:
                self.peak_memory = max(self.peak_memory or 0, memory)
            loss = m.get("loss")
            if m.get("loss_reported") and self.number(m, "loss") is None:
                self.refuse(f"a non-finite loss at step {step} (not plotted)")
            self.progress(step, samples, t, self.number(m, "loss"), m.get("phases"))
            if isinstance(m.get("flops"), dict) and self.flops is None:
                self.take_flops(m["flops"], t)
        elif kind == "eval":
            t = self.number(m, "time")
            if t is None:
                return self.refuse("an evaluation without a time")
            if self.number(m, "accuracy") is not None or self.number(m, "loss") is not None:
                self.reported_evaluations = True
            self.evaluation(t, self.number(m, "accuracy"), self.number(m, "loss"), self.number(m, "seconds"),
                            m.get("text") if isinstance(m.get("text"), str) else "")
        else:
            self.refuse(f"unknown report type {kind!r}")

    def processes_count(self, pid, step, samples):
        """The lane's steps and examples from one process's report: the processes that report
        (trainers a script starts itself without torch.distributed, as Hogwild's share one model)
        each count their own, and the lane is their sum. (None, None) if that process's count went
        back. A report without a pid (written by hand, or an older devicerace package) is the
        lane's count as it stands."""
        if pid is None:
            return step, samples
        before = self.process_counts.get(pid)
        if before is not None and (step < before[0] or (samples is not None and before[1] is not None and
                                                        samples < before[1])):
            return None, None
        self.process_counts[pid] = (step, samples)
        if len(self.process_counts) == 1:
            return step, samples
        if self.trainer_processes != len(self.process_counts):
            self.trainer_processes = len(self.process_counts)
            self.session.execution(self.describe())
        counts = self.process_counts.values()
        known = all(n is not None for _, n in counts)
        return sum(s for s, _ in counts), sum(n for _, n in counts) if known else None

    def restart_count(self):
        self.process_counts = {}
        self.step = self.samples = 0
        if self.last is not None:
            self.last = (0, 0, self.last[2])

    def lane_time(self, t):
        """Seconds on the lane clock at the script's time `t` (paused time excluded)."""
        if self.first_time is None:
            return 0.0
        paused = sum(max(0.0, min(e, t) - s) for s, e in self.pauses if s < t)
        return max(0.0, t - self.first_time - paused)

    def lane_samples(self, step, samples):
        """The lane's examples at `step` from what rank 0 counted: steps × batch= where the lane
        names it, and rank 0's examples × the ranks (a DistributedSampler gives each its share)."""
        if self.batch:
            samples = step * self.batch
        if samples is not None and self.ranks * self.launched_ranks > 1:
            samples *= self.ranks * self.launched_ranks
        return samples

    def take_flops(self, flops, t):
        """Rank 0's count of one step's FLOPs (devicerace._torch): the engine learns the precision
        it ran in (to pick the peak "% of peak" divides by), then a running state carries the count,
        as a built-in lane's does; the execution text says where it came from."""
        if isinstance(flops.get("not_counted"), str):
            # Why there is no count: the execution text says it, so "% of peak" reads "–" for a reason.
            self.flops = (None, flops["not_counted"][:200])
            return self.session.execution(self.describe())
        per_sample, precision = self.number(flops, "per_sample"), flops.get("precision")
        if per_sample is None or per_sample <= 0 or precision not in ("fp32", "bf16", "fp16"):
            return self.refuse(f"a FLOP count that is not one: {flops!r:.120}")
        how = flops.get("how") if isinstance(flops.get("how"), str) else "counted by PyTorch's FlopCounterMode over one step"
        self.flops = (per_sample, precision, how[:300])
        self.session.send({"type": "flops", "per_sample": per_sample, "precision": precision})
        s = self.meter.base("state")
        s.update({"state": "running", "message": "", "t": self.lane_time(t), "flops_per_sample": per_sample})
        self.meter.emit(s)
        self.session.execution(self.describe())

    def progress(self, step, samples, t, loss, phases, final=False):
        """A step report (`samples` already the lane's: lane_samples)."""
        self.last_progress = time.monotonic()
        self.reports.append((t, step, samples if samples is not None else self.samples))
        m = self.meter
        if self.first_time is None:
            self.first_time = t
            m.start = t  # the Meter's clock is this machine's monotonic one, as the script's
            m.paused = 0.0
            m.load.read()
            self.meter.step, self.meter.samples = step, samples or 0
            self.energy = Rapl() if self.device == "cpu" else NvmlEnergy(self.gpu_index())
            running = m.base("state")
            running.update({"state": "running", "message": "", "t": 0.0, "energy_source": self.energy.source})
            if m.load.cpus > 0:
                running["machine_cpus"] = m.load.cpus
            m.emit(running)
            self.last = (step, samples, t)
            self.step, self.samples = step, samples or 0
            if loss is not None:
                self.emit_train(step, samples, t, loss, None, warmup=True)
            return
        self.step, self.samples = step, samples if samples is not None else self.samples
        last_step, last_samples, last_t = self.last
        dt = self.lane_time(t) - self.lane_time(last_t)
        steps = step - last_step
        if steps > 0 and self.trainer_processes > 1 and dt < self.config["report_interval"] / 2:
            # Several processes report in turn, each its steps since its own last report (stamped
            # with its own last step's time, which may be before another's last report): an
            # interval closed by another's report just before would read their sum over a moment.
            # Held (the counts are cumulative) until a later report; at the lane's end, the counts
            # stand without an interval.
            if not final:
                self.held_report = (step, samples, t, loss, phases)
                return
            if dt <= 0:
                self.held_report = None
                self.emit_train(step, samples, last_t, loss, None, warmup=last_step < self.meter.warmup)
                self.last = (step, samples, last_t)
                return
        if steps <= 0 or dt <= 0:
            return
        self.held_report = None
        rates = {"steps": steps / dt}
        if samples is not None and last_samples is not None:
            rates["samples"] = (samples - last_samples) / dt
        breakdown = None
        if isinstance(phases, dict):
            breakdown = {k: float(v) / steps for k, v in phases.items()
                         if isinstance(k, str) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0}
            mean = dt / steps
            total = sum(breakdown.values())
            if total > mean:  # the timed phases overlap (asynchronous work): scale them into the step
                breakdown = {k: v * mean / total for k, v in breakdown.items()}
            breakdown["other"] = max(0.0, mean - sum(breakdown.values()))
        self.emit_train(step, samples, t, loss, rates, warmup=last_step < self.meter.warmup, dt=dt,
                        breakdown=breakdown)
        self.last = (step, samples, t)

    def emit_train(self, step, samples, t, loss, rates, warmup, dt=None, breakdown=None):
        m = self.meter
        m.step, m.samples = step, samples or 0
        s = m.base("train")
        s["t"] = self.lane_time(t)
        s["loss"] = loss
        s["warmup"] = warmup
        if rates:
            s["steps_per_sec"] = rates["steps"]
            s["samples_per_sec"] = rates.get("samples")
            s["interval_s"] = dt
            if breakdown:
                s["step_breakdown"] = breakdown
            load = m.load.read()
            if load:
                s["other_cpus"], s["steal"] = load
            joules = self.energy.take() if self.energy else None
            if joules is not None:
                s["energy_joules"] = joules
        elif self.energy:
            self.energy.take()  # the next interval's energy starts here
        m.emit(s)

    def evaluation(self, t, accuracy, loss, seconds, text, restart_interval=True, at=None):
        """An evaluation at `t`, after step `at` ((step, samples); default: the last reported);
        `restart_interval`: the next throughput interval starts after it (a printed figure leaves
        the interval alone: the hooks, where there are, have left the evaluation's time out)."""
        self.last_progress = time.monotonic()
        if self.first_time is None:
            return  # an evaluation before any training step: nothing to place it after
        if accuracy is not None and not 0 <= accuracy <= 1:
            if 1 < accuracy <= 100:
                accuracy /= 100  # a percentage
            else:
                self.refuse(f"an accuracy of {accuracy:g} (expected a fraction)")
                accuracy = None
        # The next throughput interval starts after the evaluation (its energy too).
        if restart_interval:
            self.last = (self.step, self.samples if self.last and self.last[1] is not None else None, t)
            if getattr(self, "energy", None):
                self.energy.take()
        if accuracy is None and loss is None:
            return  # an evaluation the hooks saw (a module's eval() to train()): only its time is left out
        m = self.meter
        s = m.base("eval")
        if at is not None:
            s["step"], s["samples"] = at
        s["t"] = self.lane_time(t)
        s["loss"], s["accuracy"], s["interval_s"] = loss, accuracy, seconds
        if text:
            s["text"] = text
        m.emit(s)

    # Printed figures ----------------------------------------------------------------------------

    def on_printed(self, text, t):
        """A line rank 0 printed (on its reader's thread): its held-out figures, if it names any."""
        reader = threading.get_ident()
        accuracy, loss = figures(text, self.previous_line.get(reader, ""))
        self.previous_line[reader] = text
        if accuracy is not None or loss is not None:
            self.printed.append((t, accuracy, loss))

    def settle_printed(self):
        """Once the command has ended or been stopped: rank 0's output read to its end, and every
        figure it printed taken (none waits out PRINTED_HOLD_S: nothing more will come)."""
        if self.held_report is not None:
            self.progress(*self.held_report, final=True)
        self.proc.read_all(0)
        self.take_printed(math.inf)

    def take_printed(self, before):
        """The printed figures read before `before`, as evaluations at the time each was read;
        none once the script reports its own evaluations, and figures printed again unchanged
        (on stdout and stderr, or a progress bar's postfix) only once."""
        ready = []
        while self.printed and self.printed[0][0] <= before:
            ready.append(self.printed.popleft())
        for t, accuracy, loss in sorted(ready):  # two readers' lines, in the order they were read
            if self.reported_evaluations or (accuracy, loss) in self.last_printed:
                continue
            self.last_printed.append((accuracy, loss))
            # the step last reported before the line was read (a figure is taken a little later)
            at = next(((step, samples) for when, step, samples in reversed(self.reports) if when <= t), None)
            self.evaluation(t, accuracy, loss, None, "", restart_interval=False, at=at)

    # TensorBoard scalars -------------------------------------------------------------------------

    def read_logdir(self):
        for kind, step, wall, value, tag in self.watcher.poll():
            t = wall - self.tb_offset  # the event's wall time on the monotonic clock
            if not math.isfinite(value):
                self.refuse(f"a non-finite {tag} at step {step}")
                continue
            if kind == "loss":
                if step < 1:
                    step = self.step + 1 if self.step else 1
                if step <= self.step and self.first_time is not None:
                    if step < self.step:
                        self.refuse(f"{tag}: step {step} after step {self.step}")
                    continue
                self.source = "tensorboard"
                self.progress(step, self.lane_samples(step, None), t, value, None)
            elif kind in ("eval_acc", "eval_loss"):
                self.evaluation(t, value if kind == "eval_acc" else None, value if kind == "eval_loss" else None,
                                None, "")


class ScriptProgram:
    def hello(self):
        return {"version": f"script lane (Python {sys.version.split()[0]})", "devices": device_report()}

    def configure(self, config, session):
        return ScriptLane(config, session)


def main(argv):
    dw.guard_stdout()
    proto = dw.parse_proto(argv)
    if proto != dw.PROTO_MAJOR:
        return dw.refuse_protocol(proto if proto is not None else "(not a number)", "script lane", NAME)
    return dw.Worker(ScriptProgram(), NAME).run()


if __name__ == "__main__":
    dw.run_main(main, NAME)

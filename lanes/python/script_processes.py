"""What the script lane (script_lane.py) runs its user's command with: the machine as its hello
describes it (no framework imported; GPUs as nvidia-smi lists them), the CPU packages' and the
GPUs' energy counters, and the command's processes: started without a shell, each in a session
of its own, killed with the lane (with whatever they started), their output read on threads of
their own and kept as a tail.
"""
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque

import devicerace_worker as dw

# Seconds between SIGTERM and SIGKILL when the lane stops its command.
TERM_GRACE_S = 5.0
# Lines of each process's output kept for the log and the failure message.
TAIL_LINES = 100  # (a launcher's report of a failed rank, torchrun's, is about 40 lines)
# Output lines per second passed on to the lane's log (the rest are counted, not shown).
LOG_LINES_PER_S = 20

# ---------------------------------------------------------------------------------------------
# The machine (hello): no framework is imported; GPUs as nvidia-smi lists them.
# ---------------------------------------------------------------------------------------------

def gpu_report():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return [], "no NVIDIA driver here (nvidia-smi not found)"
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return [], f"nvidia-smi failed: {e}"
    gpus = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            try:
                memory = int(float(parts[2]) * 1024 * 1024)
            except ValueError:
                memory = 0
            gpus.append({"index": int(parts[0]), "name": parts[1], "total_memory_bytes": memory, "compute": "",
                         "multiprocessors": 0, "utilization_percent": None, "used_memory_bytes": None})
    return gpus, "" if gpus else (out.stderr.strip() or "nvidia-smi lists no GPU")


def device_report():
    cpu = dw.cpu_report()
    cpu.update({"torch_threads": cpu["logical_cpus"], "parallel_backend": "", "blas": "", "blas_is_reference": False})
    gpus, reason = gpu_report()
    return {"cpu": cpu, "gpus": gpus, "cuda_available": bool(gpus), "cuda_unavailable_reason": reason, "torch": "",
            "torch_cuda": "", "cudnn": "", "nvml_driver": "", "host": dw.host_name()}


class Rapl:
    """The CPU packages' energy counters (RAPL, /sys/class/powercap; DEVICERACE_POWERCAP_ROOT in
    tests), read as the engine's devices/energy.cpp reads them: `take()` gives the joules since
    its last call (a counter's wrap included), None where there are none; `source` says which, or
    why not."""

    def __init__(self):
        root = os.environ.get("DEVICERACE_POWERCAP_ROOT") or "/sys/class/powercap"
        self.zones, self.last = [], None
        if not os.path.isdir(root):
            self.source = f"not measurable here: no powercap counters ({root} is absent)"
            return
        unreadable, names = False, []
        for entry in sorted(os.listdir(root)):
            if not entry.startswith("intel-rapl:") or entry.count(":") != 1:
                continue  # top-level zones only: intel-rapl:0:1 are sub-zones
            d = os.path.join(root, entry)
            try:
                with open(os.path.join(d, "name")) as f:
                    name = f.read().strip()
            except OSError:
                continue
            if not name.startswith("package"):
                continue
            if self._read(os.path.join(d, "energy_uj")) is None:
                unreadable = True
                continue
            span = self._read(os.path.join(d, "max_energy_range_uj")) or 0
            self.zones.append((os.path.join(d, "energy_uj"), span / 1e6))
            names.append(name)
        if not self.zones:
            self.source = (f"not measurable here: the RAPL counters under {root} are not readable by this user "
                           "(root only)" if unreadable else f"not measurable here: no RAPL package counters under {root}")
        else:
            self.source = "RAPL " + " + ".join(names)
            self.last = self._joules()

    @staticmethod
    def _read(path):
        try:
            with open(path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def _joules(self):
        values = [self._read(path) for path, _ in self.zones]
        return None if any(v is None for v in values) else [v / 1e6 for v in values]

    def take(self):
        if not self.zones:
            return None
        now, last = self._joules(), self.last
        self.last = now
        if now is None or last is None:
            return None
        total = 0.0
        for (path, span), a, b in zip(self.zones, last, now):
            total += b - a if b >= a else b + span - a  # the counter wrapped
        return total


class NvmlEnergy:
    """GPU `index`'s energy counter through NVML (nvmlDeviceGetTotalEnergyConsumption: millijoules
    since the driver loaded, Volta and later), read as the engine's devices/energy.cpp reads it
    for its own GPU lanes: `take()` gives the joules since its last call, None where there is no
    counter; `source` says "NVML", or why not. DEVICERACE_NVML_LIBRARY names another library
    (tests: a stand-in built from tests/lanes/fake_nvml.c)."""

    def __init__(self, index):
        self.last, self._count = None, None
        name = os.environ.get("DEVICERACE_NVML_LIBRARY") or "libnvidia-ml.so.1"
        unavailable = f"not measurable here: NVML ({os.path.basename(name)}) is not available"
        try:
            lib = ctypes.CDLL(name)
            init, get = lib.nvmlInit_v2, lib.nvmlDeviceGetHandleByIndex_v2
            energy = lib.nvmlDeviceGetTotalEnergyConsumption
        except (OSError, AttributeError):
            self.source = unavailable
            return
        get.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        energy.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulonglong)]
        handle = ctypes.c_void_p()
        if init() != 0 or get(index, ctypes.byref(handle)) != 0:
            self.source = unavailable
            return

        def count():
            mj = ctypes.c_ulonglong()
            return mj.value / 1000.0 if energy(handle, ctypes.byref(mj)) == 0 else None

        self.last = count()
        if self.last is None:
            self.source = f"not measurable here: GPU {index} reports no total energy through NVML"
        else:
            self.source, self._count = "NVML", count

    def take(self):
        if self._count is None:
            return None
        now, last = self._count(), self.last
        self.last = now
        return None if now is None or last is None else max(0.0, now - last)


# ---------------------------------------------------------------------------------------------
# The command's processes.
# ---------------------------------------------------------------------------------------------

class Output:
    """One stream of one process: read on a thread of its own (the command never blocks on a
    full pipe), the last lines kept, a few lines a second passed on to the lane's log."""

    def __init__(self, stream, label, on_line=None):
        self.stream = stream
        self.label = label
        self.on_line = on_line  # on_line(text, monotonic time read), on this reader's thread
        self.tail = deque(maxlen=TAIL_LINES)
        self.lines = 0
        self.thread = threading.Thread(target=self._read, daemon=True, name=f"devicerace-{label}")
        self.thread.start()

    def _read(self):
        second, shown, hidden = int(time.monotonic()), 0, 0
        for raw in iter(lambda: self.stream.readline(65536), b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n").split("\r")[-1]
            self.tail.append(text)
            if self.on_line:
                self.on_line(text, time.monotonic())
            self.lines += 1
            now = int(time.monotonic())
            if now != second:
                if hidden:
                    dw.log(f"[{self.label}] ... {hidden} lines not shown")
                second, shown, hidden = now, 0, 0
            if shown < LOG_LINES_PER_S:
                shown += 1
                dw.log(f"[{self.label}] {text}")
            else:
                hidden += 1
        self.stream.close()


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """In the script lane: the processes the command leaves behind (a launcher's ranks once the
    launcher is gone, a server a script started) become this process's children rather than
    init's, so the lane still finds them (descendants) and ends them with itself."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_CHILD_SUBREAPER, 1)


def _die_with_the_lane():
    """In the command's process, before exec: SIGKILL when the script lane itself dies (a lane
    killed outright must not leave the user's training running). Only a system call here."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A terminal's control sequences (ECMA-48 CSI: colours, bold) and OSC titles.
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?)")


# torchrun's report of a failed rank: its "Root Cause" block's fields, its own log lines
# ("E1207 14:53:50.717000 3956 torch/distributed/elastic/...") and its OMP_NUM_THREADS banner.
_ROOT_CAUSE = "Root Cause (first observed failure):"
_ROOT_FIELD = re.compile(r"^\s*(rank|exitcode|traceback)\s*:\s*(.*)$")
_LAUNCHER_LOG = re.compile(r"^[WEI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")
_LAUNCHER_BANNER = re.compile(r"^\*+$|^Setting OMP_NUM_THREADS environment variable for each process")


def _launcher_failure(lines):
    """torchrun's failure, said as the rank that failed first, how it ended (a signal, an exit
    code) and what the ranks printed before the launcher's report; None without such a report.
    (Its own exception, ChildFailedError, says nothing: its message is the report.)"""
    at = max((i for i, l in enumerate(lines) if l.strip() == _ROOT_CAUSE), default=-1)
    if at < 0:
        return None
    fields = {}
    for l in lines[at + 1:]:
        if l.startswith("="):
            break
        if (m := _ROOT_FIELD.match(l)) is not None:
            fields.setdefault(m.group(1), m.group(2).strip())
    rank = fields.get("rank", "?").split(" ")[0]
    traceback = fields.get("traceback", "")
    how = (f"killed by s{traceback.split(' received by')[0][1:]}" if traceback.startswith("Signal ")
           else f"with exit code {fields.get('exitcode', '?').split(' ')[0]}")
    # The ranks' words: the lines before the launcher's own traceback.
    own = max((i for i, l in enumerate(lines[:at]) if l.startswith("Traceback (most recent call last)")), default=at)
    said = failure_lines([l for l in lines[:own] if not _LAUNCHER_LOG.match(l) and not _LAUNCHER_BANNER.match(l)])
    return f"rank {rank} ended first, {how}" + (f": {said}" if said else "")


def failure_lines(lines):
    """What a failed script's stderr says, in a line: from the last traceback, its exception's
    first line (the type and the message's start: a message of several lines, as torch.load's
    "Weights only load failed", ends in advice) and the frame that raised it; else the last
    non-empty lines. Terminal escapes (colour, bold: torch.load's advice has some) are left out.
    A launcher's report of a failed rank (torchrun's) names that rank and what it printed."""
    lines = [_ESCAPES.sub("", l) for l in lines]
    lines = [l for l in lines if l.strip()]
    if not lines:
        return ""
    if (launcher := _launcher_failure(lines)) is not None:
        return launcher
    last_tb = max((i for i, l in enumerate(lines) if l.startswith("Traceback (most recent call last)")), default=-1)
    if last_tb >= 0:
        block = lines[last_tb + 1:]
        exception = [l for l in block if not l.startswith(" ")]
        frames = [l.strip() for l in block if l.startswith("  File ")]
        where = ""
        if frames:
            m = re.match(r'File "([^"]+)", line (\d+)', frames[-1])
            if m:
                where = f" ({os.path.basename(m.group(1))}, line {m.group(2)})"
        last_frame = max((i for i, l in enumerate(block) if l.startswith("  File ")), default=-1)
        raised = [l for l in block[last_frame + 1:] if not l.startswith(" ")]
        if raised:
            return " ".join(raised[0].split())[:300] + where
        if exception:
            return " ".join(exception[-1].split())[:300] + where
    return " | ".join(" ".join(l.split()) for l in lines[-3:])


def stat_of(pid):
    """(ppid, pgid, CPU ticks of the process and its reaped children) of `pid`, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[2]), sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    except (OSError, ValueError, IndexError):
        return None


def _children(pid):
    """The children of `pid`: its threads' /proc children lists (Linux 3.5+ with
    CONFIG_PROC_CHILDREN), else a scan of /proc."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out, listed = [], False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
            listed = True
        except (OSError, ValueError):
            pass
    if listed:
        return out
    kids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat_of(int(name))
            if st and st[0] == pid:
                kids.append(int(name))
    return kids


def descendants(pids):
    """{pid: (pgid, CPU ticks)} of every live process below `pids` (not `pids` themselves): the
    processes a launcher in the command started (`accelerate launch`, `torchrun`), which may sit
    in sessions of their own (torchrun starts each rank with start_new_session)."""
    out, todo = {}, list(pids)
    while todo:
        for child in _children(todo.pop()):
            st = stat_of(child)
            if st and child not in out:
                out[child] = st[1:]
                todo.append(child)
    return out


class Command:
    """The command's processes (one per rank), each in a session of its own."""

    def __init__(self, argv, cwd, base_env, ranks, rank_env, cpus_of, report_fd, report_path, on_line=None):
        """report_fd: the report pipe's write end, which rank 0 inherits; report_path: a path that
        opens the same pipe while the lane runs (/proc/PID/fd/N of the lane's read end).
        on_line(text, time): each line rank 0 prints, stdout and stderr."""
        self.procs, self.outputs = [], []
        self.started = time.monotonic()
        for rank in range(ranks):
            env = dict(base_env)
            env.update(rank_env(rank))
            if rank == 0:
                # The pipe by number, and by identity and path for the processes a launcher in the
                # command starts without it (devicerace/_channel.py).
                st = os.fstat(report_fd)
                env.update({"DEVICERACE_REPORT_FD": str(report_fd),
                            "DEVICERACE_REPORT_PIPE": f"{st.st_dev}:{st.st_ino}", "DEVICERACE_REPORT_PATH": report_path})
            else:
                for key in ("DEVICERACE_REPORT_FD", "DEVICERACE_REPORT_PIPE", "DEVICERACE_REPORT_PATH"):
                    env.pop(key, None)
            try:
                p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True,
                                     pass_fds=(report_fd,) if rank == 0 else (), preexec_fn=_die_with_the_lane)
            except OSError as e:
                self.kill()
                raise dw.LaneError(f"cannot start {argv[0]}: {e.strerror or e}")
            cpus = cpus_of(rank)
            if cpus:
                try:
                    os.sched_setaffinity(p.pid, cpus)
                except OSError:
                    pass
            label = "rank %d" % rank if ranks > 1 else "script"
            self.procs.append(p)
            watch = on_line if rank == 0 else None
            self.outputs.append((Output(p.stdout, label + " stdout", watch),
                                 Output(p.stderr, label + " stderr", watch)))

    def below(self):
        """{pid: (pgid, ticks)} of the processes below the ranks: the ranks' own, and those left
        to this lane (a subreaper: become_subreaper) by a parent that ended."""
        mine = {p.pid for p in self.procs}
        orphans = [pid for pid in _children(os.getpid()) if pid not in mine]
        out = descendants([p.pid for p in self.procs if p.poll() is None] + orphans)
        for pid in orphans:
            st = stat_of(pid)
            if st:
                out[pid] = st[1:]
        return out

    def signal(self, sig):
        """`sig` to each rank's process group, and to the groups of the processes below them (a
        launcher's ranks in sessions of their own): a pause stops them all, a stop ends them all."""
        groups = dict.fromkeys(p.pid for p in self.procs if p.poll() is None)
        groups.update(dict.fromkeys(pgid for pgid, _ in self.below().values()))
        groups.pop(os.getpgrp(), None)  # never the lane's own group
        for group in groups:
            try:
                os.killpg(group, sig)
            except OSError:
                pass

    def kill(self):
        self.signal(signal.SIGKILL)

    def stop(self):
        """SIGTERM every process group, SIGKILL what is left after TERM_GRACE_S; reaps them. Also
        once the command has ended: nothing it started outlives the lane."""
        if all(p.poll() is not None for p in self.procs) and not self.below():
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        while self._reap_orphans() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill()
        for p in self.procs:
            p.wait()
        while self._reap_orphans():
            time.sleep(0.01)

    def _reap_orphans(self):
        """Reaps the lane's children that are not ranks (left to it as a subreaper); whether any
        is still alive. Never waitpid(-1): that would take a rank's exit status from Popen."""
        mine, alive = {p.pid for p in self.procs}, False
        for pid in _children(os.getpid()):
            if pid in mine:
                continue
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            alive |= done == 0
        return alive

    def ended(self):
        """(rank, returncode) of the first process that failed, or of rank 0 once every
        process has ended; None while they run."""
        codes = [p.poll() for p in self.procs]
        for rank, code in enumerate(codes):
            if code is not None and code != 0:
                return rank, code
        if all(c is not None for c in codes):
            return 0, 0
        return None

    def read_all(self, rank, timeout=2.0):
        """Wait (up to `timeout` seconds) until rank's output has been read to its end."""
        deadline = time.monotonic() + timeout
        for o in self.outputs[rank]:
            o.thread.join(max(0.0, deadline - time.monotonic()))

    def stderr_tail(self, rank):
        out, err = self.outputs[rank]
        err.thread.join(1.0)
        return list(err.tail)

    def output_tail(self, rank):
        out, err = self.outputs[rank]
        out.thread.join(1.0)
        return list(out.tail)

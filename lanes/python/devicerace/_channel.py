"""The report channel from a user's training process to its DeviceRace lane (script_lane.py).

The lane starts the user's command with DEVICERACE_REPORT_FD naming the write end of a pipe it
reads (and the pipe's identity and a path to it, for the processes a launcher starts); each
report is one JSON object per line (at most a few hundred bytes, so one write is atomic), sent
only at report points. The user's stdout and stderr stay the user's own: nothing
here writes to them. Outside a race (no DEVICERACE_REPORT_FD) every call is a cheap no-op.
Standard library only.
"""
import json
import math
import os
import time

# Seconds between step reports (the lane's report interval; DEVICERACE_REPORT_INTERVAL).
_DEFAULT_INTERVAL = 0.1


def _env_float(name, default, low, high):
    try:
        v = float(os.environ.get(name, ""))
        return v if low <= v <= high else default
    except ValueError:
        return default


def _pipe_id(fd):
    """"device:inode" of the open file `fd`, or None when it is not open."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}"


class Channel:
    """The write end of the report pipe, or nothing (outside a race, or another rank's process).

    The command's own process inherits the pipe as DEVICERACE_REPORT_FD. A process its launcher
    started (`accelerate launch`, `torchrun`, `python -m torch.distributed.run`: their
    subprocess.Popen closes inherited descriptors) finds that number closed, or another file in
    its place, so the pipe is known by its identity (DEVICERACE_REPORT_PIPE, "device:inode") and
    reopened through the lane's own descriptor of it (DEVICERACE_REPORT_PATH, /proc/PID/fd/N).
    Of a launcher's ranks, only RANK 0 reports (and of ranks a script spawns itself, rank 0 of
    torch.distributed: the lane's first report checks it)."""

    def __init__(self):
        self.fd = None
        self.broken = False
        self.reopened = False
        env = os.environ
        want = env.get("DEVICERACE_REPORT_PIPE", "")
        fd = env.get("DEVICERACE_REPORT_FD", "")
        if env.get("RANK", "0") not in ("", "0"):
            pass  # another rank: rank 0 reports for the lane
        elif fd.isdigit() and _pipe_id(int(fd)) is not None and (not want or _pipe_id(int(fd)) == want):
            self.fd = int(fd)
        elif want and env.get("DEVICERACE_REPORT_PATH"):
            try:
                opened = os.open(env["DEVICERACE_REPORT_PATH"], os.O_WRONLY | os.O_CLOEXEC)
            except OSError:
                opened = None
            if opened is not None and _pipe_id(opened) == want:
                self.fd, self.reopened = opened, True
            elif opened is not None:
                os.close(opened)
        self.interval = _env_float("DEVICERACE_REPORT_INTERVAL", _DEFAULT_INTERVAL, 0.01, 60.0)

    def close(self):
        """Report no more (another rank's process, found once it runs)."""
        if self.fd is not None and not self.broken:
            self.broken = True
            if self.reopened:
                os.close(self.fd)

    @property
    def active(self):
        return self.fd is not None and not self.broken

    def send(self, message):
        if not self.active:
            return False
        data = (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()
        try:
            os.write(self.fd, data)
            return True
        except OSError:  # the lane is gone (EPIPE): stop reporting, keep training
            self.broken = True
            return False


def to_float(value):
    """A loss or accuracy as a finite float (a tensor or array is read here: a report point), or
    None when there is none or it is not finite."""
    if value is None:
        return None
    try:
        if hasattr(value, "item") and not isinstance(value, (int, float)):
            value = value.item()
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return v if math.isfinite(v) else None


def now():
    """The lane's clock: CLOCK_MONOTONIC, the same in every process of the machine."""
    return time.monotonic()

"""Report a training script's progress to its DeviceRace lane (README, "Race your own training").

    import devicerace
    lane = devicerace.lane()                  # this process's lane
    device = lane.device                      # "cpu" or "cuda:0": where the lane trains
    ...
    lane.step(samples=len(x), loss=loss)      # after each optimizer step
    lane.evaluate(accuracy=acc, loss=val_loss)  # after an evaluation
    lane.flops(per_sample=3.2e6)              # optional: a step's FLOPs a sample, for % of peak

Values may be Python numbers, PyTorch tensors, NumPy or JAX arrays: they are kept as they are
and read (synchronising the device) only at report points, about ten times a second. Outside a
race, and in every rank but rank 0 of a data-parallel lane, each call is a cheap no-op, so the
same script runs anywhere. Ready-made callbacks: devicerace.keras.Callback (Keras 3, any
backend), devicerace.transformers.Callback (Hugging Face Trainer), devicerace.lightning.Callback
(Lightning Trainer); devicerace.jax.count_flops counts a JAX step's FLOPs for lane.flops.
Standard library only; no framework is imported here.
"""
import atexit
import os
import sys

from devicerace._channel import Channel, now, to_float

__all__ = ["lane", "Lane"]
__version__ = "0.2.0"


class Lane:
    """This process's lane. Get it with devicerace.lane(); one per process, training thread only."""

    def __init__(self, channel=None):
        self._channel = channel or Channel()
        env = os.environ
        self.name = env.get("DEVICERACE_LANE", "")
        self.in_race = self._channel.active
        self.rank = _env_int("RANK", 0)
        self.world_size = _env_int("WORLD_SIZE", 1)
        self.threads = _env_int("DEVICERACE_THREADS", 0) or None
        self.logdir = env.get("DEVICERACE_LOGDIR") or None
        self._device = env.get("DEVICERACE_DEVICE") or None
        self._source = None  # "api" once the script or a callback reports; "torch": the hooks
        self._step = 0
        self._samples = 0
        self._samples_known = True
        self._losses = []  # since the last report, as given (tensors stay on their device)
        self._last_step_time = None
        self._next_report = 0.0
        self._phases = {}
        self._hello_sent = False
        # The instrumentation's losses (devicerace._torch): a callable giving the backward()
        # losses since its last call as (sum, count), for a script or callback that reports its
        # steps without a loss (the Hugging Face callback).
        self._hook_losses = None
        # The instrumentation's count of one step's FLOPs ({"per_sample", "precision"}), sent once.
        self._flops = None
        self._reported_step = 0
        # How the instrumentation counts steps where not by optimizer steps ("zero_grad": a script
        # that updates its weights by hand), said with each step report.
        self._steps_by = None
        # What runs when this process ends normally, before the last report: the instrumentation's
        # (a step by hand not yet counted), then the steps since the last report point.
        self._at_exit = []
        self._exit_pid = None  # the process whose end is watched (a forked trainer is another)
        if self.in_race:
            atexit.register(self._exit)

    @property
    def device(self):
        """Where this lane trains: DEVICERACE_DEVICE in a race ("cpu", "cuda:0"); outside one,
        "cuda:0" when PyTorch is loaded and sees a GPU, else "cpu"."""
        if self._device:
            return self._device
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_available():
                return "cuda:0"
        except Exception:
            pass
        return "cpu"

    # What scripts call ------------------------------------------------------------------------

    def step(self, samples=None, loss=None, steps=1):
        """`steps` optimizer steps (default 1) of `samples` examples finished, with their training
        loss (a number or a tensor; read at report points only)."""
        self._take_over("api")
        self._count(samples, loss, steps)

    def evaluate(self, accuracy=None, loss=None, seconds=None, text=None):
        """An evaluation just ended: its accuracy (a fraction), loss and, where known, how long it
        took (seconds). Evaluations are on the lane's clock but outside its throughput."""
        self._take_over("api")
        self._evaluation(accuracy, loss, seconds, text)

    def flops(self, per_sample, precision="fp32", how="as the script counts them"):
        """One training step's FLOPs a sample (forward and backward; a multiply-add is 2, as
        DeviceRace counts its own networks), in `precision` ("fp32", "bf16" or "fp16": the peak
        "% of peak" divides by), for the lane's achieved FLOP/s and % of peak; `how` is said in
        its execution text. The lane takes the first count it is given."""
        if not self.in_race:
            return
        try:
            n = float(per_sample)
        except (TypeError, ValueError):
            n = float("nan")
        if not n > 0 or n == float("inf") or precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"devicerace: lane.flops(per_sample={per_sample!r:.40}, precision={precision!r:.20}): "
                             "a positive number of FLOPs, in fp32, bf16 or fp16")
        self._flops = {"per_sample": n, "precision": precision, "how": str(how)[:300]}

    def _count_step(self, counter, step, args, kwargs, samples):
        """A framework counter's count of one step (devicerace.jax, devicerace.tensorflow), given
        to the lane, or why there is none (its execution text says it); None outside a race."""
        if not self.in_race:
            return None
        counted = counter(step, args, kwargs, samples)
        if "per_sample" in counted:
            self.flops(counted["per_sample"], counted["precision"], counted["how"])
        else:
            self._flops = counted
        return counted

    # The accounting shared with the automatic instrumentation (devicerace._torch) -------------

    def _take_over(self, source):
        if self._source == source or not self.in_race:
            return
        if self._source is not None and source == "api":
            # The script reports itself: what the hooks counted is dropped, its own count rules.
            self._step = self._samples = 0
            self._losses = []
            self._samples_known = True
            self._phases = {}
            self._next_report = 0.0
        self._source = source

    def _count(self, samples, loss, steps):
        if not self.in_race:
            return
        t = now()
        if self._exit_pid != os.getpid():
            self._watch_exit()
        self._step += steps
        if samples is None:
            self._samples_known = False
        else:
            try:
                self._samples += int(samples)
            except (TypeError, ValueError):
                self._samples_known = False
        if isinstance(loss, list):
            self._losses.extend(loss)  # the instrumentation's backward() losses of this step
        elif loss is not None:
            self._losses.append(loss.detach() if hasattr(loss, "detach") else loss)
        self._last_step_time = t
        if t >= self._next_report:
            self._report(t)

    def _add_phase(self, phase, seconds):
        self._phases[phase] = self._phases.get(phase, 0.0) + seconds

    def _report(self, t=None):
        if self._last_step_time is None:
            return
        t = t if t is not None else now()
        if not self._hello_sent:
            self._hello_sent = True
            rank, world = self._process_group()
            if rank != 0:
                # A rank the script started itself (torch.multiprocessing.spawn, without RANK set):
                # rank 0 reports for the lane.
                self.in_race = False
                self._channel.close()
                return
            hello = {"t": "hello", "pid": os.getpid(), "source": self._source}
            if world > 1:  # the lane counts rank 0's samples × the ranks (unless it started them)
                hello["world"] = world
            self._channel.send(hello)
        hooked = self._hook_losses() if self._hook_losses is not None else None
        if not self._losses and hooked:
            self._losses = hooked
        loss = mean_loss(self._losses)
        message = {"t": "step", "source": self._source, "pid": os.getpid(), "step": self._step,
                   "samples": self._samples if self._samples_known else None,
                   "loss": loss, "loss_reported": bool(self._losses), "time": self._last_step_time}
        if self._steps_by:
            message["steps_by"] = self._steps_by
        if self._phases:
            message["phases"] = self._phases
            self._phases = {}
        if self._flops is not None:
            message["flops"], self._flops = self._flops, None
        memory = self._peak_memory()
        if memory is not None:
            message["memory"] = memory
        self._losses = []
        self._reported_step = self._step
        self._channel.send(message)
        self._next_report = t + self._channel.interval

    def _hint(self, text):
        """Tells the lane what the instrumentation saw of a script that reports no step yet (said
        if the lane fails for want of one). Rank 0's only."""
        if not self.in_race or self._process_group()[0] != 0:
            return
        self._channel.send({"t": "hint", "text": str(text)[:400]})

    def _process_group(self):
        """(rank, world size) of this process: torch.distributed's once it is initialized (a
        script that spawns its ranks itself sets no RANK), else torchrun's variables."""
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                return dist.get_rank(), dist.get_world_size()
        except Exception:  # noqa: BLE001 - the variables then
            pass
        return self.rank, self.world_size

    def _peak_memory(self):
        """On a GPU lane whose script has started CUDA in PyTorch: the most memory its tensors
        have held on the lane's GPUs at once (PyTorch's caching allocator, as DeviceRace's own GPU
        lanes count it), in bytes. None on a CPU lane, before CUDA starts, or without PyTorch: a
        report never starts CUDA itself."""
        if not (self._device or "").startswith("cuda"):
            return None
        torch = sys.modules.get("torch")
        try:
            if torch is None or not torch.cuda.is_initialized():
                return None
            return max(int(torch.cuda.max_memory_allocated(i)) for i in range(torch.cuda.device_count()))
        except Exception:  # noqa: BLE001 - a figure the report can go without
            return None

    def _exit(self):
        if self._exit_pid not in (None, os.getpid()):
            return  # a forked trainer's copy of its parent's registration (never its own count)
        for hook in reversed(self._at_exit):
            hook()
        self._flush()
        self._at_exit = []

    def _watch_exit(self):
        """A trainer process a script started itself with multiprocessing (Hogwild's) ends through
        os._exit, which skips atexit: its last steps are reported by multiprocessing's own
        finalizers, which its processes run at their end."""
        self._exit_pid = os.getpid()
        mp = sys.modules.get("multiprocessing")
        try:
            if mp is not None and mp.parent_process() is not None:
                import multiprocessing.util
                multiprocessing.util.Finalize(None, self._exit, exitpriority=0)
        except Exception:  # noqa: BLE001 - the last interval is then lost, the rest stands
            pass

    def _flush(self):
        if self._step > self._reported_step:
            self._report()

    def _evaluation(self, accuracy, loss, seconds, text=None, started=None):
        if not self.in_race:
            return
        t = now()
        if self._step > self._reported_step:
            self._report(t)  # closes the throughput interval at the last step, before the evaluation
        message = {"t": "eval", "source": self._source, "step": self._step, "time": t,
                   "accuracy": to_float(accuracy), "loss": to_float(loss)}
        if seconds is None and started is not None:
            seconds = t - started
        if seconds is not None:
            message["seconds"] = to_float(seconds)
        if text:
            message["text"] = str(text)[:2000]
        self._channel.send(message)


def mean_loss(losses):
    """The mean of a report interval's losses, read here (one device synchronisation): PyTorch
    tensors stacked and read at once, anything else one by one. None if none is finite."""
    if not losses:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and all(isinstance(l, torch.Tensor) for l in losses):
        try:
            return to_float(torch.stack([l.reshape(()) for l in losses]).float().mean())
        except (RuntimeError, ValueError):
            pass  # tensors on several devices: one by one
    values = [to_float(l) for l in losses]
    if any(v is None for v in values):
        return None  # a non-finite loss in the interval: refused, not averaged away
    return sum(values) / len(values)


def _env_int(name, default):
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default


_lane = None


def lane():
    """This process's lane (made on first use)."""
    global _lane
    if _lane is None:
        _lane = Lane()
    return _lane

#!/usr/bin/env python3
"""DeviceRace's PyTorch lane: one lane trained by plain PyTorch, driven over the worker protocol.

DeviceRace starts it for a lane with framework=pytorch as
    python lanes/python/pytorch_lane.py --proto 1
and speaks the worker protocol (docs/EVENTS.md) with it on stdin/stdout (devicerace_worker.py).

What it trains is bench/peers/peer.py's PyTorch peer of the workload, imported from there (the
same networks, initialisers, optimizers, schedules, data preparation and per-step work that
bench/compare measures against the C++ lanes), run the way the engine's trainer runs a lane:
per-step losses and correct counts go into device buffers that are read at report points only
(the warm-up step, every report_interval seconds, each epoch end, before each evaluation, the
last step); evaluations (eval mode, no gradients, the whole test set) at each epoch end, every
eval_every steps and at the last step, on the lane clock but outside throughput intervals.

peer.py is looked for in $DEVICERACE_PEERS, next to this file (an installed copy) and in
../../bench/peers (the source tree).
"""
import importlib.metadata
import math
import os
import sys
import time
from contextlib import nullcontext

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import devicerace_worker as dw  # noqa: E402  (must come before torch: it guards stdout)

NAME = "pytorch_lane"
# Lane keys this lane acts on, and the engine keys it accepts without acting on them (DeviceRace's
# own fast paths, costs and process placement; cli/cmd never travel but are harmless).
ACCEPTED = ("name", "threads", "batch", "lr", "precision", "channels_last", "wd", "momentum", "schedule", "lstm",
            "data", "eval_batch", "fault")
IGNORED = ("framework", "fused", "graph", "resident", "cost", "isolate", "cli", "cmd")
# resolveData's synthetic test-set sizes (the training sizes are peer.SYNTHETIC_TRAIN).
SYNTHETIC_TEST = {"cifar10": 10000, "fashion-mnist": 10000, "imagenet": 50000, "imdb": 25000, "text": 3000}

torch = F = peer = None  # imported by load_framework(), after the protocol stream is guarded


def find_peer_dir():
    candidates = [os.environ.get("DEVICERACE_PEERS", ""), HERE, os.path.join(HERE, "..", "..", "bench", "peers")]
    for folder in candidates:
        if folder and os.path.isfile(os.path.join(folder, "peer.py")):
            return os.path.abspath(folder)
    return None


def load_framework():
    global torch, F, peer
    # Spin-waiting OpenMP threads collapse throughput when lanes share cores; libgomp reads this
    # once, when torch loads it (the C++ worker sets the same default).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch as torch_module
    import torch.nn.functional as functional
    folder = find_peer_dir()
    if folder is None:
        raise ImportError("bench/peers/peer.py not found (looked in $DEVICERACE_PEERS, next to pytorch_lane.py "
                          "and in ../../bench/peers)")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import peer as peer_module
    torch, F, peer = torch_module, functional, peer_module


def torch_version_quick():
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# ---------------------------------------------------------------------------------------------
# The machine (hello).
# ---------------------------------------------------------------------------------------------

def device_report():
    cpu = dw.cpu_report()
    cpu["torch_threads"] = torch.get_num_threads()
    info = torch.__config__.parallel_info()
    backend = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                    if line.startswith("ATen parallel backend")), "")
    cpu["parallel_backend"] = backend
    cpu["blas"] = "MKL (bundled with PyTorch)" if torch.backends.mkl.is_available() else ""
    cpu["blas_is_reference"] = False
    gpus, reason = [], ""
    available = False
    try:
        available = torch.cuda.is_available()
        if available:
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                gpus.append({"index": i, "name": p.name, "total_memory_bytes": int(p.total_memory),
                             "compute": f"{p.major}.{p.minor}", "multiprocessors": int(p.multi_processor_count),
                             "utilization_percent": None, "used_memory_bytes": None})
        elif torch.version.cuda is None:
            reason = "this PyTorch is built without CUDA"
        else:
            try:
                torch.cuda.init()
                reason = "no CUDA device found"
            except Exception as e:  # the driver's or runtime's own words
                reason = " ".join(str(e).split()) or type(e).__name__
    except Exception as e:
        available, gpus, reason = False, [], f"CUDA could not be queried: {type(e).__name__}: {e}"
    cudnn = ""
    try:
        if torch.backends.cudnn.is_available():
            cudnn = str(torch.backends.cudnn.version())
    except Exception:
        pass
    return {"cpu": cpu, "gpus": gpus, "cuda_available": bool(available and gpus), "cuda_unavailable_reason": reason,
            "torch": torch.__version__.split("+")[0], "torch_cuda": torch.version.cuda or "", "cudnn": cudnn,
            "nvml_driver": "", "host": dw.host_name()}


# ---------------------------------------------------------------------------------------------
# Data (engine race.cpp resolveData, dataset.cpp, lane_data.cpp; the peer's readers).
# ---------------------------------------------------------------------------------------------

def resolve_data(name, w, mode, data_dir, train_limit, test_limit):
    """What the lane trains on, decided as the engine decides it: a dict with the ready
    message's dataset fields plus "fashion" (the IDX folder) or "synthetic" (train, test counts)."""
    shape = "x".join(str(d) for d in w["shape"])

    def limited(train, test):
        return (min(train_limit, train) if train_limit else train, min(test_limit, test) if test_limit else test)

    def synthetic(train, test, note):
        tr, te = limited(train, test)
        return {"name": f"synthetic ({shape})", "source": "synthetic", "synthetic": True, "train": tr, "test": te,
                "note": note, "counts": (tr, te)}

    want_synthetic, explicit_real = mode == "synthetic", mode == "real"
    ds = w["dataset"]
    if ds == "imagenet":
        if want_synthetic or (not explicit_real and not data_dir):
            return synthetic(peer.SYNTHETIC_TRAIN[ds], SYNTHETIC_TEST[ds],
                             "" if mode else "no ImageNet here: racing on synthetic data (tf_cnn_benchmarks style)")
    elif ds == "imdb":
        if want_synthetic or (not explicit_real and not data_dir):
            return synthetic(peer.SYNTHETIC_TRAIN[ds], SYNTHETIC_TEST[ds],
                             "" if mode else "no IMDb reviews given (--data-dir aclImdb): racing on synthetic tokens")
        raise dw.LaneRefused(f"{name}: the PyTorch lane has no IMDb reader; race it on synthetic tokens "
                             "(--data synthetic or data=synthetic) or on a DeviceRace lane")
    elif ds == "text":
        if want_synthetic:
            return synthetic(peer.SYNTHETIC_TRAIN[ds], SYNTHETIC_TEST[ds], "")
        raise dw.LaneRefused(f"{name}: the PyTorch lane has no text-corpus reader; race it on synthetic text "
                             "(--data synthetic or data=synthetic) or on a DeviceRace lane")
    elif want_synthetic:
        return synthetic(peer.SYNTHETIC_TRAIN[ds], SYNTHETIC_TEST[ds], "")
    if ds == "cifar10" and data_dir:
        raise dw.LaneRefused(f"{name}: the PyTorch lane cannot read CIFAR-10 binaries ({data_dir}); without "
                             "--data-dir it races on Fashion-MNIST adapted to 3x32x32, or use --data synthetic")
    folder = data_dir if (data_dir and ds == "fashion-mnist") else peer.fashion_dir()
    if not os.path.isdir(folder):
        raise dw.LaneRefused(f"{folder}: not a folder; expected the Fashion-MNIST IDX files (install "
                             "dataset-fashion-mnist, pass --data-dir, or use --data synthetic)")
    out = {"name": "Fashion-MNIST", "source": folder, "synthetic": False, "note": "", "fashion": folder}
    if ds != "fashion-mnist":
        out["name"] = f"Fashion-MNIST (adapted to {shape})"
        out["note"] = (f"{name} races on real Fashion-MNIST, padded/resized and channel-expanded to {shape}"
                       + (" (pass --data-dir with CIFAR-10 binaries to use CIFAR-10)" if ds == "cifar10" else ""))
    return out


def load_fashion_split(folder, prefix, limit, classes):
    """(images (N,1,28,28) uint8, labels int64), the first `limit` examples (dataset.cpp loadSplit)."""
    x = peer.read_idx(folder, f"{prefix}-images-idx3-ubyte")
    y = peer.read_idx(folder, f"{prefix}-labels-idx1-ubyte")
    if x.dim() != 3 or y.dim() != 1 or x.size(0) != y.size(0):
        raise dw.LaneRefused(f"{folder}: {prefix} images {tuple(x.shape)} and labels {tuple(y.shape)} do not match")
    if x.size(1) != 28 or x.size(2) != 28:
        raise dw.LaneRefused(f"{folder}: {prefix} images are {x.size(1)}x{x.size(2)}, expected 28x28 (Fashion-MNIST)")
    if y.numel() and int(y.max()) >= classes:
        raise dw.LaneRefused(f"{folder}: {prefix} labels go up to {int(y.max())}, expected 0 to {classes - 1}")
    n = min(limit, x.size(0)) if limit else x.size(0)
    return x[:n].unsqueeze(1).clone(), y[:n].to(torch.int64)


# ---------------------------------------------------------------------------------------------
# The lane.
# ---------------------------------------------------------------------------------------------

def parse_fault(text):
    if not text:
        return None, 0
    kind, _, step = text.partition(":")
    return kind, int(step) if step else 1


def inject_fault(kind, step):
    """fault=KIND[:STEP], as engine/src/train/fault.cpp (tests of how a parent copes)."""
    if kind == "throw":
        raise dw.LaneError(f"injected fault at step {step}")
    dw.log(f"{NAME}: injecting fault '{kind}' at step {step}")
    if kind == "abort":
        os.abort()
    if kind == "segv":
        import signal
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "exit":
        os._exit(42)
    while kind == "hang":
        time.sleep(1)


class TorchLane:
    def __init__(self, config, session):
        c = dw.parse_config(config)
        workload = c["workload"]
        if workload not in peer.WORKLOADS:
            raise dw.LaneRefused(f"unknown workload '{workload}' for the PyTorch lane (it runs "
                                 f"{', '.join(sorted(peer.WORKLOADS))})")
        w = dict(peer.WORKLOADS[workload], name=workload)
        spec = dw.parse_lane_spec(c["lane"], ACCEPTED, IGNORED, "the PyTorch lane")
        self.c, self.w, self.spec = c, w, spec
        self.name = spec.get("name") or spec["device"]

        # Device, threads, precision, lane keys (thread_lane.cpp's checks).
        device = torch.device("cuda", 0) if spec["device"] == "cuda" else torch.device(spec["device"])
        self.cuda = device.type == "cuda"
        if self.cuda:
            if not torch.cuda.is_available():
                raise dw.LaneRefused(f"lane {self.name}: CUDA is not available to this PyTorch "
                                     f"({device_report()['cuda_unavailable_reason'] or 'no device'})")
            if device.index >= torch.cuda.device_count():
                raise dw.LaneRefused(f"lane {self.name}: {device} does not exist (this machine has "
                                     f"{torch.cuda.device_count()} CUDA device(s))")
        self.device = device
        cpu = dw.cpu_report()
        threads = spec.get("threads")
        if threads and threads > cpu["logical_cpus"] * dw.MAX_THREADS_PER_CPU:
            raise dw.LaneRefused(f"lane {self.name}: threads={threads} is far more than the {cpu['logical_cpus']} "
                                 f"CPUs present (at most {cpu['logical_cpus'] * dw.MAX_THREADS_PER_CPU})")
        self.threads = threads or (1 if self.cuda else cpu["physical_cores"])
        self.precision = spec.get("precision", "fp32")
        if self.precision == "fp16" and not self.cuda:
            raise dw.LaneRefused(f"lane {self.name}: precision=fp16 needs a CUDA device; use bf16 on the CPU")
        if "lstm" in spec and not w["lstm"]:
            raise dw.LaneRefused(f"lane {self.name}: lstm={spec['lstm']} applies to the LSTM workloads "
                                 f"(imdb-bilstm, charlstm), not {workload}")
        self.channels_last = bool(spec.get("channels_last", False))
        if self.channels_last and w["tokens"]:
            raise dw.LaneRefused(f"lane {self.name}: channels_last applies to image workloads, not {workload}")
        self.lstm = spec.get("lstm", "fused")
        self.lr = spec.get("lr", w["lr"])
        self.wd = spec.get("wd", w["wd"])
        self.momentum = spec.get("momentum", w["momentum"])
        self.schedule = spec.get("schedule", w["schedule"])
        self.fault = parse_fault(spec.get("fault"))

        # The network first: a model that differs from the engine's is refused before any data loads.
        torch.set_num_threads(self.threads)
        torch.manual_seed(c["seed"])
        if self.cuda:
            torch.cuda.set_device(device)
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        model = peer.build_model(workload, fused=self.lstm == "fused")
        count = peer.count_parameters(model)
        expected = c["expected_parameters"]
        if expected is not None and count != expected:
            raise dw.LaneRefused(f"{workload}: the PyTorch model has {count:,} parameters but DeviceRace's has "
                                 f"{expected:,}: not the same network, so the race would not be fair")
        self.parameters = count

        # Data.
        mode = spec.get("data") or c["data"]
        d = resolve_data(workload, w, mode, c["data_dir"], c["train_limit"], c["test_limit"])
        requested_batch = spec.get("batch", w["batch"])
        if d["synthetic"]:
            train_count, test_count = d["counts"]
            if requested_batch > train_count:
                raise dw.LaneRefused(f"lane {self.name}: batch={requested_batch} is larger than the {train_count} "
                                     "training examples")
        model = model.to(device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        if d["synthetic"]:
            self.train_x, self.train_y = peer.synthetic_split(w, train_count, requested_batch, device)
            self.test_x, self.test_y = peer.synthetic_split(w, test_count, requested_batch, device)
        else:
            tx, ty = load_fashion_split(d["fashion"], "train", c["train_limit"], w["classes"])
            ex, ey = load_fashion_split(d["fashion"], "t10k", c["test_limit"], w["classes"])
            train_count, test_count = tx.size(0), ex.size(0)
            if requested_batch > train_count:
                raise dw.LaneRefused(f"lane {self.name}: batch={requested_batch} is larger than the {train_count} "
                                     "training examples")
            self.train_x, self.train_y = tx.to(device), ty.to(device)
            self.test_x, self.test_y = ex.to(device), ey.to(device)
        self.train_count, self.test_count = train_count, test_count
        self.batch = requested_batch
        self.dataset = {k: d[k] for k in ("name", "source", "synthetic", "note")}
        self.dataset.update(train=train_count, test=test_count)

        # Run length, evaluation batches.
        self.steps_per_epoch = (train_count + self.batch - 1) // self.batch
        self.total_steps = c["steps"] or self.steps_per_epoch * (c["epochs"] or w["epochs"])
        self.eval_batch = spec.get("eval_batch") or max(self.batch, min(1000, 3072000 // math.prod(w["shape"])))

        # Optimizer, precision.
        self.opt = peer.make_optimizer(w["optimizer"], self.model.parameters(), self.lr, self.wd, self.momentum)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        self.autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else nullcontext
        self.loss_of, self.correct_of = peer.loss_functions(w)
        self.loss_buf = torch.zeros(peer.STEP_BUFFER, device=device, dtype=torch.float32)
        self.correct_buf = torch.zeros(peer.STEP_BUFFER, device=device, dtype=torch.int64)
        self.in_buf = 0
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)

        self.meter = dw.Meter(session.emit, self.name, self.steps_per_epoch, c["warmup"], self.memory)
        # The CPU threads it trains with; a CUDA lane names them only when asked (as the C++ worker).
        self.ready = {"batch": self.batch, "total_steps": self.total_steps,
                      "threads": self.threads if (not self.cuda or threads) else None, "dataset": self.dataset}

    def memory(self):
        return int(torch.cuda.max_memory_allocated(self.device)) if self.cuda else None

    def describe(self):
        kind = {"rmsprop": "RMSprop", "adam": "Adam", "sgd": "SGD", "sgd-nesterov": "Nesterov SGD"}[self.w["optimizer"]]
        text = (f"PyTorch {torch.__version__} eager, torch.optim {kind} "
                f"({'foreach' if self.cuda else 'for-loop'}, PyTorch's default), ")
        text += {"fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast + GradScaler"}[self.precision]
        if self.channels_last:
            text += ", channels_last"
        if self.w["lstm"]:
            text += ", nn.LSTM" if self.lstm == "fused" else ", LSTMCell loop"
        return text

    # Report points and evaluations ------------------------------------------------------

    def report(self):
        if self.in_buf == 0:
            return None
        if self.cuda:
            torch.cuda.synchronize(self.device)
        losses = self.loss_buf[:self.in_buf].tolist()
        correct = int(self.correct_buf[:self.in_buf].sum().item())
        self.in_buf = 0
        return self.meter.report(losses, correct)

    def evaluate(self):
        meter = self.meter
        meter.state("evaluating")
        start = time.perf_counter()
        want = self.w["shape"]
        n = self.test_x.size(0)
        self.model.eval()
        with torch.no_grad():
            loss_sum = torch.zeros((), device=self.device)
            correct = torch.zeros((), device=self.device, dtype=torch.int64)
            for i in range(0, n, self.eval_batch):
                x = peer.prepare_input(self.test_x[i:i + self.eval_batch], want, self.channels_last)
                y = self.test_y[i:i + self.eval_batch]
                with self.autocast():
                    logits = self.model(x).to(torch.float32)
                    loss_sum += self.loss_of(logits, y, reduction="sum")
                correct += self.correct_of(logits, y)
        self.model.train()
        loss = loss_sum.item() / n
        accuracy = correct.item() / n
        meter.evaluation(loss, accuracy, time.perf_counter() - start)
        meter.state("running")

    # The loop (engine trainer.cpp Trainer::loop) --------------------------------------------

    def run(self, session):
        meter, c = self.meter, self.c
        meter.state("preparing")
        torch.set_num_threads(self.threads)
        n, pool, b = self.train_count, self.train_x.size(0), self.batch
        total, warmup = self.total_steps, c["warmup"]
        scheduled = self.schedule != "constant"
        want = self.w["shape"]
        order = torch.Generator().manual_seed(c["seed"])  # epoch orders: a host generator, as the engine
        fault_kind, fault_step = self.fault
        self.model.train()
        meter.begin()
        meter.state("running")
        session.execution(self.describe())
        last_eval = -1
        perm, pos = None, n
        while meter.step < total:
            if session.stop_requested:
                return self.report() or ("stopped", f"stopped at step {meter.step}")
            if session.pause_requested:
                diverged = self.report()
                if diverged:
                    return diverged
                meter.state("paused")
                meter.paused_for(session.wait_while_paused())
                meter.state("running")
                continue
            if pos >= n:
                perm, pos = torch.randperm(n, generator=order).to(self.device), 0
            step = meter.step
            if c["fail_at_step"] > 0 and step + 1 == c["fail_at_step"]:
                raise dw.LaneError(f"injected fault at step {step + 1}")
            if fault_kind and step + 1 == fault_step:
                inject_fault(fault_kind, fault_step)
            take = min(b, n - pos)
            idx = perm[pos:pos + take]
            if pool < n:
                idx = idx.remainder(pool)
            if scheduled:
                lr = self.lr * peer.schedule_factor(self.schedule, step, total)
                for group in self.opt.param_groups:
                    group["lr"] = lr
            x = peer.prepare_input(self.train_x.index_select(0, idx), want, self.channels_last)
            loss, correct = peer.train_step_once(self.model, self.opt, self.scaler, self.autocast, self.loss_of,
                                                 self.correct_of, x, self.train_y.index_select(0, idx))
            self.loss_buf[self.in_buf].copy_(loss)
            self.correct_buf[self.in_buf].copy_(correct)
            self.in_buf += 1
            pos += take
            meter.advance(take)

            step = meter.step
            epoch_end = pos >= n
            last = step == total
            eval_due = epoch_end or (c["eval_every"] > 0 and step % c["eval_every"] == 0)
            if (self.in_buf == peer.STEP_BUFFER or step == warmup or eval_due or last
                    or meter.interval_elapsed() >= c["report_interval"]):
                diverged = self.report()
                if diverged:
                    return diverged
            if eval_due or (last and last_eval != step):
                self.evaluate()
                last_eval = step
        return "finished", ""


class TorchProgram:
    def hello(self):
        return {"version": f"pytorch {torch.__version__}", "devices": device_report()}

    def configure(self, config, session):
        return TorchLane(config, session)


def main(argv):
    dw.guard_stdout()
    proto = dw.parse_proto(argv)
    if proto != dw.PROTO_MAJOR:
        return dw.refuse_protocol(proto if proto is not None else "(not a number)", f"pytorch {torch_version_quick()}",
                                  NAME)
    try:
        load_framework()
    except Exception as e:
        dw.log(f"{NAME}: cannot load PyTorch and the peer models: {type(e).__name__}: {e}")
        return dw.EXIT_FAILED
    return dw.Worker(TorchProgram(), NAME).run()


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except BaseException as e:  # anything unforeseen: a message for the log, never status 120/255
        dw.log(f"{NAME}: {type(e).__name__}: {e}")
        code = dw.EXIT_FAILED
    dw.finish(code)

#!/usr/bin/env python3
"""DeviceRace's PyTorch lane: one lane trained by plain PyTorch, driven over the worker protocol.

DeviceRace starts it for a lane with framework=pytorch as
    python lanes/python/pytorch_lane.py --proto 1
and speaks the worker protocol (docs/EVENTS.md) with it on stdin/stdout (devicerace_worker.py).

What it trains is the workload's network from torch_networks.py, next to this file (the same
networks, initialisers, optimizers, data preparation and per-step work that bench/compare's
PyTorch peers import to measure the C++ lanes against; the workload defaults and schedules are
in workload_table.py), run the way the engine's trainer runs a lane: per-step losses and correct
counts go into device buffers that are read at report points only (the warm-up step, every
report_interval seconds, each epoch end, before each evaluation, the last step); evaluations
(eval mode, no gradients, the whole test set) at each epoch end, every eval_every steps and at
the last step, on the lane clock but outside throughput intervals.

Everything it imports lies next to it (the source tree's lanes/python/, or the installed
share/devicerace/lanes): nothing from bench/. The data, lane keys and loop shared with
keras_lane.py are in lane_common.py.
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
import lane_common as lc  # noqa: E402

NAME = "pytorch_lane"
# Lane keys this lane acts on, and the engine keys it accepts without acting on them (DeviceRace's
# own fast paths, costs and process placement; cli/cmd never travel but are harmless).
ACCEPTED = ("name", "threads", "batch", "lr", "precision", "channels_last", "wd", "momentum", "schedule", "lstm",
            "data", "eval_batch", "fault")
IGNORED = ("framework", "fused", "graph", "resident", "cost", "isolate", "cli", "cmd")
torch = F = tn = wt = None  # imported by load_framework(), after the protocol stream is guarded


def load_framework():
    global torch, F, tn, wt
    # Spin-waiting OpenMP threads collapse throughput when lanes share cores; libgomp reads this
    # once, when torch loads it (the C++ worker sets the same default).
    if os.environ.get("DEVICERACE_OMP_WAIT") != "spin":  # the race runs each lane alone: libgomp's default
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch as torch_module
    import torch.nn.functional as functional
    import torch_networks
    import workload_table
    torch, F, tn, wt = torch_module, functional, torch_networks, workload_table


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
# The lane.
# ---------------------------------------------------------------------------------------------

def fashion_split(folder, prefix, limit, classes):
    """(images (N,1,28,28) uint8, labels int64) tensors on the host (lane_common.load_fashion_split)."""
    x, y = lc.load_fashion_split(folder, prefix, limit, classes)
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


class TorchLane:
    step_buffer = None  # workload_table.STEP_BUFFER, set in run()

    def __init__(self, config, session):
        c = dw.parse_config(config)
        workload = c["workload"]
        if workload not in tn.MODELS or workload not in wt.WORKLOADS:
            raise dw.LaneRefused(f"unknown workload '{workload}' for the PyTorch lane (it runs "
                                 f"{', '.join(sorted(tn.MODELS))})")
        w = dict(wt.WORKLOADS[workload])
        spec = dw.lane_fields(c, ACCEPTED, IGNORED, "the PyTorch lane")
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
        threads, cpu = lc.check_threads(spec, self.name)
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
        self.fault = lc.parse_fault(spec.get("fault"))

        # The network first: a model that differs from the engine's is refused before any data loads.
        torch.set_num_threads(self.threads)
        torch.manual_seed(c["seed"])
        if self.cuda:
            torch.cuda.set_device(device)
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        model = tn.build_model(workload, fused=self.lstm == "fused")
        count = tn.count_parameters(model)
        lc.check_parameters(workload, count, c["expected_parameters"], "PyTorch")
        self.parameters = count

        # Data.
        mode = spec.get("data") or c["data"]
        d = lc.resolve_data(workload, w, mode, c["data_dir"], c["train_limit"], c["test_limit"])
        self.alphabet = []
        if "text" in d:
            # A language model on real text: the network at the text's alphabet (checked above
            # at the nominal one, as the engine counts it).
            train_ids, test_ids, self.alphabet = lc.load_lm_text(w, d, c)
            torch.manual_seed(c["seed"])
            model = tn.build_model(workload, vocabulary=len(self.alphabet))
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
            self.train_x, self.train_y = tn.synthetic_split(w, train_count, requested_batch, device)
            self.test_x, self.test_y = tn.synthetic_split(w, test_count, requested_batch, device)
        elif self.alphabet:
            train_count, test_count = len(train_ids), len(test_ids)
            if requested_batch > train_count:
                raise dw.LaneRefused(f"lane {self.name}: batch={requested_batch} is larger than the {train_count} "
                                     "training examples")
            self.train_x = torch.from_numpy(train_ids).to(device)
            self.test_x = torch.from_numpy(test_ids).to(device)
            self.train_y = torch.zeros(train_count, dtype=torch.int64, device=device)  # targets: inside x
            self.test_y = torch.zeros(test_count, dtype=torch.int64, device=device)
        else:
            tx, ty = fashion_split(d["fashion"], "train", c["train_limit"], w["classes"])
            ex, ey = fashion_split(d["fashion"], "t10k", c["test_limit"], w["classes"])
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
        if self.alphabet:  # the text's alphabet, as the engine's worker sends it (recordings keep it)
            self.dataset.update(vocabulary=len(self.alphabet), tokens=[str(t) for t in self.alphabet])

        # Run length, evaluation batches.
        self.steps_per_epoch = (train_count + self.batch - 1) // self.batch
        self.total_steps = c["steps"] or self.steps_per_epoch * (c["epochs"] or w["epochs"])
        per_eval = 32768 // w["lm"] if w["lm"] else 3072000 // math.prod(w["shape"])  # run_plan.cpp
        self.eval_batch = spec.get("eval_batch") or max(self.batch, min(1000, per_eval))

        # Optimizer, precision.
        self.opt = tn.make_optimizer(w, self.model.parameters(), self.lr, self.wd, self.momentum)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        self.autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else nullcontext
        self.loss_of, self.correct_of = tn.loss_functions(w)
        self.loss_buf = torch.zeros(wt.STEP_BUFFER, device=device, dtype=torch.float32)
        self.correct_buf = torch.zeros(wt.STEP_BUFFER, device=device, dtype=torch.int64)
        self.in_buf = 0
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)

        self.meter = dw.Meter(session.emit, self.name, self.steps_per_epoch, c["warmup"], self.memory)
        # The step breakdown: on CPUs every step on the host clock (eager CPU ops are done when
        # they return); on CUDA every 4th step with events on the stream (the host clock would
        # time kernel launches), read at the report, which waits for the device anyway.
        self.clock = CudaPhaseClock(every=4) if self.cuda else lc.PhaseClock(every=1)
        # The CPU threads it trains with; a CUDA lane names them only when asked (as the C++ worker).
        self.ready = {"batch": self.batch, "total_steps": self.total_steps,
                      "threads": self.threads if (not self.cuda or threads) else None, "dataset": self.dataset}

    def memory(self):
        return int(torch.cuda.max_memory_allocated(self.device)) if self.cuda else None

    def describe(self):
        kind = {"rmsprop": "RMSprop", "adam": "Adam", "adamw": "AdamW", "sgd": "SGD",
                "sgd-nesterov": "Nesterov SGD"}[self.w["optimizer"]]
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
        # Language models score T targets per example: accuracy per next character.
        correct = int(self.correct_buf[:self.in_buf].sum().item()) / (self.w["lm"] or 1)
        self.in_buf = 0
        return self.meter.report(losses, correct, self.clock.take())

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
                x = tn.prepare_input(self.test_x[i:i + self.eval_batch], want, self.channels_last)
                y = self.test_y[i:i + self.eval_batch]
                x, y = tn.split_targets(self.w, x, y)
                with self.autocast():
                    logits = self.model(x).to(torch.float32)
                    loss_sum += self.loss_of(logits, y, reduction="sum")
                correct += self.correct_of(logits, y)
            text = self.sample_text() if self.alphabet else ""
        self.model.train()
        scored = n * (self.w["lm"] or 1)
        loss = loss_sum.item() / scored
        accuracy = correct.item() / scored
        meter.evaluation(loss, accuracy, time.perf_counter() - start, text)
        meter.state("running")

    def sample_text(self):
        """Trainer::sampleLanguageModel: 120 characters from a newline (or the validation text's
        first character), temperature 0.8, drawn with a CPU generator seeded by the lane's seed."""
        ids = [self.alphabet.index("\n") if "\n" in self.alphabet else int(self.test_x[0, 0])]
        gen = torch.Generator().manual_seed(self.c["seed"])
        out = []
        for _ in range(120):
            window = torch.tensor([ids[-self.w["lm"]:]], dtype=torch.int64, device=self.device)
            with self.autocast():
                logits = self.model(window)[:, -1].to(torch.float32)
            probs = torch.softmax(logits / 0.8, dim=1).cpu()
            nxt = int(torch.multinomial(probs, 1, generator=gen).item())
            ids.append(nxt)
            out.append(self.alphabet[nxt])
        return "".join(out)

    # The loop (engine trainer.cpp Trainer::loop) --------------------------------------------

    def run(self, session):
        self.meter.state("preparing")
        torch.set_num_threads(self.threads)
        self.step_buffer = wt.STEP_BUFFER
        self.scheduled = self.schedule != "constant"
        self.order_gen = torch.Generator().manual_seed(self.c["seed"])  # epoch orders: a host generator, as the engine
        self.model.train()
        return lc.train_loop(self, session, NAME)

    def new_order(self):
        return torch.randperm(self.train_count, generator=self.order_gen).to(self.device)

    def pending(self):
        return self.in_buf

    def step(self, order, pos, take, step):
        idx = order[pos:pos + take]
        if self.train_x.size(0) < self.train_count:  # a synthetic pool
            idx = idx.remainder(self.train_x.size(0))
        if self.scheduled:
            lr = self.lr * wt.schedule_factor(self.schedule, step, self.total_steps)
            for group in self.opt.param_groups:
                group["lr"] = lr
        timed = self.clock.due(step)
        if timed:
            self.clock.start()
        x = tn.prepare_input(self.train_x.index_select(0, idx), self.w["shape"], self.channels_last)
        x, y = tn.split_targets(self.w, x, self.train_y.index_select(0, idx))
        if timed:
            self.clock.mark("data")
        loss, correct = tn.train_step_once(self.model, self.opt, self.scaler, self.autocast, self.loss_of,
                                             self.correct_of, x, y, self.w["clip"],
                                             self.clock.mark if timed else None)
        if timed:
            self.clock.step_done()
        self.loss_buf[self.in_buf].copy_(loss)
        self.correct_buf[self.in_buf].copy_(correct)
        self.in_buf += 1


class CudaPhaseClock(lc.PhaseClock):
    """PhaseClock's marks as CUDA events on the current stream (the engine's StepTimer on CUDA):
    a phase is the device time between its start and end events, so nothing waits mid-step. The
    events are read at `take()`, after the report's synchronisation; at most `keep` timed steps
    per interval (their events are reused)."""

    def __init__(self, every=4, keep=64):
        super().__init__(every)
        self.keep, self.pool, self.used, self.marks = keep, [], 0, []

    def due(self, step):
        return super().due(step) and len(self.marks) < self.keep

    def record(self):
        if self.used == len(self.pool):
            self.pool.append(torch.cuda.Event(enable_timing=True))
        event = self.pool[self.used]
        event.record()
        self.used += 1
        return event

    def start(self):
        self.marks.append([("", self.record())])

    def mark(self, phase):
        self.marks[-1].append((phase, self.record()))

    def step_done(self):
        pass  # counted at take(), where a step cut short (no optimizer mark) is left out

    def take(self):
        for step in self.marks:
            if step[-1][0] != "optimizer":
                continue
            for (_, begin), (phase, end) in zip(step, step[1:]):
                self.sums[phase] = self.sums.get(phase, 0.0) + begin.elapsed_time(end) / 1000.0
            self.steps += 1
        self.marks, self.used = [], 0
        return super().take()


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
        dw.log(f"{NAME}: cannot load PyTorch and its networks (torch_networks.py): {type(e).__name__}: {e}")
        return dw.EXIT_FAILED
    return dw.Worker(TorchProgram(), NAME).run()


if __name__ == "__main__":
    dw.run_main(main, NAME)

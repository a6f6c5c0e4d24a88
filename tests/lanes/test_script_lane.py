"""The script lane program (lanes/python/script_lane.py) driven over the worker protocol as
DeviceRace drives it, with small real scripts: its pause (the command's process groups stopped
and continued, the paused time out of the lane clock), its stop, refused reports, the command's
environment, and the figures against the script's own. The CLI's races of real training scripts
are tests/cli/test_script_lanes.py.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lane_harness import LANES, PYTHON, STATES, Lane, engine_config  # noqa: E402

PROGRAM = os.path.join(LANES, "script_lane.py")
sys.path.insert(0, LANES)
from notebook_script import RUN_HELPER, NotebookError, is_notebook, notebook_cells  # noqa: E402
from script_file import python_script_of, script_file_problem  # noqa: E402
from script_processes import failure_lines  # noqa: E402
from devicerace import _gloo_exit  # noqa: E402


def config(command, steps=None, **fields):
    lane = {"device": "cpu", "threads": 1, "name": "mine", "framework": "script"}
    lane.update(fields)
    return engine_config({"workload": "script", "lane": "mine", "lane_fields": lane, "data": None, "data_dir": "",
                          "train_limit": None, "test_limit": None, "epochs": None, "steps": steps, "target": None,
                          "seed": 0, "eval_every": 0, "warmup": 3, "report_interval": 0.05, "fail_at_step": 0,
                          "command": command}, {})


# A script that reports through `import devicerace` (no framework): steps of a fixed amount of
# work (a step stopped half-way does the rest once continued, as a training step would), its own
# step times written to OUT.
STEPPER = textwrap.dedent("""
    import json, os, sys, time
    import devicerace
    lane = devicerace.lane()
    steps, out = int(sys.argv[1]), sys.argv[2]
    ends = []
    with open(out + ".env", "w") as f:
        seen = {k: v for k, v in os.environ.items() if k.startswith(("DEVICERACE_", "OMP_", "MKL_", "CUDA_",
                                                                        "PYTHONPATH", "XLA_", "TF_"))}
        json.dump(dict(seen, pid=os.getpid()), f)
    for step in range(steps):
        x = 0
        for i in range(30000):
            x += i
        ends.append(time.monotonic())
        lane.step(samples=8, loss=1.0 / (step + 1))
    with open(out, "w") as f:
        json.dump(ends, f)
""")

# A launcher as torchrun is one: it starts WORLD ranks of a script (RANK, WORLD_SIZE) with
# subprocess.Popen, each in a session of its own, closing what it inherited; rank 0 finds another
# file (DECOY) at the number DEVICERACE_REPORT_FD names. Rank r > 0 writes its OUT as OUT.rankR.
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys
    world, decoy, script, steps, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    number = int(os.environ["DEVICERACE_REPORT_FD"])
    fd = os.open(decoy, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, number)
    ranks = [subprocess.Popen([sys.executable, script, steps, out if r == 0 else f"{out}.rank{r}"],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(world)),
                              start_new_session=True, pass_fds=(number,) if r == 0 else ())
             for r in range(world)]
    sys.exit(max(p.wait() for p in ranks))
""")

# An unchanged PyTorch loop (the lane's hooks count its steps) that prints its evaluations (with
# "api", it reports its steps and evaluations through `import devicerace` too): at steps 20, 40 and 60 a line with
# a training accuracy (never taken) and the held-out figures, on stdout and again on stderr (a
# figure printed again unchanged); at the end pytorch/examples' MNIST line.
PRINTER = textwrap.dedent("""
    import sys
    import time
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    if sys.argv[1] == "api":
        import devicerace
        lane = devicerace.lane()
    for step in range(1, 61):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sys.argv[1] == "api":
            lane.step(samples=8, loss=loss)
        if step % 20 == 0:
            model.eval()
            acc = step / 100
            model.train()
            if sys.argv[1] == "api":
                lane.evaluate(accuracy=acc, loss=2.0)
            line = f"step {step}: train accuracy 0.99, test accuracy {acc:.2f}, test loss {2 - acc:.3f}"
            print(line)
            print(line, file=sys.stderr)
            time.sleep(0.2)  # the next steps come after the lines are read (a real step takes that long)
    # PyTorch's quickstart tutorial's lines: a heading, its figures below (a line on the other
    # stream between them)
    print("Test Error: ")
    print("evaluated", file=sys.stderr)
    print(f" Accuracy: {90.0:>0.1f}%, Avg loss: {0.5:>8f} \\n")
""")


class PrintedFigures(unittest.TestCase):
    """lanes/python/printed_metrics.py: the held-out figures of a printed line."""

    def test_the_lines_scripts_and_frameworks_print(self):
        import printed_metrics
        cases = {
            "step 200: loss 0.523, test accuracy 0.835": (0.835, None),
            "938/938 - 3s - loss: 0.52 - accuracy: 0.81 - val_accuracy: 0.8512 - val_loss: 0.4123": (0.8512, 0.4123),
            "{'eval_loss': 0.41, 'eval_accuracy': 0.85, 'epoch': 1.0}": (0.85, 0.41),
            # transformers 5 prints its logs' values quoted
            "{'eval_loss': '4.708', 'eval_runtime': '0.0106', 'eval_samples_per_second': '3015', 'epoch': '1'}":
                (None, 4.708),
            "{'eval_loss': '0.41', 'eval_accuracy': '0.8512'}": (0.8512, 0.41),
            "{'loss': '4.709', 'grad_norm': '0.7366', 'learning_rate': '3.5e-05', 'epoch': '0.3333'}": (None, None),
            # a results table's rows: Lightning's validate() and test() with rich, a Markdown table
            "│          val_acc          │         0.1328125         │": (0.1328125, None),
            "│         val_loss          │    2.2474870681762695     │": (None, 2.2474870681762695),
            "┃      Validate metric      ┃       DataLoader 0        ┃": (None, None),
            "| test_loss | 0.41 |": (None, 0.41),
            # pytorch/examples' ImageNet main.py: the validation's summary, not its running lines
            " * Acc@1 76.130 Acc@5 92.862": (0.7613, None),
            " *   Acc@1 76.130 Acc@5 92.862": (0.7613, None),  # its ProgressMeter.display_summary()
            "Test: [ 10/196]\tTime  0.123 ( 0.456)\tLoss 9.0e-01 (1.0e+00)\tAcc@1  78.12 ( 76.42)\tAcc@5  93.75 ( 92.90)":
                (None, None),
            "Test set: Average loss: 0.0319, Accuracy: 9898/10000 (99%)": (0.9898, 0.0319),
            "Validation set: Average loss: 0.0319, Accuracy: 98.5%": (0.985, 0.0319),
            "Epoch 1: val/acc=0.77 val/loss=0.61": (0.77, 0.61),
            "test acc 85.1%": (0.851, None),
            # an error rate: 1 - accuracy (pytorch/examples' forward-forward prints "test error:")
            "test error: 0.0706": (0.9294, None),
            "val_err=12.5%": (0.875, None),
            "Test error rate = 3.2 %": (0.968, None),
            "train error: 0.07": (None, None),
            "test error decreased": (None, None),
            "Validation Loss = 0.4": (None, 0.4),
            "dev_loss=1e-3": (None, 0.001),
            # training figures, and held-out words without a figure after them, are not taken
            "train accuracy 0.9, train loss 0.3": (None, None),
            "loss: 0.52 - accuracy: 0.81": (None, None),
            "val_acc_best: 0.9": (None, None),
            "test loss decreased from 0.5 to 0.4": (None, None),
            "evaluation took 3.2 s": (None, None),
            "invalid accuracy 0.3": (None, None),
            "": (None, None),
        }
        # (line, the line before it): a heading names the held-out set of the figures below it,
        # as PyTorch's quickstart tutorial prints them
        after = {
            (" Accuracy: 64.1%, Avg loss: 1.089548 ", "Test Error: "): (0.641, 1.089548),
            ("  loss: 0.4", "Validation:"): (None, 0.4),
            (" Accuracy: 64.1%, Avg loss: 1.089548 ", "Epoch 3"): (None, None),
            (" Accuracy: 64.1%", "test error: 0.2"): (None, None),
            ("Test Error: ", ""): (None, None),
        }
        cases = {(line, ""): want for line, want in cases.items()} | after
        for (line, previous), want in cases.items():
            got = printed_metrics.figures(line, previous)
            for g, w in zip(got, want):
                if w is None:
                    self.assertIsNone(g, (line, previous))
                else:
                    self.assertAlmostEqual(g, w, places=9, msg=(line, previous))


# A GPU lane's script as the reports see it, without a GPU: PyTorch's CUDA statistics stood in for
# (started, one device, a peak that grows to 30 MB and stays), the lane's device as a GPU lane
# sets it; with "unstarted", CUDA never starts. It reports its steps through `import devicerace`.
GPU_MEMORY = textwrap.dedent("""
    import os, sys, time, types
    os.environ["DEVICERACE_DEVICE"] = "cuda:0"
    peak = [0]
    started = sys.argv[1] != "unstarted"
    cuda = types.SimpleNamespace(is_initialized=lambda: started, device_count=lambda: 1,
                                 max_memory_allocated=lambda i: peak[0])
    sys.modules["torch"] = types.SimpleNamespace(cuda=cuda, Tensor=type("Tensor", (), {}))
    import devicerace
    lane = devicerace.lane()
    for step in range(1, 61):
        peak[0] = 1_000_000 * min(step, 30)
        time.sleep(0.01)
        lane.step(samples=8, loss=1.0)
""")


# An unchanged PyTorch loop (the hooks count it) whose FLOPs are known: 784-256-10 at batch 32,
# per sample 2 x (784x256 + 256x10) forward, as much again for the weights' gradients, and the
# second layer's input gradient (the first layer's input needs none): 818,176. The way it trains
# is argv[1]: fp32; bf16 (forward and loss under CPU autocast); eval (an evaluation inside the
# first counted step, which is then counted again); compiled (the model torch.compile'd, with
# AOTAutograd's eager backend: Dynamo's frames and a compiled backward, without Inductor's C++
# build; counted as eager); compiled-old (a compiled frame stood in for on a PyTorch said to be
# 2.4: nothing is counted, and the execution says why); badformula (PyTorch's FLOP formula for the
# dense layers' addmm raises: the script trains on, nothing is counted).
FLOPS = textwrap.dedent("""
    import sys, time, torch
    import torch.nn.functional as F
    way = sys.argv[1]
    if way == "compiled-old":
        import torch._dynamo
        torch._dynamo.utils.counters["frames"]["ok"] += 1
        torch.__version__ = "2.4.1"
    if way == "badformula":
        from torch.utils import flop_counter
        def broken(*args, **kwargs):
            raise ValueError("a shape this formula does not expect")
        flop_counter.flop_registry[torch.ops.aten.addmm] = broken
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if way == "compiled":
        model = torch.compile(model, backend="aot_eager")
    x, y = torch.rand(32, 784), torch.randint(0, 10, (32,))
    for step in range(1, 41):
        if way == "eval" and step == 4:
            model.eval()
            with torch.no_grad():
                model(torch.rand(500, 784))
            model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=way == "bf16"):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.005)
    if way == "compiled":  # the counter's filter is gone: the script's own warning shows
        import warnings
        warnings.warn("Using `torch.compile(module)` when there are global hooks on modules: the script's own")
""")
FLOPS_PER_SAMPLE = 2 * (784 * 256 + 256 * 10) * 2 + 2 * 256 * 10


# A script that updates its weights by hand, as pytorch/examples' word language model and
# regression do (no torch.optim): "zero_grad" resets the gradients with the model's zero_grad()
# at the top of each of its 40 steps, with an evaluation (eval() .. train()) after step 20;
# "none" sets each gradient to None itself, which the lane cannot see as a step.
BY_HAND = textwrap.dedent("""
    import sys, torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = torch.nn.Linear(784, 10)
    x, y = torch.randn(8, 784), torch.randint(0, 10, (8,))
    for step in range(1, 61 if sys.argv[1] == "none" else 41):
        if sys.argv[1] == "zero_grad":
            model.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                if sys.argv[1] == "none":
                    p.grad = None
        if step == 20:
            model.eval()
            model(x)
            model.train()
""")
# A loss of the script's own, not one of torch.nn.functional's (forward-forward's): its batch is not seen.
OWN_LOSS = textwrap.dedent("""
    import torch
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(40):
        opt.zero_grad()
        torch.log1p(torch.exp(-model(torch.randn(8, 16)).pow(2).mean(1))).mean().backward()
        opt.step()
""")

# Hogwild (pytorch/examples' mnist_hogwild): a script starts trainer processes itself
# (torch.multiprocessing, spawned, no torch.distributed) that train one shared model, each
# counting its own optimizer steps: 2 × 30 steps of batch 8.
HOGWILD = textwrap.dedent("""
    import torch
    import torch.multiprocessing as mp
    import torch.nn.functional as F

    def train(model, seed):
        torch.manual_seed(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(8, 32), torch.randint(0, 4, (8,))
        for _ in range(30):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

    if __name__ == "__main__":
        mp.set_start_method("spawn", force=True)
        model = torch.nn.Linear(32, 4)
        model.share_memory()
        trainers = [mp.Process(target=train, args=(model, seed)) for seed in range(2)]
        for p in trainers:
            p.start()
        for p in trainers:
            p.join()
""")

# A GAN's loop (pytorch/examples' dcgan): each iteration a discriminator step on 8 real and 8
# generated examples, then a generator step on 8, each with its own optimizer.
GAN = textwrap.dedent("""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    G, D = torch.nn.Linear(4, 16), torch.nn.Linear(16, 1)
    opt_d, opt_g = torch.optim.SGD(D.parameters(), lr=0.01), torch.optim.SGD(G.parameters(), lr=0.01)
    ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
    for _ in range(30):
        D.zero_grad()
        F.binary_cross_entropy_with_logits(D(torch.randn(8, 16)), ones).backward()
        fake = G(torch.randn(8, 4))
        F.binary_cross_entropy_with_logits(D(fake.detach()), zeros).backward()
        opt_d.step()
        G.zero_grad()
        F.binary_cross_entropy_with_logits(D(fake), ones).backward()
        opt_g.step()
""")
# The discriminator's step: D forward and weight gradient on 16 examples, G forward on 8 (2048);
# the generator's: D forward, weight and input gradients on 8, G's weight gradient (1792).
GAN_FLOPS = (2048 + 1792) / 24

# Two processes' reports written by hand, the last (pid 2's) stamped before the one before it.
INTERLEAVED = textwrap.dedent("""
    import json, os, time
    fd = int(os.environ["DEVICERACE_REPORT_FD"])
    t0 = time.monotonic()

    def report(pid, step, t):
        os.write(fd, (json.dumps({"t": "step", "source": "api", "pid": pid, "step": step, "samples": step * 8,
                                  "time": t, "loss": 1.0, "loss_reported": True}) + "\\n").encode())

    for step, at, late in ((1, 0.0, 0.0), (20, 0.3, 0.3), (30, 0.6, 0.55)):
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        report(1, step, t0 + at)
        report(2, step, t0 + late)
""")

BY_HAND_FLOPS = 2 * (2 * 784 * 10)  # the forward and the weight gradient (no input gradient)


# A process of one Gloo rank: an allreduce, a barrier and destroy_process_group() with the group
# still referenced (a DDP model does), then what the lane's exit finds of Gloo's worker threads
# (devicerace/_gloo_exit.py) and whether they settle.
GLOO_RANK = textwrap.dedent("""
    import json, os, socket, sys
    import torch, torch.distributed as dist
    from devicerace import _gloo_exit
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.barrier()
    kept = dist.distributed_c10d._get_default_group()  # as a DDP model still alive keeps it
    dist.destroy_process_group()
    threads = _gloo_exit._gloo_threads()
    print(json.dumps({"threads": len(threads), "settled": _gloo_exit.settle(timeout=2.0)}))
""")


class GlooExit(unittest.TestCase):
    """Gloo's worker threads settle before a rank's interpreter finalizes (a rank aborted there)."""

    def test_the_worker_threads_are_read_from_proc(self):
        with tempfile.TemporaryDirectory() as task:
            for tid, stat in (("11", "11 (pt_gloo_runloop) S 1 1 1 0 -1 4194368 0 0 0 0 7 3 0 0"),
                              ("12", "12 (pt_gloo_runloop) R 1 1 1 0 -1 4194368 0 0 0 0 20 1 0 0"),
                              ("13", "13 (python (x) y) S 1 1 1 0 -1 4194368 0 0 0 0 99 9 0 0")):
                os.makedirs(os.path.join(task, tid))
                with open(os.path.join(task, tid, "stat"), "w") as f:
                    f.write(stat + "\n")
            os.makedirs(os.path.join(task, "14"))  # a thread that ended while the folder was read
            self.assertEqual(_gloo_exit._gloo_threads(task), {"11": ("S", 10), "12": ("R", 21)})
        self.assertEqual(_gloo_exit._gloo_threads("/nonexistent/task"), {})

    def test_settle_waits_for_every_thread_asleep_and_idle(self):
        seen = iter([{"1": ("R", 5), "2": ("S", 1)}, {"1": ("S", 6), "2": ("S", 1)},
                     {"1": ("S", 6), "2": ("S", 1)}])
        calls = []

        def threads():
            calls.append(1)
            return next(seen)

        self.assertTrue(_gloo_exit.settle(timeout=5, interval=0.001, threads=threads))
        self.assertEqual(len(calls), 3)  # running, then asleep, then asleep with the same CPU time
        self.assertTrue(_gloo_exit.settle(threads=dict))  # no Gloo thread: nothing to wait for
        started = time.monotonic()
        self.assertFalse(_gloo_exit.settle(timeout=0.05, interval=0.001, threads=lambda: {"1": ("R", 1)}))
        self.assertLess(time.monotonic() - started, 2.0)  # bounded (generous: the check is the bound)

    def test_a_gloo_ranks_threads_are_found_and_settle(self):
        done = subprocess.run([PYTHON, "-c", GLOO_RANK], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=LANES))
        self.assertEqual(done.returncode, 0, done.stderr)
        found = json.loads(done.stdout.strip().splitlines()[-1])
        # PyTorch 2.11 keeps the group's worker threads after destroy_process_group(); were they
        # renamed, nothing would be waited for, and this says so.
        self.assertGreaterEqual(found["threads"], 1, done.stdout)
        self.assertTrue(found["settled"], done.stdout)


class FailureLines(unittest.TestCase):
    def test_a_failed_scripts_exception_is_its_type_and_the_frame_that_raised_it(self):
        frames = ['Traceback (most recent call last):', '  File "/work/train.py", line 57, in <module>',
                  '    data = torch.load("traindata.pt")', '           ^^^^^^^^^^^^^^^^^^^^^^^^^^',
                  '  File "/venv/torch/serialization.py", line 1578, in load']
        one = frames + ["RuntimeError: the script's own failure on the GPU, at step 50"]
        self.assertEqual(failure_lines(one), "RuntimeError: the script's own failure on the GPU, at step 50 "
                                             "(serialization.py, line 1578)")
        # A message of several lines (torch.load's) ends in advice: its first line says what failed.
        several = frames + ["_pickle.UnpicklingError: Weights only load failed. This file can still be "
                            "\x1b[1mloaded\x1b[0m.",
                            "(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument.",
                            "Check the documentation of torch.load to learn more about types accepted by default."]
        self.assertEqual(failure_lines(several), "_pickle.UnpicklingError: Weights only load failed. This file "
                                                 "can still be loaded. (serialization.py, line 1578)")
        # Of chained exceptions, the last; without a traceback, the last lines.
        chained = ["Traceback (most recent call last):", '  File "a.py", line 1', "KeyError: 'x'", "",
                   "During handling of the above exception, another exception occurred:"] + one
        self.assertTrue(failure_lines(chained).startswith("RuntimeError: the script's own failure"))
        self.assertEqual(failure_lines(["loading", "Killed"]), "loading | Killed")

    def test_a_launchers_report_names_the_rank_that_failed_and_what_it_printed(self):
        # torchrun's output when rank 1 fails: its own log lines, then its ChildFailedError, whose
        # message is a report with the first failure as the "Root Cause".
        def launcher(ranks_said, code, traceback):
            return (["*****************************************",
                     "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, ...",
                     "*****************************************", "step 10"] + ranks_said +
                    ["W1207 14:53:50.715000 3956 torch/distributed/elastic/multiprocessing/api.py:1012] Sending "
                     "process 3962 closing signal SIGTERM",
                     "E1207 14:53:50.717000 3956 torch/distributed/elastic/multiprocessing/api.py:986] failed "
                     f"(exitcode: {code}) local_rank: 1 (pid: 3963) of binary: /venv/bin/python",
                     "Traceback (most recent call last):",
                     '  File "/venv/torch/distributed/launcher/api.py", line 317, in launch_agent',
                     "    raise ChildFailedError(",
                     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                     "=" * 60, "train.py FAILED", "-" * 60, "Failures:", "[1]:",
                     "  rank      : 0 (local_rank: 0)", "  exitcode  : -15 (pid: 3962)",
                     "  traceback : Signal 15 (SIGTERM) received by PID 3962", "-" * 60,
                     "Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-07_14:53:50",
                     "  host      : localhost", "  rank      : 1 (local_rank: 1)", f"  exitcode  : {code} (pid: 3963)",
                     "  error_file: <N/A>", f"  traceback : {traceback}", "=" * 60])
        raised = launcher(["Traceback (most recent call last):", '  File "/work/train.py", line 6, in <module>',
                           "ValueError: rank 1's own failure"], 1,
                          "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
        self.assertEqual(failure_lines(raised),
                         "rank 1 ended first, with exit code 1: ValueError: rank 1's own failure (train.py, line 6)")
        aborted = launcher(["terminate called without an active exception"], -6,
                           "Signal 6 (SIGABRT) received by PID 3963")
        self.assertEqual(failure_lines(aborted),
                         "rank 1 ended first, killed by signal 6 (SIGABRT): step 10 | terminate called without an "
                         "active exception")
        self.assertEqual(failure_lines(launcher([], -9, "Signal 9 (SIGKILL) received by PID 3963")[4:]),
                         "rank 1 ended first, killed by signal 9 (SIGKILL)")


class ScriptFile(unittest.TestCase):
    """lanes/python/script_file.py: the script of a Python command, and what stops Python running it."""

    def test_the_script_is_the_first_word_after_pythons_own_options(self):
        self.assertEqual(python_script_of(["python3", "train.py", "--epochs", "1"]), "train.py")
        self.assertEqual(python_script_of(["/opt/venv/bin/python3.11", "-u", "-X", "dev", "-Wignore", "t.py"]), "t.py")
        self.assertEqual(python_script_of(["python", "-W", "ignore", "-uB", "--", "-odd.py"]), "-odd.py")
        self.assertEqual(python_script_of(["python3", "--check-hash-based-pycs", "never", "t.py"]), "t.py")
        for none in (["python3", "-m", "torch.distributed.run", "t.py"], ["python3", "-uc", "print(1)"],
                     ["python3", "-"], ["python3", "--version"], ["python3"], ["./train.sh", "train.py"],
                     ["pythonista", "train.py"], []):
            self.assertIsNone(python_script_of(none), none)

    def test_what_python_cannot_run_is_said_with_what_to_do(self):
        d = tempfile.mkdtemp(prefix="devicerace-script-file-")
        self.addCleanup(shutil.rmtree, d, True)

        def put(name, data):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            return os.path.join(d, name)

        def problem(name, data=None):
            path = put(name, data) if data is not None else os.path.join(d, name)
            return script_file_problem(name, path, "python3") or ""

        self.assertEqual(problem("train.py", b"import torch\n"), "")
        self.assertEqual(problem("model.zip", b"PK\x03\x04\0\0data"), "")  # Python runs zip archives
        self.assertEqual(problem("cached.pyc", b"\x55\x0d\x0d\x0a\0\0\0\0"), "")
        os.makedirs(os.path.join(d, "pkg"))
        put("pkg/__main__.py", b"print(1)\n")
        self.assertEqual(problem("pkg"), "")
        os.makedirs(os.path.join(d, "empty"))
        self.assertIn("empty: a folder without a __main__.py", problem("empty"))
        self.assertIn("weights.bin: a binary file, not a Python script", problem("weights.bin", b"\x7fELF\0\0\0"))


def notebook(cells, language="python", nbformat=4):
    """A notebook as Jupyter saves it: `cells` are ("code" | "markdown", source) pairs."""
    return json.dumps({"cells": [{"cell_type": kind, "metadata": {}, "source": source.splitlines(True),
                                  **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                                 for kind, source in cells],
                       "metadata": {"kernelspec": {"language": language, "name": language}},
                       "nbformat": nbformat, "nbformat_minor": 5})


class NotebookScript(unittest.TestCase):
    """lanes/python/notebook_script.py: a notebook's code cells as the script a lane runs."""

    def cells(self, text, name="train.ipynb"):
        d = tempfile.mkdtemp(prefix="devicerace-notebook-test-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        return notebook_cells(path, name)

    def test_code_cells_run_and_what_only_ipython_runs_is_named(self):
        cells, skipped = self.cells(notebook([
            ("markdown", "# Training\n!not code"),
            ("code", "%matplotlib inline\n!pip install torch\nimport math\nfiles = !ls\nmath?"),
            ("code", "%%time\nx = 1\nif x:\n    %timeit math.sqrt(2)\ny = x + 1"),
            ("code", "%%bash\necho hello"),
            ("code", "z = 5 % 3\nw = z != 2\n"),
        ]))
        self.assertEqual([name for name, _ in cells], ["train.ipynb, cell 1", "train.ipynb, cell 2",
                                                       "train.ipynb, cell 4"])  # cell 3 is bash
        self.assertEqual(skipped, ["%matplotlib inline (cell 1)", "!pip install torch (cell 1)",
                                   "files = !ls (cell 1)", "math? (cell 1)", "%timeit math.sqrt(2) (cell 2)",
                                   "%%bash (cell 3)"])
        scope = {}
        for name, source in cells:
            exec(compile(source, name, "exec"), scope)
        self.assertEqual((scope["y"], scope["z"], scope["w"]), (2, 2, False))
        self.assertEqual(cells[1][1].splitlines()[3], "    pass")  # the if block keeps a body
        self.assertEqual(cells[1][1].splitlines()[4], "y = x + 1")  # and %%time's body its line numbers

    def test_run_lines_run_their_scripts_as_ipython_does(self):
        """%run helper.py ARGS runs the script as __main__ with its arguments, its names then the
        notebook's; -i gives it the notebook's names; a missing .py is found; -e ignores its exit;
        a %run of a notebook or with $variables is left out and named."""
        d = tempfile.mkdtemp(prefix="devicerace-notebook-test-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "helper.py"), "w") as f:
            f.write("import sys\ndoubled = int(sys.argv[1]) * 2\nran_as = __name__\n")
        with open(os.path.join(d, "uses_x.py"), "w") as f:
            f.write("import sys\nseen = x + 1\nsys.exit(3)\n")
        with open(os.path.join(d, "train.ipynb"), "w") as f:
            f.write(notebook([("code", "x = 10\n%run helper.py 21\n%run other.ipynb\n%run $script"),
                              ("code", "if doubled:\n    %run -i -e uses_x\ntotal = doubled + seen")]))
        cells, skipped = notebook_cells(os.path.join(d, "train.ipynb"), "train.ipynb")
        self.assertEqual(skipped, ["%run other.ipynb (cell 1)", "%run $script (cell 1)"])
        scope = {}
        exec(RUN_HELPER, scope)
        here = os.getcwd()
        os.chdir(d)
        self.addCleanup(os.chdir, here)
        argv = list(sys.argv)
        for name, source in cells:
            exec(compile(source, name, "exec"), scope)
        self.assertEqual(sys.argv, argv)  # put back after each script
        self.assertEqual((scope["doubled"], scope["ran_as"], scope["seen"], scope["total"]), (42, "__main__", 11, 53))

    def test_what_cannot_be_raced_is_said(self):
        for text, said in ((notebook([("code", "x = (1,\n")]), "train.ipynb, cell 1, line 1"),
                           (notebook([("code", "x <- 1")], language="R"), "a R notebook"),
                           (notebook([("markdown", "# notes")]), "without code cells"),
                           (json.dumps({"nbformat": 3, "worksheets": []}), "nbformat 3"),
                           ("{not json", "not a notebook Jupyter could open")):
            with self.assertRaises(NotebookError) as e:
                self.cells(text)
            self.assertIn(said, str(e.exception))

    def test_a_notebook_is_known_by_its_name_or_its_cells(self):
        d = tempfile.mkdtemp(prefix="devicerace-notebook-test-")
        self.addCleanup(shutil.rmtree, d, True)
        for name, text, expected in (("a.ipynb", "", True), ("renamed.txt", ' {"cells": [], "nbformat": 4}', True),
                                     ("train.py", "import torch\n", False)):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
            self.assertEqual(is_notebook(os.path.join(d, name)), expected, name)


def pause_once(at_step, seconds):
    """A run_lane control that pauses the lane once, at its first training sample at or past
    `at_step`, for `seconds`."""
    paused = []

    def control(lane, s):
        if s["kind"] == "train" and s["step"] >= at_step and not paused:
            paused.append(time.monotonic())
            lane.send({"type": "pause"})
            time.sleep(seconds)
            lane.send({"type": "resume"})

    return control


class ScriptLaneTest(unittest.TestCase):
    def check(self, s):
        """docs/EVENTS.md's schema as a script lane fills it: a script may not say its accuracy or
        samples, and the first step's sample has no interval yet."""
        self.assertIn(s["kind"], ("train", "eval", "state"))
        for key in ("step", "samples"):
            self.assertIsInstance(s[key], int)
        for key in ("loss", "accuracy", "samples_per_sec", "steps_per_sec", "interval_s"):
            self.assertTrue(s[key] is None or isinstance(s[key], float), (key, s))
        if s["kind"] == "state":
            self.assertIn(s["state"], STATES)
        if s["kind"] == "train" and s["steps_per_sec"] is not None:
            self.assertGreater(s["interval_s"], 0)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="devicerace-script-lane-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.script = os.path.join(self.dir, "stepper.py")
        with open(self.script, "w") as f:
            f.write(STEPPER)

    def run_lane(self, command, control=None, steps=None, **fields):
        lane = Lane([PYTHON, PROGRAM])
        self.addCleanup(lane.close)
        self.assertEqual(lane.next()["type"], "hello")
        lane.send(config(command, steps, **fields))
        ready, _ = lane.until(lambda m: m["type"] in ("ready", "error"))
        self.assertEqual(ready["type"], "ready", ready)
        lane.send({"type": "start", "id": 1})
        samples = []
        self.messages = []
        while True:
            m = lane.next()
            if m is None:
                break
            self.messages.append(m)
            if m["type"] == "sample":
                self.check(m["sample"])
                samples.append((time.monotonic(), m["sample"]))
                if control:
                    control(lane, m["sample"])
        return lane, [s for _, s in samples]

    def run_script(self, name, text, *args, **fields):
        """Writes `text` as the script `name` in the test's folder and races it as the lane's command."""
        script = os.path.join(self.dir, name)
        with open(script, "w") as f:
            f.write(text)
        return self.run_lane([PYTHON, script, *args], **fields)

    def finished_counts(self, lane, samples):
        """The (step, samples) of a finished lane's last train sample, and its last execution text."""
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        train = [s for s in samples if s["kind"] == "train"]
        texts = [m["text"] for m in self.messages if m["type"] == "execution"]
        return (train[-1]["step"], train[-1]["samples"]), texts[-1]

    def test_pause_stops_the_command_and_leaves_its_time_out(self):
        out = os.path.join(self.dir, "ends.json")
        control = pause_once(at_step=40, seconds=1.5)
        lane, samples = self.run_lane([PYTHON, self.script, "200", out], control)
        final = samples[-1]
        self.assertEqual(final["state"], "finished", lane.stderr())
        with open(out) as f:
            ends = json.load(f)
        gaps = [b - a for a, b in zip(ends, ends[1:])]
        self.assertGreater(max(gaps), 1.2)  # the script itself was stopped (SIGSTOP), not only its reports
        # The lane clock leaves the pause out: it is the script's training time less the pause.
        self.assertLess(final["t"], ends[-1] - ends[0] - 1.0)
        rates = [s["steps_per_sec"] for s in samples if s["kind"] == "train" and s["steps_per_sec"]]
        median = sorted(rates)[len(rates) // 2]
        self.assertLess(max(rates), 3 * median)  # no interval shrank by the pause (1.5 s of a 0.05 s one)
        self.assertGreater(min(rates), median / 5)  # nor grew by it

    def test_a_launchers_ranks_report_pause_and_count_as_the_lanes(self):
        # torchrun / accelerate launch in the command: rank 0 reopens the report pipe by its
        # identity (its inherited number is another file), rank 1 stays silent, the lane counts
        # both ranks' samples, and a pause stops ranks in sessions of their own.
        launcher, decoy = os.path.join(self.dir, "launch.py"), os.path.join(self.dir, "decoy")
        with open(launcher, "w") as f:
            f.write(LAUNCHER)
        out = os.path.join(self.dir, "ends.json")
        control = pause_once(at_step=40, seconds=1.5)
        lane, samples = self.run_lane([PYTHON, launcher, "2", decoy, self.script, "200", out], control)
        final = samples[-1]
        self.assertEqual(final["state"], "finished", lane.stderr())
        self.assertEqual((final["step"], final["samples"]), (200, 200 * 8 * 2))
        self.assertEqual(os.path.getsize(decoy), 0)  # nothing went to the file at the pipe's old number
        for ends_file in (out, out + ".rank1"):
            with open(ends_file) as f:
                ends = json.load(f)
            self.assertGreater(max(b - a for a, b in zip(ends, ends[1:])), 1.2, ends_file)  # both were stopped
        execution = [m["text"] for m in self.messages if m["type"] == "execution"][-1]
        self.assertIn("2 ranks started by the command itself", execution)

    def test_nothing_the_command_started_outlives_its_lane(self):
        # A script that leaves a process behind in a session of its own (a server, a launcher's
        # rank whose launcher already exited): the lane ends it when the command is done.
        script = os.path.join(self.dir, "leaves.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent("""
                import subprocess, sys
                import devicerace
                left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                        start_new_session=True)
                open(sys.argv[1], "w").write(str(left.pid))
                lane = devicerace.lane()
                for step in range(30):
                    lane.step(samples=8, loss=1.0)
            """))
        pid_file = os.path.join(self.dir, "left.pid")
        lane, samples = self.run_lane([PYTHON, script, pid_file])
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        with open(pid_file) as f:
            pid = int(f.read())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break  # ended, its exit not yet collected
            except OSError:
                break  # ended and collected
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            self.fail("the process the command left behind is still running after its lane ended")

    def test_the_environment_of_a_cpu_lane(self):
        out = os.path.join(self.dir, "ends.json")
        lane, samples = self.run_lane([PYTHON, self.script, "10", out], threads=2, cost=1.5)
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        with open(out + ".env") as f:
            seen = json.load(f)
        self.assertEqual(seen["DEVICERACE_DEVICE"], "cpu")
        self.assertEqual(seen["CUDA_VISIBLE_DEVICES"], "")
        self.assertEqual(seen["DEVICERACE_LANE"], "mine")
        for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "DEVICERACE_THREADS", "TF_NUM_INTRAOP_THREADS"):
            self.assertEqual(seen[key], "2", key)
        self.assertIn("intra_op_parallelism_threads=2", seen["XLA_FLAGS"])
        self.assertIn("devicerace_site", seen["PYTHONPATH"])
        self.assertNotIn("DEVICERACE_REPORT_FD", [k for k in seen if k == "DEVICERACE_CLI"])

    def test_counts_and_clock_are_the_scripts(self):
        out = os.path.join(self.dir, "ends.json")
        lane, samples = self.run_lane([PYTHON, self.script, "150", out])
        with open(out) as f:
            ends = json.load(f)
        train = [s for s in samples if s["kind"] == "train"]
        self.assertEqual(train[-1]["step"], 150)
        self.assertEqual(train[-1]["samples"], 1200)
        # Each interval's rate is the script's own over the same steps.
        for a, b in zip(train, train[1:]):
            if b["samples_per_sec"] is None:
                continue
            own = (b["step"] - a["step"]) / (ends[b["step"] - 1] - ends[a["step"] - 1])
            self.assertAlmostEqual(b["steps_per_sec"] / own, 1, delta=0.02)
        self.assertEqual([s["loss"] for s in train[:1]], [1.0])
        self.assertTrue(all(s["warmup"] for s in train if s["step"] <= 3))

    def test_stop_ends_the_command(self):
        out = os.path.join(self.dir, "ends.json")

        sent = []

        def control(lane, s):
            # Once: samples already on their way after the stop would send it again, to a lane
            # that may have ended (a broken pipe on a slow machine).
            if s["kind"] == "train" and s["step"] >= 20 and not sent:
                sent.append(s["step"])
                lane.send({"type": "stop", "id": 2})

        lane, samples = self.run_lane([PYTHON, self.script, "100000", out], control)
        self.assertEqual(samples[-1]["state"], "stopped", lane.stderr())
        self.assertEqual(lane.wait(), 0)
        self.assertFalse(os.path.exists(out))  # it never finished its 100,000 steps

    def test_a_lane_killed_outright_takes_its_command_with_it(self):
        out = os.path.join(self.dir, "ends.json")
        lane = Lane([PYTHON, PROGRAM])
        self.addCleanup(lane.close)
        lane.next()
        lane.send(config([PYTHON, self.script, "100000", out]))
        lane.until(lambda m: m["type"] == "ready")
        lane.send({"type": "start", "id": 1})
        lane.until(lambda m: m["type"] == "sample" and m["sample"]["kind"] == "train" and m["sample"]["step"] > 5)
        with open(out + ".env") as f:
            pid = json.load(f)["pid"]
        self.assertTrue(os.path.exists(f"/proc/{pid}"))
        lane.p.kill()  # SIGKILL: no chance to stop the command itself
        lane.p.wait()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        state = ""
        if os.path.exists(f"/proc/{pid}/stat"):
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        self.assertIn(state, ("", "Z"), "the command outlived its lane")

    def test_a_cpu_lane_reads_the_rapl_counters(self):
        # A fake powercap tree whose package counter a thread advances at 100 W.
        root = os.path.join(self.dir, "powercap")
        zone = os.path.join(root, "intel-rapl:0")
        os.makedirs(zone)
        for name, value in (("name", "package-0"), ("energy_uj", "0"), ("max_energy_range_uj", "262143328850")):
            with open(os.path.join(zone, name), "w") as f:
                f.write(value + "\n")
        done = threading.Event()

        def advance():
            start = time.monotonic()
            while not done.wait(0.005):
                with open(os.path.join(zone, "energy_uj.tmp"), "w") as f:
                    f.write(f"{int((time.monotonic() - start) * 100e6)}\n")
                os.replace(os.path.join(zone, "energy_uj.tmp"), os.path.join(zone, "energy_uj"))

        threading.Thread(target=advance, daemon=True).start()
        self.addCleanup(done.set)
        os.environ["DEVICERACE_POWERCAP_ROOT"] = root
        self.addCleanup(os.environ.pop, "DEVICERACE_POWERCAP_ROOT")
        out = os.path.join(self.dir, "ends.json")
        lane, samples = self.run_lane([PYTHON, self.script, "150", out])
        running = next(s for s in samples if s["kind"] == "state" and s["state"] == "running")
        self.assertEqual(running["energy_source"], "RAPL package-0")
        measured = [s for s in samples if s["kind"] == "train" and s.get("energy_joules") is not None]
        self.assertGreater(len(measured), 3)
        watts = sum(s["energy_joules"] for s in measured) / sum(s["interval_s"] for s in measured)
        self.assertAlmostEqual(watts, 100, delta=25)

    def test_a_gpu_lane_reads_its_gpus_energy_through_nvml(self):
        # NVML stood in for by a library whose GPU 0 draws 250 W and whose GPU 1 has no counter;
        # no GPU is needed (without nvidia-smi the lane runs the script on cuda:N anyway).
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            self.skipTest("no C compiler to build the NVML stand-in")
        library = os.path.join(self.dir, "libfake-nvml.so")
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", library,
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_nvml.c")], check=True)
        os.environ["DEVICERACE_NVML_LIBRARY"] = library
        self.addCleanup(os.environ.pop, "DEVICERACE_NVML_LIBRARY")
        out = os.path.join(self.dir, "ends.json")
        for device, source in (("cuda:0", "NVML"), ("cuda:1", "not measurable here: GPU 1 reports no total energy "
                                                              "through NVML")):
            lane, samples = self.run_lane([PYTHON, self.script, "150", out], device=device)
            self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
            running = next(s for s in samples if s["kind"] == "state" and s["state"] == "running")
            self.assertEqual(running["energy_source"], source)
            measured = [s for s in samples if s["kind"] == "train" and s.get("energy_joules") is not None]
            if device == "cuda:1":
                self.assertEqual(measured, [])
                continue
            self.assertGreater(len(measured), 3)
            watts = sum(s["energy_joules"] for s in measured) / sum(s["interval_s"] for s in measured)
            self.assertAlmostEqual(watts, 250, delta=60)
        os.environ["DEVICERACE_NVML_LIBRARY"] = os.path.join(self.dir, "libnone.so")
        lane, samples = self.run_lane([PYTHON, self.script, "40", out], device="cuda:0")
        running = next(s for s in samples if s["kind"] == "state" and s["state"] == "running")
        self.assertEqual(running["energy_source"], "not measurable here: NVML (libnone.so) is not available")

    def test_the_package_installs_and_is_a_no_op_outside_a_race(self):
        # pip install lanes/python (no index, no download), then a script that reports runs alone.
        target = os.path.join(self.dir, "site")
        r = subprocess.run([PYTHON, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index",
                            "--target", target, LANES], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isfile(os.path.join(target, "devicerace", "__init__.py")))
        self.assertFalse(os.path.exists(os.path.join(target, "script_lane.py")))  # the package alone
        out = os.path.join(self.dir, "ends.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICERACE_")}
        env["PYTHONPATH"] = target
        probe = ("import devicerace; lane = devicerace.lane(); "
                 "print(lane.in_race, lane.device, lane.rank, lane.world_size)")
        r = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.stdout.split(), ["False", "cpu", "0", "1"], r.stderr)
        r = subprocess.run([PYTHON, self.script, "50", out], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            self.assertEqual(len(json.load(f)), 50)

    def test_printed_figures_are_evaluations_at_the_step_they_follow(self):
        script = os.path.join(self.dir, "printer.py")
        with open(script, "w") as f:
            f.write(PRINTER)
        lane, samples = self.run_lane([PYTHON, script, "print"])
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        evals = [s for s in samples if s["kind"] == "eval"]
        # once each (stdout and stderr, and each line twice, give one), at the step printed after
        self.assertEqual([(e["step"], e["accuracy"], e["loss"]) for e in evals],
                         [(20, 0.2, 1.8), (40, 0.4, 1.6), (60, 0.6, 1.4), (60, 0.9, 0.5)])
        trains = [s for s in samples if s["kind"] == "train"]
        for e in evals[:3]:  # on the lane clock after the step's report, before the next one's
            self.assertGreaterEqual(e["t"], max(s["t"] for s in trains if s["step"] <= e["step"]))
            self.assertLessEqual(e["t"], min([s["t"] for s in trains if s["step"] > e["step"]] or [math.inf]))
        # Reported evaluations (lane.evaluate) are the lane's; the printed ones are left out.
        lane, samples = self.run_lane([PYTHON, script, "api"])
        evals = [s for s in samples if s["kind"] == "eval"]
        self.assertEqual([(e["step"], e["accuracy"], e["loss"]) for e in evals],
                         [(20, 0.2, 2.0), (40, 0.4, 2.0), (60, 0.6, 2.0)])
        # printed=false reads none.
        lane, samples = self.run_lane([PYTHON, script, "print"], printed=False)
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        self.assertEqual([s for s in samples if s["kind"] == "eval"], [])

    def test_a_gpu_lanes_peak_memory_is_the_scripts_tensors(self):
        """On a GPU lane the script's reports carry PyTorch's peak of allocated GPU memory, which the
        lane's samples give as memory_bytes (the summary's peak memory), the highest so far; before
        the script starts CUDA, none (a report never starts it)."""
        script = os.path.join(self.dir, "gpu_memory.py")
        with open(script, "w") as f:
            f.write(GPU_MEMORY)
        lane, samples = self.run_lane([PYTHON, script, "started"])
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        memory = [s["memory_bytes"] for s in samples if s["kind"] == "train"]
        self.assertTrue(memory and all(m is not None for m in memory), memory)
        self.assertEqual(memory, sorted(memory))
        self.assertEqual(memory[-1], 30_000_000)
        lane, samples = self.run_lane([PYTHON, script, "unstarted"])
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        self.assertEqual({s["memory_bytes"] for s in samples}, {None})

    def test_an_unchanged_scripts_flops_are_counted_over_one_step(self):
        """PyTorch's FlopCounterMode over one warm-up step gives the lane its FLOPs per sample, with
        the precision the loss saw, first to the engine ("flops", to pick the peak), then in a
        running state as a built-in lane's; a compiled model's step as its eager one (without
        PyTorch's warning about the counter's global hooks); never across an evaluation; not
        compiled code on a PyTorch older than the one checked."""
        script = os.path.join(self.dir, "flops.py")
        with open(script, "w") as f:
            f.write(FLOPS)
        for way, precision in (("fp32", "fp32"), ("bf16", "bf16"), ("eval", "fp32"), ("compiled", "fp32"),
                               ("compiled-old", None), ("badformula", None)):
            lane, samples = self.run_lane([PYTHON, script, way])
            self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
            sent = [m for m in self.messages if m["type"] == "flops"]
            counted = [s["flops_per_sample"] for s in samples if s.get("flops_per_sample") is not None]
            if precision is None:
                self.assertEqual((sent, counted), ([], []), way)
                self.assertEqual(samples[-1]["step"], 40, way)  # trained to its end all the same
                if way == "compiled-old":  # the execution text says why there is no count
                    texts = [m["text"] for m in self.messages if m["type"] == "execution"]
                    self.assertIn("FLOPs not counted: torch.compile has compiled code in this script, and "
                                  "PyTorch 2.4.1 is older than 2.11, where counting it was checked", texts[-1])
                continue
            self.assertNotIn("global hooks on modules (e.g.", lane.stderr(), way)
            if way == "compiled":
                self.assertIn("global hooks on modules: the script's own", lane.stderr())
            self.assertEqual([(m["per_sample"], m["precision"]) for m in sent], [(FLOPS_PER_SAMPLE, precision)], way)
            self.assertEqual(counted, [FLOPS_PER_SAMPLE], way)
            flops_at = self.messages.index(sent[0])
            later = [m for m in self.messages[flops_at:] if m["type"] == "sample" and
                     m["sample"].get("flops_per_sample") is not None]
            self.assertEqual(len(later), 1, way)  # the state follows the engine's message
            texts = [m["text"] for m in self.messages if m["type"] == "execution"]
            self.assertIn(f"0.8 MFLOP a sample in {precision}, counted by PyTorch's FlopCounterMode", texts[-1])

    def test_a_figure_printed_just_before_the_last_step_is_kept(self):
        """A lane that --steps stops (or the user stops) takes the figures its script printed in the
        moment before, where the figures of a running script wait PRINTED_HOLD_S for a repeat."""
        script = os.path.join(self.dir, "last_print.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent("""
                import time
                import devicerace
                lane = devicerace.lane()
                for step in range(1, 100000):
                    time.sleep(0.01)
                    if step == 30:
                        print("step 30: test accuracy 0.75, test loss 0.6", flush=True)
                        time.sleep(0.05)  # read before the report that reaches --steps
                    lane.step(samples=8, loss=1.0)
            """))
        lane, samples = self.run_lane([PYTHON, script], steps=30)
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        evals = [s for s in samples if s["kind"] == "eval"]
        self.assertEqual([(s["accuracy"], s["loss"]) for s in evals], [(0.75, 0.6)], samples[-6:])
        self.assertLessEqual(evals[0]["step"], 30)

    def test_a_notebook_runs_as_its_cells_and_a_failing_cell_is_named(self):
        # The stepper as a notebook: its cells run in the notebook's folder, with sys.argv.
        stepper = STEPPER.split("\n")
        cut = stepper.index("    ends = []") if "    ends = []" in stepper else stepper.index("ends = []")
        path = os.path.join(self.dir, "stepper.ipynb")
        with open(path, "w") as f:
            f.write(notebook([("code", "%matplotlib inline\n" + "\n".join(stepper[:cut])),
                              ("code", "\n".join(stepper[cut:]) + "\nimport os\nopen('cwd', 'w').write(os.getcwd())")]))
        out = os.path.join(self.dir, "ends.json")
        lane, samples = self.run_lane([PYTHON, path, "60", out])
        self.assertEqual(samples[-1]["state"], "finished", lane.stderr())
        self.assertEqual((samples[-1]["step"], samples[-1]["samples"]), (60, 480))
        with open(os.path.join(self.dir, "cwd")) as f:
            self.assertEqual(f.read(), self.dir)  # the notebook's folder, as in Jupyter
        execution = [m["text"] for m in self.messages if m["type"] == "execution"][-1]
        self.assertIn("its 2 code cells run in order in the notebook's folder, without what only IPython runs: "
                      "%matplotlib inline (cell 1)", execution)
        with open(path, "w") as f:
            f.write(notebook([("code", "x = 1"), ("markdown", "next"), ("code", "y = 2\nraise ValueError('no data')")]))
        lane, samples = self.run_lane([PYTHON, path])
        self.assertEqual(samples[-1]["state"], "failed")
        self.assertIn("ValueError: no data (stepper.ipynb, cell 2, line 2)", samples[-1]["message"])

    def test_a_script_that_updates_its_weights_by_hand_steps_at_each_zero_grad(self):
        """Without torch.optim, the backward() passes between a module's zero_grad() calls are a
        step (the one before an evaluation ends at its eval(), the last at the script's exit), and
        the execution text says so; a script whose steps cannot be seen fails saying what was
        seen and how to report them."""
        lane, samples = self.run_script("by_hand.py", BY_HAND, "zero_grad")
        counts, text = self.finished_counts(lane, samples)
        self.assertEqual(counts, (40, 320))
        train = [s for s in samples if s["kind"] == "train"]
        self.assertTrue(all(math.isfinite(s["loss"]) for s in train if s["loss"] is not None))
        self.assertIn(20, [s["step"] for s in train])  # reported at the evaluation, its step counted by then
        counted = [s["flops_per_sample"] for s in samples if s.get("flops_per_sample") is not None]
        self.assertEqual(counted, [BY_HAND_FLOPS])
        self.assertIn("steps: the backward() passes between a module's zero_grad() calls", text)

        lane, samples = self.run_script("by_hand.py", BY_HAND, "none")
        self.assertEqual(samples[-1]["state"], "failed")
        self.assertIn("exited (status 0) without reporting a training step; its backward() ran 50 times, but no "
                      "torch.optim optimizer stepped and no module's zero_grad() reset the gradients",
                      samples[-1]["message"])
        self.assertIn("devicerace.lane().step(samples=..., loss=...)", samples[-1]["message"])

    def test_a_loop_of_several_optimizers_is_counted_over_one_step_of_each(self):
        lane, samples = self.run_script("gan.py", GAN)
        counts, text = self.finished_counts(lane, samples)
        self.assertEqual(counts, (60, 30 * 24))
        counted = [s["flops_per_sample"] for s in samples if s.get("flops_per_sample") is not None]
        self.assertEqual(counted, [GAN_FLOPS])
        self.assertIn("counted by PyTorch's FlopCounterMode over one step of each of its 2 optimizers", text)
        # A loss of the script's own (forward-forward's): no batch seen, no count, and the text says why.
        _, text = self.finished_counts(*self.run_script("own_loss.py", OWN_LOSS))
        self.assertIn("FLOPs not counted: the script's batch is not seen", text)

    def test_trainer_processes_the_script_starts_itself_are_counted_together(self):
        lane, samples = self.run_script("hogwild.py", HOGWILD)
        counts, text = self.finished_counts(lane, samples)
        self.assertEqual(counts, (60, 480))
        self.assertNotIn("refused a report", lane.stderr())
        self.assertIn("2 processes of the script's report steps", text)
        # Each process stamps a report with its own last step's time: the last to arrive may be
        # stamped before the one just read. Its counts still end the lane's.
        _, samples = self.run_script("interleaved.py", INTERLEAVED)
        counts, _ = self.finished_counts(lane, samples)
        self.assertEqual(counts, (60, 480))

    def test_a_lane_key_it_does_not_take_is_refused(self):
        lane = Lane([PYTHON, PROGRAM])
        self.addCleanup(lane.close)
        lane.next()
        lane.send(config([PYTHON, self.script, "1", "x"], lr=0.1))
        m, _ = lane.until(lambda m: m["type"] in ("ready", "error"))
        self.assertEqual(m["type"], "error")
        self.assertIn("does not take an engine key 'lr'", m["message"])


if __name__ == "__main__":
    unittest.main(verbosity=2)

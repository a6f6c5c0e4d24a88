"""The devicerace-cli contract: exit statuses, one-line errors, output files.

Run by ctest as: python3 test_cli.py PATH/TO/devicerace-cli
"""
import csv
import gzip
import json
import math
import os
import re
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import unittest

CLI = None
FASHION = "/usr/share/datasets/fashion-mnist"
# A short real race: a subset of Fashion-MNIST keeps each run to seconds.
SMALL = ["--train-limit", "2000", "--test-limit", "500"]


def quota_cgroup(cores):
    """A fresh cgroup (v1 cpu or v2) allowing `cores` CPUs' time, under this process's own; its
    folder, or None where cgroups cannot be written (not root, read-only, no cpu controller)."""
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v2 = controllers == ""
        if not v2 and "cpu" not in controllers.split(","):
            continue
        for mount in [""] if v2 else ["cpu", "cpu,cpuacct", "cpuacct,cpu"]:
            group = os.path.join("/sys/fs/cgroup", mount, path.lstrip("/"), f"devicerace-test-{os.getpid()}")
            try:
                os.mkdir(group)
            except OSError:
                continue
            try:
                files = ({"cpu.max": f"{int(cores * 100000)} 100000"} if v2 else
                         {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": str(int(cores * 100000))})
                for name, text in files.items():
                    with open(os.path.join(group, name), "w", encoding="utf-8") as f:
                        f.write(text)
                return group
            except OSError:
                os.rmdir(group)
    return None

def run(*args, timeout=300):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write_idx(path, dims, data, gz=True):
    raw = struct.pack(">I", 0x800 | len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)
    if gz:
        with gzip.open(path + ".gz", "wb") as f:
            f.write(raw)
    else:
        with open(path, "wb") as f:
            f.write(raw)


def tiny_dataset(folder, n_train=300, n_test=100):
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = [i % 10 for i in range(n)]
        pixels = []
        for lab in labels:
            pixels += [200 if r // 3 == lab else 10 for r in range(28) for _ in range(28)]
        write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), [n, 28, 28], pixels)
        write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), [n], labels)


class UsageErrors(unittest.TestCase):
    """Bad usage and bad input: exit 2 and one line naming the option or file."""

    def assert_usage_error(self, args, expected):
        r = run(*args)
        self.assertEqual(r.returncode, 2, f"{args}: {r.stdout}{r.stderr}")
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, f"{args}: expected one line, got {r.stderr!r}")
        self.assertIn(expected, lines[0])
        self.assertNotIn("Traceback", r.stderr)
        self.assertNotIn("Exception raised from", r.stderr)  # no c10 backtrace

    def test_bad_lane_values(self):
        cases = [
            ("cpu,batch=0", "batch=0 must be at least 1"),
            ("cpu,batch=-1", "batch=-1 must be at least 1"),
            ("cpu,batch=1e9", "batch=1e9 is not an integer"),
            ("cpu,batch=1000000000", "larger than the 2000 training examples"),
            ("cpu,lr=0", "lr=0 must be a finite number above 0"),
            ("cpu,lr=-1", "lr=-1"),
            ("cpu,lr=nan", "lr=nan"),
            ("cpu,lr=inf", "lr=inf"),
            ("cpu,threads=0", "threads=0 is out of range"),
            ("cpu,threads=10000", "threads=10000"),
            ("tpu", "unknown device 'tpu'"),
            ("cpu,precision=fp64", "precision=fp64"),
        ]
        for lane, expected in cases:
            with self.subTest(lane=lane):
                self.assert_usage_error(["race", "--lane", lane, *SMALL], expected)

    def test_cuda_without_a_device(self):
        r = run("devices", "--json")
        info = json.loads(r.stdout)
        if info["cuda_available"]:
            self.skipTest("this machine has CUDA")
        for lane in ("cuda", "cuda:0", "cuda:7"):
            with self.subTest(lane=lane):
                self.assert_usage_error(["race", "--lane", lane, *SMALL], "CUDA is not available: " + info["cuda_unavailable_reason"])

    def test_bad_race_options(self):
        self.assert_usage_error(["race", "--epochs", "0", *SMALL], "--epochs 0")
        self.assert_usage_error(["race", "--steps", "-3", *SMALL], "--steps -3")
        self.assert_usage_error(["race", "--workload", "nope", *SMALL], "unknown workload 'nope'")
        self.assert_usage_error(["race", "--target-accuracy", "7", *SMALL], "--target-accuracy 7")
        self.assert_usage_error(["race", "--target-loss", "-1", *SMALL], "--target-loss -1")
        self.assert_usage_error(["race", "--data", "maybe"], "--data")
        self.assert_usage_error(["race", "--epochs", "1", "--steps", "5"], "excludes")
        self.assert_usage_error(["frobnicate"], "frobnicate")
        self.assert_usage_error([], "expected a command")
        with tempfile.TemporaryDirectory() as d:
            self.assert_usage_error(["race", "--json", os.path.join(d, "no", "r.json"), *SMALL], "does not exist")

    def test_bad_workload_options(self):
        cases = [
            ("cpu,schedule=linear", "schedule=linear"),
            ("cpu,lstm=gru", "lstm=gru"),
            ("cpu,eval_batch=0", "eval_batch=0"),
            ("cpu,channels_last=maybe", "channels_last=maybe"),
            ("cpu,lstm=cells", "lstm=cells applies to the LSTM workloads"),
            ("cpu,fused=maybe", "fused=maybe"),
            ("cpu,graph=true", "graph=true applies to CUDA lanes"),
            ("cpu,resident=false", "resident= applies to CUDA lanes"),
        ]
        for lane, expected in cases:
            with self.subTest(lane=lane):
                self.assert_usage_error(["race", "--lane", lane, *SMALL], expected)
        self.assert_usage_error(["race", "--workload", "imdb-bilstm", "--data", "real"], "IMDb is not on this machine")
        self.assert_usage_error(["race", "--preset", "nope"], "unknown preset 'nope'")
        self.assert_usage_error(["race", "--preset", "keras-suite", "--lane", "cpu"], "leave out --lane")

    def test_bad_cifar_files(self):
        with tempfile.TemporaryDirectory() as d:
            self.assert_usage_error(["race", "--workload", "cifar-resnet20", "--data-dir", d], "missing data_batch_1.bin")
            for i in range(1, 6):
                with open(os.path.join(d, f"data_batch_{i}.bin"), "wb") as f:
                    f.write(bytes([1] + [0] * 3072) * 4)
            with open(os.path.join(d, "test_batch.bin"), "wb") as f:
                f.write(bytes([255] + [0] * 3072) * 2)
            # 20 training examples: the race is planned from the files' sizes (a batch of 128 would be
            # refused first); the load then checks every record.
            self.assert_usage_error(["race", "--workload", "cifar-resnet20", "--data-dir", d, "--lane", "cpu,batch=4"],
                                    "test_batch.bin: record 0 has label 255")
            self.assert_usage_error(["race", "--workload", "cifar-resnet20", "--data-dir", d],
                                    "batch=128 is larger than the 20 training examples")
            with open(os.path.join(d, "test_batch.bin"), "wb") as f:
                f.write(bytes(5000))
            self.assert_usage_error(["race", "--workload", "cifar-resnet20", "--data-dir", d],
                                    "not a multiple of the 3073-byte CIFAR-10 record")

    def test_bad_data_folders(self):
        with tempfile.TemporaryDirectory() as d:
            self.assert_usage_error(["race", "--data-dir", os.path.join(d, "missing")], "no such folder")
            path = os.path.join(d, "file")
            open(path, "w").close()
            self.assert_usage_error(["race", "--data-dir", path], "is a file, expected a folder")
            self.assert_usage_error(["race", "--data-dir", d], "missing train-images-idx3-ubyte")
            tiny_dataset(d)
            # Truncate one file: the message names it.
            target = os.path.join(d, "t10k-images-idx3-ubyte.gz")
            with open(target, "rb") as f:
                blob = f.read()
            with open(target, "wb") as f:
                f.write(blob[: len(blob) // 2])
            r = run("race", "--data-dir", d)
            self.assertEqual(r.returncode, 2)
            self.assertIn("t10k-images-idx3-ubyte.gz", r.stderr)

    def test_unreadable_folder(self):
        if os.geteuid() == 0:
            self.skipTest("root reads every folder")
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0)
            try:
                self.assert_usage_error(["race", "--data-dir", d], "not readable")
            finally:
                os.chmod(d, 0o700)


class Listings(unittest.TestCase):
    def test_devices_json(self):
        r = run("devices", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        info = json.loads(r.stdout)
        self.assertGreaterEqual(info["cpu"]["physical_cores"], 1)
        self.assertTrue(info["cpu"]["blas"])
        self.assertEqual(info["torch"].split(".")[:2], ["2", "11"])
        self.assertEqual(len(info["gpus"]) > 0 or not info["cuda_available"], True)
        if not info["cuda_available"]:
            self.assertTrue(info["cuda_unavailable_reason"])

    def test_devices_prints_the_peaks_measured_once(self):
        """`devices` prints the CPU's GEMM peaks (fp32, bf16 where the CPU has bf16 units; 1 thread
        and every core), measured on the first call and read from the cache after."""
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", DEVICERACE_CACHE_DIR=cache)
            first = subprocess.run([CLI, "devices"], capture_output=True, text=True, timeout=300, env=env)
            self.assertEqual(first.returncode, 0, first.stderr)
            self.assertRegex(first.stdout, r"peak     cpu fp32: 1 thread [0-9,]+ GFLOP/s")
            if "not kept: other work shared the cores" in first.stdout:
                self.skipTest("other work shared the cores, so nothing was cached: " + first.stdout)
            self.assertIn("kept in " + os.path.join(cache, "peaks.json"), first.stdout)
            info = json.loads(run("devices", "--json").stdout)
            if info["cpu"]["bf16_units"]:
                self.assertRegex(first.stdout, r"bf16: 1 thread [0-9,]+ GFLOP/s")
                # bf16 units slower than the fp32 ones (AVX-512 BF16 without AMX on a Xeon) are named
                # with both figures; faster ones are not.
                figure = lambda p: float(re.search(p + r": 1 thread ([0-9,]+) GFLOP/s", first.stdout)
                                         .group(1).replace(",", ""))
                slower = re.search(r"bf16     slower than fp32 on this CPU: ([0-9,]+) GFLOP/s against fp32's "
                                   r"([0-9,]+) on 1 thread", first.stdout)
                self.assertEqual(bool(slower), figure("bf16") < figure("fp32"), first.stdout)
                if slower:
                    self.assertEqual(float(slower.group(1).replace(",", "")), figure("bf16"))
            self.assertNotIn("peak", run("devices", "--json").stdout)  # the device report's shape is unchanged
            again = subprocess.run([CLI, "devices"], capture_output=True, text=True, timeout=300, env=env)
            self.assertIn("read from " + os.path.join(cache, "peaks.json"), again.stdout)
            peaks = lambda out: [l for l in out.splitlines() if l.startswith("peak     cpu")]
            self.assertEqual(peaks(first.stdout), peaks(again.stdout))

    @unittest.skipUnless(os.path.isdir(FASHION), "Fashion-MNIST not installed")
    def test_devices_names_the_bf16_gemm_routes_a_race_timed(self):
        """Before any bf16 lane, `devices` says the routes are not timed yet; a bf16 fashion-mlp lane
        times each GEMM shape of its step and of its evaluation on every route this CPU has
        (without bf16 units: MKL's bf16 GEMM and fp32 on the bf16 values), keeps the fastest,
        names them in its execution, and `devices` lists how many shapes took each."""
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", DEVICERACE_CACHE_DIR=cache)
            devices = lambda: subprocess.run([CLI, "devices"], capture_output=True, text=True, timeout=300, env=env)
            self.assertIn("bf16     GEMM routes: not timed yet", devices().stdout)
            summary = os.path.join(cache, "race.json")
            r = subprocess.run([CLI, "race", "--workload", "fashion-mlp", "--lane", "cpu,threads=1,precision=bf16",
                                "--steps", "5", *SMALL, "--json", summary], capture_output=True, text=True,
                               timeout=300, env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            execution = json.loads(read(summary))["lanes"][0]["execution"]
            self.assertRegex(execution, r"fused dense step \(bf16 GEMMs with fp32 sums: .* GEMM shape.*\(the "
                             r"fastest timed on this CPU at 1 thread\)")
            with open(os.path.join(cache, "bf16-routes.json"), encoding="utf-8") as f:
                routes = json.load(f)["routes"]
            # 3 layers' training: 3 forward, 2 input-gradient, 3 weight-gradient shapes; the evaluation's
            # passes: its 3 forward shapes
            self.assertEqual(len(routes), 11, sorted(routes))
            listed = re.search(r"bf16     GEMM routes at 1 thread: (.*) \(shapes, the fastest timed here\)",
                               devices().stdout)
            self.assertTrue(listed, devices().stdout)
            counts = [int(n) for n in re.findall(r" (\d+)(?:,|$)", listed.group(1))]
            self.assertEqual(sum(counts), 11, listed.group(1))
            # Each route by the name the lane's execution gives it, with the cache's own count.
            names = {"mkl": "MKL bf16", "onednn": "oneDNN bf16", "amx": "AMX kernel", "avx512": "AVX-512 BF16 kernel",
                     "fp32": "fp32"}
            taken = {}
            for entry in routes.values():
                taken[entry["route"]] = taken.get(entry["route"], 0) + 1
            for key, n in taken.items():
                self.assertIn(f"{names[key]} {n}", listed.group(1))
                self.assertIn(names[key], execution)

    def test_devices_keeps_no_peak_measured_on_a_busy_cpu(self):
        """Other work on every core while `devices` calibrates: the figures say they were measured
        on a busy CPU and nothing is cached, so the next call measures again (a busy 2-core VM once
        cached a 1-thread peak 28% low, and every later race's "% of peak" read high)."""
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(2 * (os.cpu_count() or 1))]
        try:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", DEVICERACE_CACHE_DIR=cache)
                out = subprocess.run([CLI, "devices"], capture_output=True, text=True, timeout=300, env=env)
                kept = os.path.join(cache, "peaks.json")
                entries = {}
                if os.path.exists(kept):
                    with open(kept, encoding="utf-8") as f:
                        entries = json.load(f)["peaks"]
        finally:
            for p in spinners:
                p.kill()
                p.wait()
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"peak     cpu fp32: 1 thread [0-9,]+ GFLOP/s")
        self.assertIn("not kept: other work shared the cores", out.stdout)
        self.assertRegex(out.stdout, r"on a busy CPU \(it got \d+% of \d+ cores?\)")
        self.assertIn("devices --remeasure` when the machine is idle", out.stdout)
        self.assertEqual(entries, {})

    def test_devices_measures_against_the_cpu_quota(self):
        """Under a CPU quota below its threads (a container's --cpus), a calibration gets the
        quota's time: that is this process's ceiling, not other work, so the figure is kept under
        its own key and says so (it used to read "busy" and was never kept)."""
        if len(os.sched_getaffinity(0)) < 2:
            self.skipTest("needs two CPUs for a 2-thread figure above a 1.5-core quota")
        group = quota_cgroup(1.5)
        if group is None:
            self.skipTest("no writable cpu cgroup here")
        try:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", DEVICERACE_CACHE_DIR=cache)
                procs = os.path.join(group, "cgroup.procs")

                def enter():
                    with open(procs, "w", encoding="utf-8") as f:
                        f.write(str(os.getpid()))

                out = subprocess.run([CLI, "devices"], capture_output=True, text=True, timeout=300, env=env,
                                     preexec_fn=enter)
                keys = []
                if os.path.exists(os.path.join(cache, "peaks.json")):  # not kept when other work shared the CPUs
                    with open(os.path.join(cache, "peaks.json"), encoding="utf-8") as f:
                        keys = sorted(json.load(f)["peaks"])
        finally:
            os.rmdir(group)
        self.assertEqual(out.returncode, 0, out.stderr)
        if "busy CPU" in out.stdout:
            self.skipTest("other work shared the CPUs: " + out.stdout)
        self.assertIn("2 threads measured on the 1.5 cores this process may use (CPU quota or affinity): "
                      "this process's ceiling, not the CPU's", out.stdout)
        self.assertTrue(any("|2 threads on 1.5 cores|" in k for k in keys), keys)
        self.assertTrue(any("|1 threads|" in k for k in keys), keys)

    def test_the_first_race_without_lanes(self):
        """No --lane: the engine's first race (the window opens with it); --live and --workload adjust it."""
        if json.loads(run("devices", "--json").stdout)["cuda_available"]:
            self.skipTest("this machine has CUDA: the first race is cpu·1 vs cuda:0")
        plan = json.loads(run("race", "--plan").stdout)
        self.assertEqual(plan["workload"], "fashion-cnn")
        self.assertTrue(plan["fair"])
        self.assertEqual(len(plan["lanes"]), 2)
        self.assertTrue(all(l["device"] == "cpu" and l["total_steps"] == 240 for l in plan["lanes"]), plan["lanes"])
        self.assertFalse(json.loads(run("race", "--plan", "--live").stdout)["fair"])
        mlp = json.loads(run("race", "--plan", "--workload", "fashion-mlp").stdout)
        self.assertEqual(mlp["workload"], "fashion-mlp")
        self.assertTrue(mlp["fair"])
        self.assertIn("exclude", run("race", "--plan", "--fair", "--live").stderr)
        # The note says what runs: the given workload on the first race's lanes, live where --live
        # asked, and nothing beside an error.
        r = run("race", "--workload", "fashion-mlp", "--steps", "2", "--train-limit", "256", "--test-limit", "64")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("note: no --lane given: fashion-mlp on the first race's lanes, cpu,threads=1 against "
                      "cpu,threads=", r.stdout)
        self.assertIn("(fair mode)", r.stdout)
        self.assertNotIn("fashion-cnn", r.stdout)
        r = run("race", "--workload", "fashion-mlp", "--steps", "2", "--train-limit", "256", "--test-limit", "64",
                "--live")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("note: no --lane given: fashion-mlp on the first race's lanes", r.stdout)
        self.assertNotIn("(fair mode)", r.stdout.splitlines()[0])
        r = run("race", "--workload", "no-such-workload")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown workload 'no-such-workload'", r.stderr)
        self.assertNotIn("note:", r.stdout)

    def test_one_device_report_shape(self):
        """`devices --json`, a worker's hello and a recording's manifest describe a machine alike."""
        info = json.loads(run("devices", "--json").stdout)
        with tempfile.TemporaryDirectory() as tmp:
            rec = os.path.join(tmp, "rec")
            r = run("race", *SMALL, "--steps", "3", "--quiet", "--record", rec,
                    "--lane", "cpu,threads=1,isolate=process,name=worker")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(rec, "manifest.json")) as f:
                manifest = json.load(f)
        self.assertEqual(manifest["format"], 2)
        for machine in (manifest["machine"], manifest["lanes"][0]["machine"]):
            self.assertEqual(set(machine), set(info))
            self.assertEqual(set(machine["cpu"]), set(info["cpu"]))
            self.assertEqual(machine["cpu"]["model"], info["cpu"]["model"])
            self.assertEqual(machine["torch"], info["torch"])

    def test_presets(self):
        r = run("presets", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        names = {p["name"] for p in json.loads(r.stdout)}
        self.assertTrue({"resnet32-cpu-vs-gpu", "keras-suite", "cpu-thread-scaling", "fused-vs-cells-lstm",
                         "synthetic-vs-real", "davidnet-batch-and-decay", "keras-backends",
                         "framework-vs-framework", "gpt-cpu-vs-gpu"} <= names)
        # --plan with a preset: each race's plan, the options applied, nothing trained.
        r = run("race", "--preset", "fused-vs-cells-lstm", "--plan", "--steps", "3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        planned = json.loads(r.stdout)
        self.assertEqual(planned["preset"], "fused-vs-cells-lstm")
        self.assertEqual([l["name"] for l in planned["races"][0]["lanes"]], ["fused", "cells"])
        self.assertTrue(all(l["total_steps"] == 3 for l in planned["races"][0]["lanes"]), planned)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "p.json")
            r = run("race", "--preset", "fused-vs-cells-lstm", "--steps", "2", "--train-limit", "64",
                    "--test-limit", "16", "--json", out, "--quiet")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            result = json.loads(read(out))
            self.assertEqual(result["preset"], "fused-vs-cells-lstm")
            lanes = result["races"][0]["lanes"]
            self.assertEqual([l["name"] for l in lanes], ["fused", "cells"])
            self.assertTrue(all(l["status"] == "finished" for l in lanes))
            self.assertTrue(result["races"][0]["dataset"]["synthetic"])

    def test_workloads_json(self):
        r = run("workloads", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        by_name = {w["name"]: w for w in json.loads(r.stdout)}
        # Parameter counts of the Keras networks.
        self.assertEqual(by_name["fashion-mlp"]["parameters"], 669_706)
        self.assertEqual(by_name["fashion-cnn"]["parameters"], 1_199_882)
        self.assertEqual(by_name["fashion-mlp"]["batch"], 128)
        self.assertEqual(len(by_name), 13)
        self.assertEqual(by_name["imagenet-resnet50"]["parameters"], 25_557_032)
        # nanoGPT's CPU config at a 65-character alphabet; its 6-layer config (test_char_gpt.cpp).
        self.assertEqual(by_name["char-gpt"]["parameters"], 809_856)
        self.assertEqual(by_name["char-gpt"]["tokens_per_sample"], 64)
        self.assertEqual(by_name["char-gpt"]["target_loss"], 2.2)  # a language model races to a validation loss
        self.assertIsNone(by_name["fashion-mlp"]["target_loss"])
        self.assertEqual(by_name["char-gpt-6l"]["parameters"], 10_770_816)
        self.assertIsNone(by_name["fashion-mlp"]["tokens_per_sample"])

    @unittest.skipUnless(os.path.isdir("/usr/share/games/fortunes"), "no fortunes corpus (Debian package fortunes)")
    def test_char_gpt_race_prints_tokens_validation_loss_and_text(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            # A thread lane, one in a worker process, a data-parallel lane of two ranks, and the
            # same network in plain PyTorch (framework=pytorch: the engine's text reader in Python).
            r = run("race", "--workload", "char-gpt", "--lane", "cpu,threads=1", "--lane", "cpu,threads=2",
                    "--lane", "cpu,threads=1,isolate=process,name=proc", "--lane", "cpu,workers=2,threads=1,name=dp",
                    "--lane", "cpu,threads=1,framework=pytorch,name=pt",
                    "--fair", "--steps", "16", "--warmup-steps", "2", "--train-limit", "240", "--test-limit", "24",
                    "--target-loss", "4.5", "--json", out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("tokens/s", r.stdout)
            self.assertIn("val loss", r.stdout)
            self.assertIn("target validation loss 4.50", r.stdout)
            self.assertIn("t→≤4.50", r.stdout)
            for lane in ("cpu·1", "cpu·2", "proc", "dp", "pt"):
                # Every evaluation: the lane's text on one line.
                lines = [l for l in r.stdout.splitlines() if l.startswith(lane) and " writes: " in l]
                self.assertTrue(lines, r.stdout)
                self.assertGreaterEqual(len(lines[-1].split(" writes: ", 1)[1]), 120)
            summary = json.loads(read(out))
            self.assertEqual(summary["tokens_per_sample"], 64)
            for lane in summary["lanes"]:
                self.assertAlmostEqual(lane["tokens_per_sec"], lane["samples_per_sec"] * 64, delta=1e-6)
                self.assertGreater(lane["final_test_loss"], 0)
                # ln(113) = 4.73 at the start; every lane is below 4.5 at its one evaluation.
                self.assertLess(lane["final_test_loss"], 4.5)
                self.assertIsNotNone(lane["time_to_target_seconds"], lane["name"])
                # in every lane kind: one network, one FLOP count (the PyTorch lane's from
                # the engine's count of the same network), a peak and a utilisation each.
                self.assertIsNotNone(lane["utilization"], lane["name"])
                self.assertIsNotNone(lane["peak_source"], lane["name"])
            flops = {l["name"]: l["flops_per_sample"] for l in summary["lanes"]}
            self.assertEqual(len(set(flops.values())), 1, flops)
            lanes = {l["name"]: l for l in summary["lanes"]}
            self.assertIn("× 2 ranks", lanes["dp"]["peak_source"])
            self.assertTrue(lanes["dp"]["energy_source"].startswith("not measured for data-parallel lanes"))
            self.assertEqual(lanes["pt"]["energy_source"], "not measured for framework lanes")
            self.assertIsNotNone(lanes["proc"]["step_breakdown"])  # through the worker protocol


@unittest.skipUnless(os.path.isdir(FASHION), "Fashion-MNIST not installed")
class RealRaces(unittest.TestCase):
    def test_long_lane_names_keep_the_tables_aligned(self):
        """A name wider than the lane column (a framework lane's, a user's own) widens the column in
        the live lines and in every table, so each column starts at one place."""
        r = run("race", "--workload", "fashion-mlp", "--steps", "3", "--train-limit", "512", "--test-limit", "64",
                "--lane", "cpu,threads=1", "--lane", "cpu,threads=1,name=the·slowest·lane·of·the·race")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        width = len("the·slowest·lane·of·the·race")  # the widest name, in characters
        tables = [i for i, l in enumerate(lines) if l.startswith("lane ")]
        self.assertGreaterEqual(len(tables), 2, r.stdout)  # the summary and the explanation
        for i in tables:
            self.assertEqual(lines[i][:width + 1], "lane".ljust(width + 1), lines[i])
            for row, name in zip(lines[i + 1:i + 3], ("cpu·1", "the·slowest·lane·of·the·race")):
                self.assertEqual(row[:width + 1], name.ljust(width + 1), f"{lines[i]!r}\n{row!r}")
                self.assertNotEqual(row[width + 1:width + 2], "", row)
        events = [l for l in lines if " eval  step" in l]
        self.assertEqual(len({l.index(" eval  step") for l in events}), 1, events)

    def test_two_lanes_write_every_output(self):
        with tempfile.TemporaryDirectory() as d:
            out = {k: os.path.join(d, f"r.{k}") for k in ("json", "csv", "jsonl")}
            r = run("race", "--workload", "fashion-mlp", "--lane", "cpu,threads=1", "--lane", "cpu,threads=1,name=twin",
                    "--epochs", "2", *SMALL, "--json", out["json"], "--csv", out["csv"], "--jsonl", out["jsonl"])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            summary = json.loads(read(out["json"]))
            self.assertEqual(summary["workload"], "fashion-mlp")
            self.assertEqual(summary["dataset"], {"name": "Fashion-MNIST", "synthetic": False})
            names = [l["name"] for l in summary["lanes"]]
            self.assertEqual(names, ["cpu·1", "twin"])
            for lane in summary["lanes"]:
                for key in ("name", "device", "threads", "batch", "status", "error", "steps", "samples",
                            "wall_seconds", "samples_per_sec", "steps_per_sec", "final_test_accuracy",
                            "time_to_target_seconds", "peak_memory_bytes", "execution"):
                    self.assertIn(key, lane)
                self.assertEqual(lane["status"], "finished")
                # How the lane trained: the fast paths it used (the fused dense step and one-pass
                # RMSprop on the CPU).
                self.assertIn("fused dense step, one-pass RMSprop", lane["execution"])
                self.assertEqual(lane["samples"], 4000)
                self.assertGreater(lane["final_test_accuracy"], 0.6)
                # The median interval rate describes the same run as samples / measured time: the
                # same units, the same order. Only that: a machine loaded for part of the race
                # (another suite beside this one, a sanitizer) moves the median away from the mean
                # by more than a quarter (0.256 seen under ASan beside another test run).
                mean = lane["measured_samples"] / lane["measured_seconds"]
                self.assertLess(abs(math.log(lane["samples_per_sec"] / mean)), math.log(2))
            self.assertEqual(summary["speedup"]["cpu·1"], 1.0)
            rows = list(csv.DictReader(read(out["csv"]).splitlines()))
            self.assertTrue(any(r["kind"] == "eval" for r in rows))
            self.assertEqual({r["lane"] for r in rows}, {"cpu·1", "twin"})
            measured = [r for r in rows if r["kind"] == "train" and r["warmup"] == "0"]
            self.assertTrue(measured and all(r["forward_s"] and r["backward_s"] and r["lr"] for r in measured), measured[:2])
            events = [json.loads(line) for line in read(out["jsonl"]).splitlines()]
            self.assertEqual(len(events), len(rows))
            finals = [e for e in events if e["kind"] == "state" and e["state"] == "finished"]
            self.assertEqual(len(finals), 2)
            # Both lanes share one seed and one thread count: identical trajectories.
            evals = {}
            for e in events:
                if e["kind"] == "eval":
                    evals.setdefault(e["lane"], []).append(e["loss"])
            self.assertEqual(evals["cpu·1"], evals["twin"])

    def test_the_race_explains_itself(self):
        """achieved FLOP/s and % of peak, where a step's time goes, input-bound lanes,
        energy or why none, in the table and the JSON."""
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            r = run("race", "--workload", "fashion-mlp", "--lane", "cpu,threads=1,name=slow,fault=slow-data",
                    "--lane", "cpu,threads=1,name=plain", "--fair", "--steps", "80", *SMALL, "--json", out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("where a step's time goes", r.stdout)
            lines = {l.split()[0]: l for l in r.stdout.splitlines() if l.startswith(("slow ", "plain "))}
            why = [l for l in r.stdout.splitlines() if "backward" in l]
            self.assertEqual(len(why), 2, r.stdout)
            self.assertIn("input-bound (", next(l for l in why if l.startswith("slow")))
            self.assertNotIn("input-bound", next(l for l in why if l.startswith("plain")))
            self.assertRegex(r.stdout, r"peak of plain: [0-9.]+ GFLOP/s \(measured")
            self.assertRegex(r.stdout, r"energy( of \S+)?: ")
            summary = json.loads(read(out))
            lanes = {l["name"]: l for l in summary["lanes"]}
            self.assertTrue(lanes["slow"]["input_bound"])
            self.assertGreater(lanes["slow"]["data_share"], 0.2)
            self.assertFalse(lanes["plain"]["input_bound"])
            for lane in lanes.values():
                # 784-512-512-10: 2·(784·512 + 512·512 + 512·10) forward, twice that backward less
                # the first layer's input gradient.
                self.assertEqual(lane["flops_per_sample"], 3209216)
                self.assertGreater(lane["utilization"], 0)
                self.assertLess(lane["utilization"], 1.5)
                self.assertAlmostEqual(lane["achieved_flops_per_sec"],
                                       lane["flops_per_sample"] * lane["samples_per_sec"], delta=1)
                step = sum(lane["step_breakdown"].values())
                self.assertLess(abs(math.log(step * lane["steps_per_sec"])), math.log(1.1), lane["step_breakdown"])
                self.assertEqual(lane["lr"], 0.001)
                if lane["energy_joules"] is None:
                    self.assertTrue(lane["energy_source"].startswith(("not measurable here", "not attributable")))
                else:
                    self.assertGreater(lane["samples_per_joule"], 0)

    def test_repeat_gives_every_summary_and_a_spread(self):
        """--repeat 3: three fresh races, medians and spreads, a recording per repeat."""
        with tempfile.TemporaryDirectory() as d:
            out, rec = os.path.join(d, "r.json"), os.path.join(d, "rec")
            r = run("race", "--workload", "fashion-mlp", "--lane", "cpu,threads=1", "--lane", "cpu,threads=1,name=twin",
                    "--fair", "--steps", "40", *SMALL, "--repeat", "3", "--quiet", "--json", out, "--record", rec)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(r.stdout.count("— repeat "), 3)
            self.assertIn("3 repeats of the race", r.stdout)
            self.assertRegex(r.stdout, r"twin .* [0-9.]+× ± [0-9.]+ \(N = 3\)")
            summary = json.loads(read(out))
            self.assertEqual(len(summary["repeats"]), 3)
            spread = summary["speedup_spread"]["twin"]
            self.assertEqual(spread["n"], 3)
            self.assertLessEqual(spread["min"], spread["median"])
            self.assertLessEqual(spread["median"], spread["max"])
            rates = sorted(x["lanes"][1]["samples_per_sec"] for x in summary["repeats"])
            self.assertAlmostEqual(summary["lanes"][1]["samples_per_sec"], rates[1])  # the median repeat's
            self.assertEqual(summary["lane_spread"]["cpu·1"]["samples_per_sec"]["n"], 3)
            for k in (1, 2, 3):  # every repeat recorded, each one replayable
                replay = run("replay", os.path.join(rec, f"repeat-{k}"))
                self.assertEqual(replay.returncode, 0, replay.stderr)
            # The whole set replays as the spread the race printed, line for line.
            whole = run("replay", rec)
            self.assertEqual(whole.returncode, 0, whole.stderr)
            self.assertEqual(whole.stdout.count(os.path.join(rec, "repeat-")), 3)
            table = lambda text: text[text.index("3 repeats of the race"):].strip()
            self.assertEqual(table(whole.stdout), table(r.stdout))
            bad = run("race", "--workload", "fashion-mlp", "--steps", "5", "--repeat", "2", "--csv", os.path.join(d, "x.csv"))
            self.assertEqual(bad.returncode, 2)
            self.assertIn("--csv and --jsonl hold one race", bad.stderr)

    def test_a_replay_prints_the_why_lines_of_the_race(self):
        # A recorded CPU race rewritten so its first lane ran at 1,000 samples/s and its second, made
        # a GPU, at 400: the replay says why the GPU lane is slower, as a race does ("why: ..."),
        # from the recording alone.
        with tempfile.TemporaryDirectory() as d:
            rec = os.path.join(d, "rec")
            r = run("race", "--lane", "cpu,threads=1", "--lane", "cpu,threads=1,name=b", "--steps", "30", *SMALL,
                    "--record", rec, "--quiet")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            manifest_path = os.path.join(rec, "manifest.json")
            manifest = json.loads(read(manifest_path))
            manifest["lanes"][1]["device"], manifest["lanes"][1]["spec"] = "cuda:0", "cuda:0,name=b"
            with open(manifest_path, "w", encoding="utf-8") as f:
                json.dump(manifest, f)
            for entry, rate in zip(manifest["lanes"], (1000.0, 400.0)):
                path = os.path.join(rec, entry["file"])
                samples = [json.loads(line) for line in read(path).splitlines() if line]
                for sample in samples:
                    if sample.get("samples_per_sec"):
                        sample["samples_per_sec"] = rate
                with open(path, "w", encoding="utf-8") as f:
                    f.write("".join(json.dumps(sample) + "\n" for sample in samples))
            r = run("replay", rec)
            self.assertEqual(r.returncode, 0, r.stderr)
            why = [line for line in r.stdout.splitlines() if line.startswith("why: ")]
            self.assertEqual(len(why), 1, r.stdout)
            self.assertTrue(why[0].startswith("why: b runs at 0.40× the speed of cpu·1: "), why[0])
            self.assertIn("too small to keep the GPU busy", why[0])

    def test_a_lane_that_never_left_its_warmup_says_why_it_has_no_speed(self):
        # 5 steps against the 20 of the warm-up: no speed, and the race and its replay say why; a
        # recording without the warm-up's length (written before manifests kept it) says it too.
        with tempfile.TemporaryDirectory() as d:
            rec = os.path.join(d, "rec")
            r = run("race", "--lane", "cpu,threads=1", "--lane", "cpu,threads=1,name=b", "--steps", "5", *SMALL,
                    "--record", rec)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            line = ("why: cpu·1 and b have no speed: their 5 steps were all warm-up, which is left out of the "
                    "speed (the first 20 steps of a lane: --warmup-steps); race more steps, or lower --warmup-steps.")
            self.assertIn(line, r.stdout.splitlines())
            replayed = run("replay", rec)
            self.assertEqual(replayed.returncode, 0, replayed.stderr)
            self.assertIn(line, replayed.stdout.splitlines())
            manifest_path = os.path.join(rec, "manifest.json")
            manifest = json.loads(read(manifest_path))
            self.assertEqual(manifest.pop("warmup_steps"), 20)
            with open(manifest_path, "w", encoding="utf-8") as f:
                json.dump(manifest, f)
            older = run("replay", rec)
            why = [w for w in older.stdout.splitlines() if w.startswith("why: ")]
            self.assertEqual(len(why), 2, older.stdout)
            self.assertRegex(why[0], r"^why: cpu·1 has no speed: its 5 steps took [0-9.]+ m?s, and every interval "
                                     r"they were timed in began in the warm-up")

    def test_record_replay_export(self):
        with tempfile.TemporaryDirectory() as d:
            rec = os.path.join(d, "rec")
            live_json = os.path.join(d, "live.json")
            r = run("race", "--lane", "cpu,threads=1", "--lane", "cpu,threads=1,name=b,cost=3", "--steps", "40",
                    "--eval-every", "20", *SMALL, "--record", rec, "--json", live_json, "--quiet")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            manifest = json.loads(read(os.path.join(rec, "manifest.json")))
            self.assertEqual(manifest["format"], 2)
            self.assertEqual([l["name"] for l in manifest["lanes"]], ["cpu·1", "b"])
            r = run("replay", rec)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("cpu·1", r.stdout)
            out = {k: os.path.join(d, f"x.{k}") for k in ("json", "csv", "tsv")}
            tb = os.path.join(d, "tb")
            r = run("export", rec, "--json", out["json"], "--csv", out["csv"], "--tensorboard", tb,
                    "--dawnbench", out["tsv"])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            live, replayed = json.loads(read(live_json)), json.loads(read(out["json"]))
            for a, b in zip(live["lanes"], replayed["lanes"]):
                for key in ("name", "steps", "samples", "final_test_accuracy", "samples_per_sec", "status",
                            "step_breakdown", "flops_per_sample", "peak_flops_per_sec", "utilization", "lr"):
                    self.assertEqual(a[key], b[key], key)
                self.assertIsNotNone(a["utilization"])
            self.assertTrue(read(out["tsv"]).startswith("epoch\thours\ttop1Accuracy"))
            # Every file written is named; the second lane's DAWNBench TSV with its lane.
            for path in (out["json"], out["csv"], f"{out['tsv']} (cpu·1)", f"{out['tsv']}.lane-2 (b)"):
                self.assertIn(f"wrote {path}\n", r.stdout)
            self.assertTrue(read(out["tsv"] + ".lane-2").startswith("epoch\thours\ttop1Accuracy"))
            # TensorBoard's own reader accepts the event files.
            try:
                from tensorboard.backend.event_processing import event_file_loader
            except ImportError:
                self.skipTest("tensorboard is not installed here")
            lane_dir = os.path.join(tb, "b")
            (events_file,) = os.listdir(lane_dir)
            tags = {}
            for event in event_file_loader.EventFileLoader(os.path.join(lane_dir, events_file)).Load():
                for value in event.summary.value:
                    tags.setdefault(value.tag, []).append((event.step, value))
            self.assertIn("throughput/samples_per_sec", tags)
            self.assertIn("loss/train", tags)
            # the step's phases, the share of the peak, the learning rate.
            for tag in ("step_ms/forward", "step_ms/backward", "step_ms/data", "utilization/of_peak", "train/lr"):
                self.assertIn(tag, tags)
            # Evaluations at each epoch end (16 steps of 128 in 2,000) and every 20 steps.
            self.assertEqual([step for step, _ in tags["accuracy/test"]], [16, 20, 32, 40])
            # A recording with a lane file cut mid-line still replays.
            lane0 = os.path.join(rec, "lane-0.jsonl")
            data = read(lane0)
            with open(lane0, "w", encoding="utf-8") as f:
                f.write(data[: len(data) - 10])
            r = run("replay", rec)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("cut off", r.stdout)
            r = run("replay", os.path.join(d, "nothing-here"))
            self.assertEqual(r.returncode, 2)

    def test_a_failing_recording_stops_alone(self):
        # The disk fills mid-race (here a file-size limit: writes past it fail with EFBIG): the
        # recording stops with a warning that says why, the race runs to its end and reports, and
        # what was written before still replays.
        if os.environ.get("DEVICERACE_SANITIZER"):
            # Under the limit TSan's own runtime dies (SIGBUS, status 66); not tried with ASan.
            self.skipTest("a sanitizer runtime does not bear a 4 KiB file-size limit")
        limit = 4096

        def small_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal that kills
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        with tempfile.TemporaryDirectory() as d:
            rec = os.path.join(d, "rec")
            r = subprocess.run([CLI, "race", "--lane", "cpu,threads=1", "--steps", "120", "--eval-every", "40", *SMALL,
                                "--record", rec, "--quiet"], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"), preexec_fn=small_files,
                               restore_signals=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(f"{rec}: recording write failed: File too large (recording stopped; the race goes on)",
                          r.stderr)
            self.assertRegex(r.stdout, r"cpu·1 .* finished")
            self.assertLessEqual(os.path.getsize(os.path.join(rec, "lane-0.jsonl")), limit)
            r = run("replay", rec)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("lane-0.jsonl: the last line is cut off", r.stdout)
            self.assertRegex(r.stdout, r"cpu·1 .* stopped")  # not "running": the recording ends there

    def test_divergence_exits_1(self):
        r = run("race", "--lane", "cpu,lr=1e6", "--steps", "50", *SMALL, "--quiet")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("diverged at step", r.stdout)

    def test_the_openmp_wait_fits_the_race(self):
        """OMP_WAIT_POLICY unset: lanes that run alone keep libgomp's spinning default (2 threads:
        ~1.35x), live lanes sharing the cores get PASSIVE (the CLI starts again with it set); the
        user's value always wins. The plan says which and why; the summary says what ran."""
        def plan(*args):
            return json.loads(run("race", "--plan", "--workload", "fashion-mlp", *args).stdout)
        self.assertEqual(plan("--fair", "--lane", "cpu,threads=1", "--lane", "cpu,threads=2")["omp_wait"], "spin")
        self.assertEqual(plan("--lane", "cpu,threads=2")["omp_wait"], "spin")
        live = plan("--live", "--lane", "cpu,threads=1", "--lane", "cpu,threads=2")
        self.assertEqual(live["omp_wait"], "passive")
        self.assertIn("share the cores", live["omp_wait_reason"])
        ranks = plan("--fair", "--lane", "cpu,workers=2,threads=1", "--lane", "cpu,threads=1")
        self.assertEqual(ranks["omp_wait"], "passive")
        self.assertIn("2 processes", ranks["omp_wait_reason"])
        # Where DeviceRace made this process passive (the window): the 2-thread lane of a race
        # that spins runs in a process of its own; the user's PASSIVE (above) moves nothing.
        self.assertEqual([l["kind"] for l in plan("--fair", "--lane", "cpu,threads=1", "--lane", "cpu,threads=2")
                          ["lanes"]], ["thread", "thread"])
        window = json.loads(subprocess.run(
            [CLI, "race", "--plan", "--workload", "fashion-mlp", "--fair", "--lane", "cpu,threads=1", "--lane",
             "cpu,threads=2"], capture_output=True, text=True, timeout=300,
            env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", DEVICERACE_OMP_WAIT="passive")).stdout)
        self.assertEqual([l["kind"] for l in window["lanes"]], ["thread", "process"])
        self.assertIn("cpu·2 runs in a process of its own", window["omp_wait_reason"])

        def ran(env_policy, *args):
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            if env_policy:
                env["OMP_WAIT_POLICY"] = env_policy
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "s.json")
                r = subprocess.run([CLI, "race", "--workload", "fashion-mlp", "--steps", "3", "--quiet", "--json", out,
                                    *SMALL, *args], capture_output=True, text=True, timeout=300, env=env)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertEqual(r.stdout.count("fashion-mlp ·"), 1, r.stdout)  # the header once: no echo of a restart
                return json.loads(read(out))["omp_wait_policy"]
        two = ["--lane", "cpu,threads=1", "--lane", "cpu,threads=1"]
        self.assertEqual(ran(None, "--live", *two), "PASSIVE")
        self.assertEqual(ran(None, "--fair", *two), "default")
        self.assertEqual(ran("ACTIVE", "--live", *two), "ACTIVE")

    def test_two_thread_dense_lanes_report_their_threads_speeds(self):
        # fashion-mlp's fused step shares each step between the lane's threads by their measured
        # speed; each lane reports those speeds (the fastest 1), a worker process's too.
        with tempfile.TemporaryDirectory() as d:
            out, events = os.path.join(d, "r.json"), os.path.join(d, "r.jsonl")
            r = run("race", "--workload", "fashion-mlp", "--fair", "--steps", "60", "--warmup-steps", "10",
                    "--eval-every", "0", "--lane", "cpu,threads=2", "--lane", "cpu,threads=2,isolate=process,name=proc",
                    "--lane", "cpu,threads=1", *SMALL, "--json", out, "--jsonl", events, "--quiet")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            lanes = {l["name"]: l for l in json.loads(read(out))["lanes"]}
            for name in ("cpu·2", "proc"):
                speeds = lanes[name]["thread_speeds"]
                self.assertEqual(len(speeds), 2, lanes[name])
                self.assertAlmostEqual(max(speeds), 1.0, places=6)
                self.assertGreater(min(speeds), 0.0)
                self.assertIn("in shares that follow each thread's measured speed", lanes[name]["execution"])
            self.assertIsNone(lanes["cpu·1"]["thread_speeds"])
            train = [json.loads(l) for l in read(events).splitlines() if '"kind": "train"' in l or '"kind":"train"' in l]
            self.assertTrue(any(len(e.get("thread_speeds", [])) == 2 for e in train if e["lane"] == "proc"))

    def test_a_busy_process_beside_the_race_is_measured_and_reported(self):
        # While another process keeps a CPU busy, each lane reads it from /proc/stat (less its own
        # process's CPU time): a thread lane and a worker-process lane alike, in the samples, the
        # JSON summary and the printed explanation.
        if len(os.sched_getaffinity(0)) < 2:
            self.skipTest("one CPU: the busy process and the lane would share it")
        with tempfile.TemporaryDirectory() as d:
            out, events = os.path.join(d, "r.json"), os.path.join(d, "r.jsonl")
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                r = run("race", "--workload", "fashion-mlp", "--fair", "--steps", "300", "--warmup-steps", "10",
                        "--eval-every", "0", "--lane", "cpu,threads=1",
                        "--lane", "cpu,threads=1,isolate=process,name=proc", *SMALL, "--json", out, "--jsonl", events)
            finally:
                busy.kill()
                busy.wait()
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("the rest of the machine while each lane trained (/proc/stat): cpu·1 ", r.stdout)
            lanes = {l["name"]: l for l in json.loads(read(out))["lanes"]}
            for name in ("cpu·1", "proc"):
                # About one CPU; the ticks' coarseness and the machine's own background blur it.
                self.assertGreaterEqual(lanes[name]["other_cpus"], 0.6, lanes[name])
                self.assertTrue(0.0 <= lanes[name]["steal"] <= 1.0, lanes[name])
            train = [json.loads(l) for l in read(events).splitlines() if '"train"' in l]
            # An interval too short for /proc/stat to tick (an epoch's one-step end) carries none.
            measured = [e for e in train if "other_cpus" in e and "steal" in e]
            self.assertGreater(len(measured), len(train) // 2, train)

    def test_fair_mode_and_synthetic(self):
        r = run("race", "--workload", "fashion-cnn", "--data", "synthetic", "--fair", "--steps", "4",
                "--lane", "cpu,threads=1,batch=16", "--lane", "cpu,threads=2,batch=16", *SMALL)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("fair", r.stdout)
        self.assertIn("synthetic", r.stdout)


if __name__ == "__main__":
    CLI = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)

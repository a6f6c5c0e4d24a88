"""lanes/python/keras_lane.py (framework=keras-jax, keras-tensorflow, keras-torch) driven over the
worker protocol as DeviceRace drives it, and raced through devicerace-cli beside a DeviceRace lane.

Run as: .venv/bin/python tests/lanes/test_keras_lane.py [CLASS ...]   (KerasJaxTest,
KerasTensorFlowTest, KerasTorchTest, KerasMissingTest, KerasCliRaceTest; all by default).
A backend that is not installed skips its tests, saying so (scripts/setup --frameworks
installs them). The CLI race needs DEVICERACE_CLI (the built devicerace-cli).
"""
import json
import os
import stat
import statistics
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lane_harness import (FASHION, LANES, PYTHON, TYPES, Lane, assert_rate_integrity, engine_config, engine_fields,  # noqa: E402
                          assert_step_breakdown, check_sample, dw)

LANE = os.path.join(LANES, "keras_lane.py")
CLI = os.environ.get("DEVICERACE_CLI", "")
MLP_PARAMETERS = engine_fields("fashion-mlp")["expected_parameters"]  # the engine's count
MODULES = {"jax": ("keras", "jax", "jaxlib"), "tensorflow": ("keras", "tensorflow"), "torch": ("keras", "torch")}
# Seconds a Keras lane may take to answer (importing TensorFlow or torch on a busy 2-core machine).
PATIENCE = 120


def missing(backend, python=PYTHON):
    """The modules the backend needs that `python` lacks (asked of that interpreter)."""
    code = ("import importlib.util, sys; "
            f"print(' '.join(m for m in {MODULES[backend]!r} if importlib.util.find_spec(m) is None))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    return r.stdout.strip() if r.returncode == 0 else f"({python} failed: {r.stderr.strip()[-200:]})"


def config(backend, **over):
    return engine_config({"workload": "fashion-mlp",
                          "lane": f"cpu,threads=1,batch=64,name=keras,framework=keras-{backend}",
                          "lane_fields": {"device": "cpu", "threads": 1, "batch": 64, "name": "keras",
                                          "framework": f"keras-{backend}"},
                          "data": "real", "data_dir": "",
                          "train_limit": 6400, "test_limit": 500, "epochs": None, "steps": 300, "target": None, "seed": 0,
                          "eval_every": 0, "warmup": 20, "report_interval": 0.1, "fail_at_step": 0}, over)


class KerasBackendTest:
    """The tests every backend passes (a mixin: BACKEND is set by the classes below)."""
    BACKEND = None

    def setUp(self):
        lacking = missing(self.BACKEND)
        if lacking:
            self.skipTest(f"keras-{self.BACKEND} is not installed ({lacking} missing): scripts/setup --frameworks")

    def start(self, env=None):
        lane = Lane([PYTHON, LANE, "--backend", self.BACKEND], env=env)
        self.addCleanup(lane.close)
        m = lane.next(PATIENCE)
        self.assertIsNotNone(m, lane.stderr())
        self.assertEqual(m["type"], "hello", m)
        self.assertEqual(m["proto"], dw.PROTO)
        self.assertRegex(m["version"], rf"^keras 3\.\d+\.\d+ on {self.BACKEND} \d")
        self.assertEqual(m["devices"]["backend"], self.BACKEND)
        self.assertGreaterEqual(m["devices"]["cpu"]["logical_cpus"], 1)
        return lane

    def configure(self, lane, **over):
        lane.send(config(self.BACKEND, **over))
        ready = lane.next(PATIENCE)
        self.assertEqual(ready["type"], "ready", f"{ready}; stderr: {lane.stderr()[-1500:]}")
        return ready

    def run_to_bye(self, lane):
        lane.send({"type": "start", "id": 1})
        bye, seen = lane.until(lambda m: m["type"] == "bye", PATIENCE)
        self.assertEqual(bye["reason"], "finished", lane.stderr()[-1500:])
        self.assertEqual(lane.wait(PATIENCE), 0, lane.stderr()[-1500:])
        return [m["sample"] for m in seen if m["type"] == "sample"], seen

    def test_trains_with_a_falling_loss(self):
        """300 steps of fashion-mlp: schema, report points, evaluations, a falling loss, exit 0."""
        lane = self.start()
        ready = self.configure(lane)
        self.assertEqual((ready["batch"], ready["total_steps"], ready["threads"]), (64, 300, 1))
        self.assertEqual(ready["dataset"], {"name": "Fashion-MNIST", "source": FASHION, "synthetic": False,
                                            "train": 6400, "test": 500, "note": ""})
        samples, seen = self.run_to_bye(lane)
        for line in lane.raw:
            self.assertIn(json.loads(line)["type"], TYPES)
        for s in samples:
            check_sample(self, s)
            self.assertEqual(s["lane"], "keras")
        executions = [m["text"] for m in seen if m["type"] == "execution"]
        self.assertEqual(len(executions), 1)
        self.assertIn(f"Keras 3", executions[0])
        self.assertIn(self.BACKEND, executions[0])
        states = [s["state"] for s in samples if s["kind"] == "state"]
        self.assertEqual(states[:2], ["preparing", "running"])
        self.assertEqual(states[-1], "finished")
        train = [s for s in samples if s["kind"] == "train"]
        self.assertEqual(train[-1]["step"], 300)
        self.assertEqual(train[-1]["samples"], 300 * 64)
        self.assertTrue(any(s["step"] == 20 and s["warmup"] for s in train), "no report at the warm-up step")
        # The loss falls: the first reports' mean loss against the last ones'.
        first = statistics.mean(s["loss"] for s in train[:3])
        last = statistics.mean(s["loss"] for s in train[-3:])
        self.assertLess(last, 0.6 * first, f"loss {first:.3f} -> {last:.3f}")
        evals = [s for s in samples if s["kind"] == "eval"]
        self.assertEqual([s["step"] for s in evals], [100, 200, 300])  # each epoch end (6,400 / 64)
        # Where its step time goes: the host's batch assembly and the compiled step, one step in 8.
        breakdowns = assert_step_breakdown(self, samples, ("data", "compute"))
        self.assertTrue(all(b["compute"] > b["data"] for b in breakdowns), breakdowns)
        self.assertGreater(evals[-1]["accuracy"], 0.7)

    def test_rate_integrity(self):
        """Its samples/s is within 3% of samples / wall time of the measured steps, seen from here."""
        lane = self.start()
        # One epoch (60,000 examples) is longer than the run (57,600): no evaluation before the last step.
        self.configure(lane, train_limit=None, test_limit=100, steps=900)
        self.run_to_bye(lane)
        reported, observed = assert_rate_integrity(self, lane)
        print(f"\nkeras-{self.BACKEND}: reported {reported:.0f} samples/s, observed {observed:.0f}", file=sys.stderr)

    def test_parameter_count_mismatch(self):
        lane = self.start()
        lane.send(config(self.BACKEND, expected_parameters=12345))
        m = lane.next(PATIENCE)
        self.assertEqual((m["type"], m["phase"]), ("error", "config"), m)
        self.assertIn("669,706", m["message"])
        self.assertIn("12,345", m["message"])
        self.assertEqual(lane.wait(PATIENCE), 2)


class KerasJaxTest(KerasBackendTest, unittest.TestCase):
    BACKEND = "jax"

    def test_other_workloads(self):
        """The CNN, ResNet-20 and both LSTMs build with the engine's parameter counts and train (the
        LSTMs with Keras' one bias vector per gate: 512 fewer parameters, said in the execution
        text); ResNet-50 v1.5 builds with torchvision's 25,557,032 parameters."""
        for workload, parameters, data in (("fashion-cnn", 1199882, "real"), ("cifar-resnet20", 269722, "real"),
                                           ("charlstm", 105020, "synthetic"), ("imdb-bilstm", 2659457, "synthetic")):
            lane = self.start()
            ready = self.configure(lane, workload=workload, expected_parameters=parameters, steps=3, warmup=1,
                                   train_limit=192, test_limit=64, data=data)
            self.assertEqual(ready["total_steps"], 3)
            samples, seen = self.run_to_bye(lane)
            self.assertEqual([s["step"] for s in samples if s["kind"] == "eval"], [3])
            if "lstm" in workload:
                text = [m["text"] for m in seen if m["type"] == "execution"][0]
                self.assertIn("one bias vector per gate", text)
        # char-gpt on the real text: nanoGPT's network in Keras layers with the engine's parameter count
        # (at the nominal 65 characters), next-character loss and accuracy, and the text it writes.
        if os.path.isdir("/usr/share/games/fortunes"):
            lane = self.start()
            ready = self.configure(lane, workload="char-gpt", expected_parameters=809856, steps=3, warmup=1,
                                   train_limit=192, test_limit=24, data="real")
            self.assertTrue(ready["dataset"]["name"].startswith("text: "), ready)
            samples, _ = self.run_to_bye(lane)
            evals = [s for s in samples if s["kind"] == "eval"]
            self.assertEqual([s["step"] for s in evals], [3])
            self.assertEqual(len(evals[0]["text"]), 120)
            self.assertLess(evals[0]["loss"], 6.0)  # ln(113) = 4.73 at random; a few steps do not blow it up
            self.assertGreater(evals[0]["accuracy"], 0.0)
        # An LSTM whose count differs by anything but the merged biases is still refused.
        lane = self.start()
        lane.send(config(self.BACKEND, workload="charlstm", expected_parameters=105021, data="synthetic"))
        m = lane.next(PATIENCE)
        self.assertEqual((m["type"], m["phase"]), ("error", "config"), m)
        self.assertEqual(lane.wait(PATIENCE), 2)
        lane = self.start()
        lane.send(config(self.BACKEND, workload="imagenet-resnet50", expected_parameters=25557032, data="synthetic",
                         lane_fields={"device": "cpu", "threads": 1, "batch": 2, "name": "keras",
                                      "framework": "keras-jax"}, steps=1, test_limit=4))
        ready = lane.next(PATIENCE)
        self.assertEqual(ready["type"], "ready", f"{ready}; stderr: {lane.stderr()[-1500:]}")
        self.assertEqual(ready["batch"], 2)


class KerasTensorFlowTest(KerasBackendTest, unittest.TestCase):
    BACKEND = "tensorflow"


class KerasTorchTest(KerasBackendTest, unittest.TestCase):
    BACKEND = "torch"


def python_without_site_packages(folder):
    """A python that runs this interpreter without its site-packages (so without keras)."""
    path = os.path.join(folder, "python-no-site")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexec {PYTHON} -S \"$@\"\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class KerasMissingTest(unittest.TestCase):
    def test_refusal_names_the_setup_command(self):
        """Without keras: hello at once, then the config is refused naming scripts/setup --frameworks, exit 2."""
        with tempfile.TemporaryDirectory() as d:
            python = python_without_site_packages(d)
            self.assertEqual(missing("jax", python), "keras jax jaxlib")
            lane = Lane([python, LANE, "--backend", "jax"])
            self.addCleanup(lane.close)
            hello = lane.next()
            self.assertEqual(hello["type"], "hello", hello)
            self.assertIn("not installed", hello["version"])
            lane.send(config("jax"))
            m = lane.next()
            self.assertEqual((m["type"], m["phase"]), ("error", "config"), m)
            self.assertIn("framework=keras-jax", m["message"])
            self.assertIn("scripts/setup --frameworks", m["message"])
            self.assertIn("keras", m["message"])
            self.assertEqual(lane.wait(), 2)


@unittest.skipUnless(CLI, "DEVICERACE_CLI (the built devicerace-cli) is not set")
class KerasCliRaceTest(unittest.TestCase):
    def cli(self, *args, env=None):
        return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600,
                              env=dict(env or os.environ, OMP_WAIT_POLICY="PASSIVE", QT_QPA_PLATFORM="offscreen"))

    def test_devicerace_and_keras_jax(self):
        """A DeviceRace lane and a keras-jax lane race fashion-mlp; both finish with figures; Keras' loss falls."""
        lacking = missing("jax")
        if lacking:
            self.skipTest(f"keras-jax is not installed ({lacking} missing): scripts/setup --frameworks")
        with tempfile.TemporaryDirectory() as d:
            summary, samples = os.path.join(d, "race.json"), os.path.join(d, "samples.jsonl")
            r = self.cli("race", "--workload", "fashion-mlp", "--lane", "cpu,threads=1,name=dr",
                         "--lane", "cpu,threads=1,framework=keras-jax,name=kjax", "--steps", "300",
                         "--train-limit", "6400", "--test-limit", "500", "--quiet", "--json", summary,
                         "--jsonl", samples)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(summary) as f:
                result = json.load(f)
            lanes = {lane["name"]: lane for lane in result["lanes"]}
            self.assertEqual(set(lanes), {"dr", "kjax"})
            for lane in lanes.values():
                self.assertEqual(lane["status"], "finished", lane)
                self.assertEqual(lane["steps"], 300)
                self.assertGreater(lane["samples_per_sec"], 0)
                self.assertGreater(lane["final_test_accuracy"], 0.7)
            self.assertEqual(lanes["kjax"]["kind"], "external")
            self.assertIn("jax", lanes["kjax"]["execution"])
            # The summary's ratio to the DeviceRace lane (the first) is the two lanes' samples/s.
            self.assertAlmostEqual(result["speedup"]["kjax"],
                                   lanes["kjax"]["samples_per_sec"] / lanes["dr"]["samples_per_sec"], places=6)
            self.assertIn("kjax", r.stdout)
            with open(samples) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            losses = [s["loss"] for s in rows if s.get("lane") == "kjax" and s.get("kind") == "train"]
            self.assertGreater(len(losses), 6)
            self.assertLess(statistics.mean(losses[-3:]), 0.6 * statistics.mean(losses[:3]))

    def test_missing_framework_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, DEVICERACE_PYTHON=python_without_site_packages(d))
            r = self.cli("race", "--workload", "fashion-mlp", "--lane", "cpu,threads=1",
                         "--lane", "cpu,threads=1,framework=keras-tensorflow", "--steps", "5",
                         "--train-limit", "640", "--test-limit", "64", "--quiet", env=env)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("framework=keras-tensorflow", r.stderr)
            self.assertIn("scripts/setup --frameworks", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)

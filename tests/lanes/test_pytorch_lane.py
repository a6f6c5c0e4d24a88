"""lanes/python/pytorch_lane.py driven over the worker protocol exactly as DeviceRace drives it
(hello -> config -> ready -> start -> samples -> bye), through a subprocess and pipes.

Run as: .venv/bin/python tests/lanes/test_pytorch_lane.py   (about a minute on 2 CPU cores)
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lane_harness import (FASHION, LANES, PYTHON, TYPES, Lane, assert_rate_integrity, engine_config, engine_fields,  # noqa: E402
                          assert_step_breakdown, check_sample, dw)
import lane_common as lc  # noqa: E402  (lanes/python, on the path through lane_harness)

LANE = os.path.join(LANES, "pytorch_lane.py")
MLP_PARAMETERS = engine_fields("fashion-mlp")["expected_parameters"]  # the engine's count

# The test for a print() from the model code: the lane with its MLP's forward printing (through
# print() and straight to fd 1, as C code would), started like the real one.
PRINTING_LANE = """
import os, sys
sys.path.insert(0, {lanes!r})
import pytorch_lane as pl
load = pl.load_framework
def patched():
    load()
    forward = pl.tn.MnistMlp.forward
    def noisy(self, x):
        print("PRINT FROM MODEL")
        os.write(1, b"RAW WRITE TO FD 1\\n")
        return forward(self, x)
    pl.tn.MnistMlp.forward = noisy
pl.load_framework = patched
pl.dw.finish(pl.main(sys.argv[1:]))
"""


def config(**over):
    return engine_config({"workload": "fashion-mlp",
                          "lane": "cpu,threads=1,batch=64,name=torch,framework=pytorch",
                          "lane_fields": {"device": "cpu", "threads": 1, "batch": 64, "name": "torch", "framework": "pytorch"},
                          "data": "real", "data_dir": "",
                          "train_limit": 2000, "test_limit": 500, "epochs": None, "steps": 60, "target": None, "seed": 0,
                          "eval_every": 0, "warmup": 5, "report_interval": 0.1, "fail_at_step": 0}, over)


class PyTorchLaneTest(unittest.TestCase):
    def start(self, argv=None, **kw):
        lane = Lane(argv or [PYTHON, LANE], **kw)
        self.addCleanup(lane.close)
        return lane

    def hello(self, lane):
        m = lane.next()
        self.assertIsNotNone(m, lane.stderr())
        self.assertEqual(m["type"], "hello")
        return m

    def test_race(self):
        """A whole run: every line a message, samples with the schema, learning, exit 0."""
        lane = self.start()
        hello = self.hello(lane)
        self.assertEqual(hello["proto"], dw.PROTO)
        self.assertTrue(hello["version"].startswith("pytorch 2."), hello["version"])
        self.assertEqual(hello["pid"], lane.p.pid)
        self.assertIsInstance(hello["host"], str)
        d = hello["devices"]
        self.assertIsInstance(d["cpu"]["model"], str)
        self.assertGreaterEqual(d["cpu"]["physical_cores"], 1)
        self.assertGreaterEqual(d["cpu"]["logical_cpus"], d["cpu"]["physical_cores"])
        self.assertIsInstance(d["cuda_available"], bool)
        self.assertIsInstance(d["cuda_unavailable_reason"], str)
        for g in d["gpus"]:
            self.assertIsInstance(g["index"], int)
            self.assertIsInstance(g["name"], str)
            self.assertIsInstance(g["total_memory_bytes"], int)
            self.assertRegex(g["compute"], r"^\d+\.\d+$")
        # Noise the lane must ignore: not JSON, not a message, a line over 64 KiB, an unknown type.
        lane.send_raw(b"hello there\n[1,2]\n{\"no\":\"type\"}\n" + b"{\"type\":\"stop\",\"pad\":\"" + b"x" * 70000
                      + b"\"}\n")
        lane.send({"type": "what-is-this", "id": 7})
        self.assertEqual(lane.next(), {"type": "ack", "id": 7})
        # Engine keys it ignores ride along in the lane fields, as DeviceRace sends them.
        lane.send(config(lane_fields={"device": "cpu", "threads": 1, "batch": 64, "name": "torch",
                                      "framework": "pytorch", "fused": True, "graph": False, "resident": True,
                                      "cost": 0.5, "isolate": "process"}))
        ready = lane.next()
        self.assertEqual(ready["type"], "ready", ready)
        self.assertEqual(ready["batch"], 64)
        self.assertEqual(ready["total_steps"], 60)
        self.assertEqual(ready["threads"], 1)
        self.assertEqual(ready["dataset"], {"name": "Fashion-MNIST", "source": FASHION, "synthetic": False,
                                            "train": 2000, "test": 500, "note": ""})
        lane.send({"type": "start", "id": 1})
        self.assertEqual(lane.next(), {"type": "ack", "id": 1})
        lane.send({"type": "ping", "id": 3})
        bye, seen = lane.until(lambda m: m["type"] == "bye")
        self.assertEqual(bye["reason"], "finished")
        self.assertEqual(lane.wait(), 0, lane.stderr())
        for line in lane.raw:
            self.assertIn(json.loads(line)["type"], TYPES)
        self.assertIn({"type": "ack", "id": 3}, seen)
        self.assertTrue(any(json.loads(line)["type"] == "hb" for line in lane.raw), "no heartbeat")
        hbs = [json.loads(line) for line in lane.raw if b'"hb"' in line]
        self.assertTrue(all(isinstance(h.get("cpu", 0.0), float) for h in hbs))

        samples = [m["sample"] for m in seen if m["type"] == "sample"]
        for s in samples:
            check_sample(self, s)
            self.assertEqual(s["lane"], "torch")
        states = [s["state"] for s in samples if s["kind"] == "state"]
        self.assertEqual(states[:2], ["preparing", "running"])
        self.assertEqual(states[-1], "finished")
        self.assertNotIn("failed", states)
        executions = [m for m in seen if m["type"] == "execution"]
        self.assertEqual(len(executions), 1)
        self.assertIn("PyTorch", executions[0]["text"])
        steps = [s["step"] for s in samples]
        self.assertEqual(steps, sorted(steps))
        times = [s["t"] for s in samples]
        self.assertEqual(times, sorted(times))
        train = [s for s in samples if s["kind"] == "train"]
        self.assertEqual(train[-1]["step"], 60)
        self.assertEqual(train[-1]["samples"], 2000 + 28 * 64)  # an epoch is 31 full batches and one of 16
        self.assertTrue(any(s["step"] == 5 and s["warmup"] for s in train), "no report at the warm-up step")
        self.assertFalse(train[-1]["warmup"])
        self.assertTrue(all(s["loss"] is not None and s["loss"] > 0 for s in train))
        evals = [s for s in samples if s["kind"] == "eval"]
        self.assertEqual([s["step"] for s in evals], [32, 60])  # the epoch end and the last step
        self.assertAlmostEqual(evals[0]["epoch"], 1.0)
        self.assertGreater(evals[-1]["accuracy"], 0.5)
        final = samples[-1]
        self.assertEqual((final["kind"], final["state"], final["step"]), ("state", "finished", 60))
        # Where its step time goes, as the engine's lanes say it: every CPU step timed.
        breakdowns = assert_step_breakdown(self, samples, ("data", "forward", "backward", "optimizer"))
        self.assertTrue(all(b["backward"] > 0 and b["forward"] > 0 for b in breakdowns))

    def test_rate_integrity(self):
        """Its samples/s is within 3% of samples / wall time of the measured steps, seen from here."""
        lane = self.start()
        self.hello(lane)
        # One epoch (60,000 examples) is longer than the run: no evaluation before the last step.
        lane.send(config(train_limit=None, test_limit=100, steps=400, warmup=20))
        self.assertEqual(lane.next()["type"], "ready")
        lane.send({"type": "start"})
        bye, _ = lane.until(lambda m: m["type"] == "bye")
        self.assertEqual(bye["reason"], "finished")
        assert_rate_integrity(self, lane)

    def test_pause_stop_and_prints(self):
        """Pause, resume, stop mid-run: state stopped, exit 0; the model's prints reach stderr only."""
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(PRINTING_LANE.format(lanes=LANES))
        self.addCleanup(os.unlink, f.name)
        lane = self.start(argv=[PYTHON, f.name])
        self.hello(lane)
        lane.send(config(steps=100000, data=None, warmup=0))
        self.assertEqual(lane.next()["type"], "ready")
        lane.send({"type": "start", "id": 1})
        lane.until(lambda m: m["type"] == "sample" and m["sample"]["kind"] == "train" and m["sample"]["step"] >= 3)
        lane.send({"type": "pause"})
        paused, _ = lane.until(lambda m: m["type"] == "sample" and m["sample"]["kind"] == "state")
        self.assertEqual(paused["sample"]["state"], "paused")
        time.sleep(0.5)
        lane.send({"type": "resume"})
        running, between = lane.until(lambda m: m["type"] == "sample" and m["sample"]["kind"] == "state")
        self.assertEqual(running["sample"]["state"], "running")
        self.assertEqual([m for m in between if m["type"] == "sample"], [running])  # nothing trained while paused
        # The paused time is off the lane clock.
        self.assertLess(running["sample"]["t"] - paused["sample"]["t"], 0.4)
        lane.until(lambda m: m["type"] == "sample" and m["sample"]["kind"] == "train")
        lane.send({"type": "stop", "id": 2})
        bye, seen = lane.until(lambda m: m["type"] == "bye")
        self.assertIn({"type": "ack", "id": 2}, seen)
        self.assertEqual(bye["reason"], "stopped")
        final = [m["sample"] for m in seen if m["type"] == "sample"][-1]
        check_sample(self, final)
        self.assertEqual(final["state"], "stopped")
        self.assertEqual(final["message"], f"stopped at step {final['step']}")
        self.assertGreater(final["step"], 3)
        self.assertEqual(lane.wait(), 0, lane.stderr())
        for line in lane.raw:
            self.assertIn(json.loads(line)["type"], TYPES)
        self.assertIn("PRINT FROM MODEL", lane.stderr())
        self.assertIn("RAW WRITE TO FD 1", lane.stderr())

    def test_sigterm_mid_run(self):
        """DeviceRace's escalation after a stop: SIGTERM ends the lane as stopped, exit 0."""
        lane = self.start()
        self.hello(lane)
        lane.send(config(steps=100000, warmup=0))
        self.assertEqual(lane.next()["type"], "ready")
        lane.send({"type": "start", "id": 1})
        lane.until(lambda m: m["type"] == "sample" and m["sample"]["kind"] == "train")
        lane.p.send_signal(signal.SIGTERM)
        bye, seen = lane.until(lambda m: m["type"] == "bye")
        self.assertEqual(bye["reason"], "stopped")
        final = [m["sample"] for m in seen if m["type"] == "sample"][-1]
        self.assertEqual((final["state"], final["message"]), ("stopped", f"stopped at step {final['step']}"))
        self.assertEqual(lane.wait(), 0, lane.stderr())
        self.assertIn("signal 15", lane.stderr())

    def test_input_ends_before_start(self):
        """Synthetic data, another workload; stdin's end before start: exit 0 at once, no bye."""
        lane = self.start()
        self.hello(lane)
        lane.send(config(workload="fashion-cnn", data="synthetic", train_limit=None, test_limit=100,
                         expected_parameters=1199882, epochs=2, steps=None))
        ready = lane.next()
        self.assertEqual(ready["type"], "ready", ready)
        self.assertEqual(ready["batch"], 64)
        self.assertEqual(ready["total_steps"], 2 * 938)  # 60,000 synthetic examples, 938 batches an epoch
        self.assertEqual(ready["dataset"], {"name": "synthetic (1x28x28)", "source": "synthetic", "synthetic": True,
                                            "train": 60000, "test": 100, "note": ""})
        t0 = time.monotonic()
        lane.p.stdin.close()
        self.assertIsNone(lane.next(timeout=10))  # nothing more: never started, so no samples, no bye
        self.assertEqual(lane.wait(10), 0, lane.stderr())
        self.assertLess(time.monotonic() - t0, 3)

    def test_bad_lane_key(self):
        lane = self.start()
        self.hello(lane)
        lane.send(config(lane_fields={"device": "cpu", "threads": 1, "bogus": 3}))
        m = lane.next()
        self.assertEqual((m["type"], m["phase"]), ("error", "config"), m)
        self.assertIn("'bogus'", m["message"])
        self.assertNotIn("\n", m["message"])
        self.assertIsNone(lane.next())
        self.assertEqual(lane.wait(), 2)
        # An engine key it does not implement (augment=crop-flip) is refused, named, not ignored.
        lane = self.start()
        self.hello(lane)
        lane.send(config(lane_fields={"device": "cpu", "threads": 1, "augment": "crop-flip"}))
        m = lane.next()
        self.assertEqual((m["type"], m["phase"]), ("error", "config"), m)
        self.assertIn("does not take an engine key 'augment'", m["message"])
        self.assertEqual(lane.wait(), 2)

    def test_parameter_count_mismatch(self):
        lane = self.start()
        self.hello(lane)
        lane.send(config(expected_parameters=12345))
        m = lane.next()
        self.assertEqual(m["type"], "error", m)
        self.assertIn("669,706", m["message"])
        self.assertIn("12,345", m["message"])
        self.assertEqual(lane.wait(), 2)

    def test_other_protocol(self):
        lane = self.start(proto="2")
        m = self.hello(lane)
        self.assertEqual(m["proto"], dw.PROTO)
        self.assertEqual(lane.wait(), 3)
        self.assertIn("protocol 2", lane.stderr())


class MachineLoadTest(unittest.TestCase):
    """The framework lanes' reading of the rest of the machine (devicerace_worker.MachineLoad),
    the same as the engine's (tests/engine/test_machine_load.cpp)."""

    def test_proc_stat_columns(self):
        text = ("cpu  4719271 14855 478527 3895093 31142 0 6435 28917 0 0\n"
                "cpu0 2251143 8202 203746 2099003 7883 0 2202 14635 0 0\n"
                "cpu1 2468128 6653 274781 1796090 23259 0 4233 14281 0 0\nctxt 99\n")
        busy = 4719271 + 14855 + 478527 + 0 + 6435
        self.assertEqual(dw.MachineLoad.parse(text), (busy, 28917, busy + 3895093 + 31142 + 28917, 2))
        self.assertIsNone(dw.MachineLoad.parse("cpu  1 2 3 4 5 6 7\n"))
        self.assertIsNone(dw.MachineLoad.parse(""))
        missing = dw.MachineLoad("/nonexistent/proc/stat")
        self.assertEqual(missing.cpus, 0)
        self.assertIsNone(missing.read())
        self.assertIsNone(missing.read())

    @unittest.skipUnless(os.path.exists("/proc/stat"), "no /proc/stat here")
    def test_a_busy_process_is_other_load(self):
        if len(os.sched_getaffinity(0)) < 2:
            self.skipTest("one CPU: the busy process would share it with this one")
        load = dw.MachineLoad()
        self.assertGreater(load.cpus, 0)
        self.assertIsNone(load.read())  # the count starts
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(1.0)
            other, steal = load.read()
        finally:
            busy.kill()
            busy.wait()
        # About one CPU; the ticks' coarseness and the machine's background blur it.
        self.assertGreaterEqual(other, 0.6)
        self.assertTrue(0.0 <= steal <= 1.0)


class LaneSpecTest(unittest.TestCase):
    """The framework-neutral reading of the lane fields (no process, no torch)."""

    def fields(self, **f):
        c = dw.parse_config(config(lane_fields=f))
        return dw.lane_fields(c, ("name", "threads", "batch", "lr", "precision", "data", "fault"),
                              ("framework", "fused"), "the PyTorch lane")

    def test_spec(self):
        self.assertEqual(self.fields(device="cuda:1", threads=2, batch=32, lr=0.01, precision="bf16", fused=True,
                                     fault={"kind": "throw", "step": 3}),
                         {"device": "cuda:1", "threads": 2, "batch": 32, "lr": 0.01, "precision": "bf16",
                          "fault": {"kind": "throw", "step": 3}})
        # An integer where a number goes is a number (JSON writes 1.0 as 1).
        self.assertEqual(self.fields(device="cpu", lr=1)["lr"], 1.0)
        for bad in ({"device": ""}, {"device": "tpu"}, {"device": "cuda:x"}, {"device": "ssh://box/cpu"},
                    {"device": "cpu", "threads": "2"}, {"device": "cpu", "threads": True},
                    {"device": "cpu", "lr": "0.1"}, {"device": "cpu", "fused": 1}, {"device": "cpu", "wd": 0.1},
                    {"device": "cpu", "fault": "throw:3"}, {"device": "cpu", "fault": {"step": 3}},
                    {"device": "cpu", "fault": {"kind": "throw", "step": -1}}):
            with self.assertRaises(dw.LaneRefused, msg=bad):
                self.fields(**bad)
        # The fault as the lanes read it: step 0 fires before training, unset is step 1.
        self.assertEqual(lc.parse_fault({"kind": "throw", "step": 0}), ("throw", 0))
        self.assertEqual(lc.parse_fault({"kind": "abort", "rank": 1}), ("abort", 1))
        self.assertEqual(lc.parse_fault(None), (None, 0))

    def test_config_without_lane_fields_is_refused_with_the_reason(self):
        c = config()
        del c["lane_fields"]
        with self.assertRaises(dw.LaneRefused) as e:
            dw.parse_config(c)
        self.assertIn("protocol 1.1", str(e.exception))

    def test_config(self):
        c = dw.parse_config(config())
        self.assertEqual((c["steps"], c["warmup"], c["report_interval"], c["data_dir"]), (60, 5, 0.1, ""))
        for bad in ({"proto": "2.0"}, {"steps": 0}, {"report_interval": 0.001}, {"data": "fake"},
                    {"workload": None}, {"seed": "x"}):
            with self.assertRaises(dw.LaneRefused, msg=str(bad)):
                dw.parse_config(config(**bad))

    def test_messages(self):
        self.assertIsNone(dw.parse_message(b'{"type":"x","a":' + b"[" * 100 + b"]" * 100 + b"}"))
        self.assertIsNotNone(dw.parse_message(b'{"type":"x","a":' + b"[" * 10 + b"]" * 10 + b"}"))
        self.assertIsNone(dw.parse_message(b'{"type": 3}'))
        self.assertEqual(dw.parse_message(b'{"type":"ping"}'), {"type": "ping"})
        self.assertEqual(dw.encode_message({"a": float("nan"), "b": [float("inf")]}), b'{"a":null,"b":[null]}\n')
        s = dw.LineSplitter(10)
        self.assertEqual(s.feed(b"abc\ndef"), [b"abc"])
        self.assertEqual(s.feed(b"ghijklmnopq\nxy\r\n"), [b"xy"])
        self.assertEqual(s.dropped, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)

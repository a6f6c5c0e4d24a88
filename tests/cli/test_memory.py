"""Out of memory: a CPU lane whose batch cannot fit fails alone with its step, batch and a batch
to try, instead of the kernel's OOM killer ending the whole program; the other lanes finish.

The host allocator's guard (engine/src/kernels/host_allocator.cpp) refuses a block the machine
cannot give (MemAvailable minus a headroom) or that passes DEVICERACE_HOST_MEMORY_LIMIT.

Run by ctest as: python3 test_memory.py PATH/TO/devicerace-cli
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_worker_lanes import env  # noqa: E402

CLI = None


def race(args, **extra):
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "s.json")
        r = subprocess.run([CLI, "race", "--quiet", "--json", summary, *args], capture_output=True, text=True,
                           env=env(**extra), timeout=600)
        with open(summary) as f:
            return r, {l["name"]: l for l in json.load(f)["lanes"]}


class OutOfMemory(unittest.TestCase):
    def test_a_batch_the_machine_cannot_hold_fails_alone(self):
        # ResNet-50 at batch 16,384: its synthetic pool alone (8 batches of 3x224x224 floats, 79 GB)
        # is more than this machine has; a thread lane and a process lane ask for it.
        r, lanes = race(["--workload", "imagenet-resnet50", "--data", "synthetic", "--steps", "2",
                         "--test-limit", "4", "--eval-every", "0",
                         "--lane", "cpu,threads=1,batch=16384,name=huge",
                         "--lane", "cpu,threads=1,batch=16384,isolate=process,name=huge-process",
                         "--lane", "cpu,threads=1,batch=2,name=small"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(lanes["small"]["status"], "finished", lanes["small"])
        for name in ("huge", "huge-process"):
            lane = lanes[name]
            self.assertEqual(lane["status"], "failed", lane)
            self.assertRegex(lane["error"], r"out of memory (while loading its data|at step \d+) \(batch 16384\)")
            hint = re.search(r"try batch ≤ (\d+)", lane["error"])
            self.assertIsNotNone(hint, lane["error"])
            self.assertLess(int(hint.group(1)), 16384)

    def test_the_memory_cap_fails_a_step_with_its_number(self):
        # fashion-cnn at batch 20,000: the first convolution's output (1.7 GB) passes a 1 GiB cap.
        r, lanes = race(["--workload", "fashion-cnn", "--steps", "3", "--train-limit", "20000", "--test-limit", "100",
                         "--lane", "cpu,threads=1,batch=20000,name=big",
                         "--lane", "cpu,threads=1,batch=32,name=small"],
                        DEVICERACE_HOST_MEMORY_LIMIT="1G")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(lanes["small"]["status"], "finished", lanes["small"])
        self.assertEqual(lanes["big"]["status"], "failed")
        self.assertIn("out of memory at step 1 (batch 20000)", lanes["big"]["error"])
        self.assertIn("DEVICERACE_HOST_MEMORY_LIMIT", lanes["big"]["error"])
        self.assertRegex(lanes["big"]["error"], r"try batch ≤ \d+")


if __name__ == "__main__":
    CLI = os.path.abspath(sys.argv.pop(1))
    unittest.main()

#!/usr/bin/env python3
"""A minimal program speaking DeviceRace's worker protocol (docs/EVENTS.md), for tests of
cmd= lanes: it "trains" by counting, reports 5 train samples, one evaluation and finishes.
Usage: protocol_speaker.py --proto 1 [--print-garbage]"""
import json
import os
import sys
import time

out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


def send(**msg):
    out.write(json.dumps(msg) + "\n")
    out.flush()


send(type="hello", proto="1.0", version="protocol-speaker 1",
     devices={"cpu": {"model": "counting", "physical_cores": 1, "logical_cpus": 1}, "gpus": [],
              "cuda_available": False})
config = json.loads(sys.stdin.readline())
name = next((kv.split("=", 1)[1] for kv in config["lane"].split(",") if kv.startswith("name=")), "speaker")
send(type="ready", batch=32, total_steps=5, threads=1,
     dataset={"name": "counting", "source": "none", "synthetic": True, "train": 160, "test": 10})
assert json.loads(sys.stdin.readline())["type"] == "start"
print("this print goes to stderr, not the protocol")
t0 = time.time()
for step in range(1, 6):
    time.sleep(0.05)
    send(type="sample", sample={"kind": "train", "lane": name, "step": step, "samples": 32 * step,
                                "epoch": step / 5, "t": time.time() - t0, "wall_time": time.time(),
                                "loss": 1.0 / step, "accuracy": 0.5, "samples_per_sec": 640.0,
                                "steps_per_sec": 20.0, "interval_s": 0.05, "warmup": step == 1})
send(type="sample", sample={"kind": "eval", "lane": name, "step": 5, "samples": 160, "epoch": 1.0,
                            "t": time.time() - t0, "loss": 0.2, "accuracy": 0.9})
send(type="sample", sample={"kind": "state", "lane": name, "step": 5, "samples": 160, "t": time.time() - t0,
                            "state": "finished", "message": ""})
send(type="bye", reason="finished")

#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/): a few small valid
inputs and a few broken ones per parser. The output is committed; rerun after changing it.
Usage: tests/fuzz/make_seeds.py"""
import gzip
import json
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = HERE / "corpus"


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


def gz(data):
    return gzip.compress(data, mtime=0)


# --- IDX ---------------------------------------------------------------------------------
labels = struct.pack(">II", 0x801, 5) + bytes([0, 1, 2, 9, 4])
images = struct.pack(">IIII", 0x803, 2, 4, 4) + bytes(range(32))
write("idx", "labels-valid", labels)
write("idx", "images-valid", images)
write("idx", "labels-valid.gz", gz(labels))
write("idx", "images-valid.gz", gz(images))
write("idx", "images-truncated", images[:-3])
write("idx", "images-trailing", images + b"\0")
write("idx", "images-truncated.gz", gz(images)[:-10])
write("idx", "wrong-magic", struct.pack(">II", 0x802, 1) + b"\0")
write("idx", "zero-dim", struct.pack(">IIII", 0x803, 0, 28, 28))
write("idx", "huge-dims", struct.pack(">IIII", 0x803, 0xFFFFFFFF, 28, 28))
write("idx", "three-bytes", b"\0\0\x08")

# --- CIFAR-10 binary ---------------------------------------------------------------------
record = bytes([3]) + bytes(i % 256 for i in range(3072))
write("cifar", "one-record", record)
write("cifar", "two-records", record + bytes([9]) + bytes(3072))
write("cifar", "label-10", bytes([10]) + bytes(3072))
write("cifar", "truncated", record[:-1])
write("cifar", "label-only", bytes([1]))

# --- text corpus -------------------------------------------------------------------------
fortune = ("The best way to predict the future is to invent it.\n\t-- Alan Kay\n%\n"
           "Ünïcödé ist auch Text — ça va? 東京 🚀\n%\n")
write("text", "fortunes-short", fortune * 2)
write("text", "fortunes-long", fortune * 8)
write("text", "invalid-utf8", b"abc\xff\xfedef" * 30)
write("text", "cut-multibyte", ("x" * 100).encode() + "é".encode()[:1])
write("text", "overlong", b"\xc0\xaf" * 50)

# --- recording manifest ------------------------------------------------------------------
manifest = {
    "format": 1, "app_version": "0.1.0", "workload": "fashion-mlp",
    "dataset": {"name": "Fashion-MNIST", "synthetic": False}, "mode": "fair",
    "target_accuracy": 0.8, "started_at": "2024-05-01T10:00:00Z",
    "device": {"cpu": "AMD EPYC", "blas": "MKL", "gpus": "", "torch": "2.11.0", "cuda": "", "cudnn": "", "host": "box"},
    "lanes": [
        {"name": "a", "file": "lane-0.jsonl", "spec": "cpu,threads=2,batch=64,name=a", "device": "cpu",
         "kind": "thread", "host": "", "machine": "", "cost_per_hour": 0.5, "total_steps": 10, "batch": 64},
        {"name": "b", "file": "lane-1.jsonl", "spec": "cuda:0-1,workers=2,name=b", "device": "cuda:0",
         "kind": "parallel", "host": "", "machine": "", "cost_per_hour": None, "total_steps": 5, "batch": 32},
    ],
}
write("manifest", "valid.json", json.dumps(manifest, indent=1))
write("manifest", "format-2.json", json.dumps({**manifest, "format": 2}))  # format 2 without its machine
# Format 2: the machines in the device report's JSON shape (the hello's).
machine2 = {"cpu": {"model": "AMD EPYC", "physical_cores": 4, "logical_cpus": 8, "torch_threads": 4,
                    "parallel_backend": "OpenMP", "blas": "MKL", "blas_is_reference": False},
            "gpus": [{"index": 0, "name": "H100", "total_memory_bytes": 85899345920, "compute": "9.0",
                      "multiprocessors": 132, "utilization_percent": None, "used_memory_bytes": None}],
            "cuda_available": True, "cuda_unavailable_reason": "", "torch": "2.11.0", "torch_cuda": "13.0",
            "cudnn": "91000", "nvml_driver": "580.65", "host": "box"}
manifest2 = {k: v for k, v in manifest.items() if k != "device"}
manifest2.update(format=2, machine=machine2, warmup_steps=20,
                 lanes=[dict(manifest["lanes"][0], machine=None), dict(manifest["lanes"][1], machine=machine2)])
write("manifest", "valid-2.json", json.dumps(manifest2, indent=1))
write("manifest", "no-lanes.json", json.dumps({**manifest, "lanes": []}))
write("manifest", "escape.json", json.dumps({**manifest, "lanes": [{"name": "x", "file": "../etc/passwd"}]}))
write("manifest", "missing-file.json", json.dumps({**manifest, "lanes": [{"name": "x", "file": "nope.jsonl"}]}))
write("manifest", "wrong-types.json", json.dumps({**manifest, "workload": 7, "dataset": []}))
write("manifest", "not-json", "{\"format\": 1, \"lanes\": [")

# --- recording lane JSONL ----------------------------------------------------------------
lines = [
    {"kind": "state", "lane": "cpu", "step": 0, "samples": 0, "t": 0.0, "state": "preparing", "message": ""},
    {"kind": "train", "lane": "cpu", "step": 20, "samples": 1280, "epoch": 0.02, "t": 1.0, "wall_time": 1.7e9,
     "loss": 2.3, "accuracy": 0.1, "samples_per_sec": 1280.0, "steps_per_sec": 20.0, "interval_s": 1.0,
     "memory_bytes": 1048576, "warmup": True},
    {"kind": "train", "lane": "cpu", "step": 40, "samples": 2560, "t": 2.0, "loss": 1.9, "samples_per_sec": 1300.0,
     "worker_samples_per_sec": [650.0, None, 650.0], "allreduce_share": 0.2, "thread_speeds": [1.0, 0.8], "other_cpus": 0.9, "steal": 0.03},
    {"kind": "eval", "lane": "cpu", "step": 40, "samples": 2560, "t": 2.5, "loss": 0.7, "accuracy": 0.82,
     "text": "sample text"},
    {"kind": "state", "lane": "cpu", "step": 40, "samples": 2560, "t": 2.6, "state": "finished", "message": "done"},
]
body = "".join(json.dumps(l) + "\n" for l in lines)
write("lane_jsonl", "valid.jsonl", body)
write("lane_jsonl", "cut-off.jsonl", body[:-20])
write("lane_jsonl", "bad-state.jsonl", json.dumps({**lines[0], "state": "sleeping"}) + "\n")
write("lane_jsonl", "bad-middle.jsonl", json.dumps(lines[0]) + "\n{\"kind\":\n" + json.dumps(lines[1]) + "\n")
write("lane_jsonl", "wrong-types.jsonl", json.dumps({**lines[1], "step": "x", "memory_bytes": -1}) + "\n")
write("lane_jsonl", "blank-lines.jsonl", "\n\n" + json.dumps(lines[1]) + "\n\n")

# --- presets -----------------------------------------------------------------------------
for name in ("scaling-efficiency.json", "cpu-thread-scaling.json", "synthetic-vs-real.json"):
    src = ROOT / "resources" / "presets" / name
    if src.exists():
        write("preset", name, src.read_bytes())
preset = {"format": 1, "name": "p", "races": [{"title": "t", "workload": "fashion-mlp", "steps": 10,
          "data": "synthetic", "lanes": ["best-gpu", "best-device,batch=64", "all-cores", "cpu,threads=powers",
                                         "cuda:0,workers=powers,backend=nccl"]}]}
write("preset", "generic-lanes.json", json.dumps(preset))
write("preset", "cmd.json", json.dumps({**preset, "races": [{"workload": "fashion-mlp", "lanes": ["cpu,cmd=sh"]}]}))
write("preset", "unknown-workload.json", json.dumps({**preset, "races": [{"workload": "x", "lanes": ["cpu"]}]}))
write("preset", "format-0.json", json.dumps({**preset, "format": 0}))
write("preset", "wrong-types.json", json.dumps({**preset, "races": [{"workload": "fashion-mlp", "epochs": "1",
                                                                    "lanes": [1]}]}))

# --- lane specs --------------------------------------------------------------------------
for i, s in enumerate([
    "cpu", "cuda", "cuda:0,batch=128,lr=0.05,precision=bf16,channels_last=true,graph=false",
    "cpu,threads=2,batch=64,lr=0.001,cost=1.25,name=laptop", "cpu,isolate=process,eval_batch=512,wd=5e-4,momentum=0.9",
    "cuda:0-3,workers=4,backend=nccl,global_batch=fixed", "cuda:all", "cpu+ssh://me@box:2222/cpu,workers=2,master=box",
    "ssh://gpubox/cuda:0,cli=/opt/devicerace-cli", "ssh://[::1]:22/cpu", "cpu,framework=keras-jax,threads=1",
    "cpu,fault=throw:5@1", "cpu,schedule=onecycle,lstm=fused,data=synthetic,fused=true,resident=false",
    "cpu,cmd=python3 lane.py", "cpu,,", "tpu", "cuda:9-2", "cpu,threads=-1", "cpu,lr=nan", "cpu,batch=99999999999999999999",
]):
    write("lane_spec", f"spec-{i:02d}", s)

# --- worker protocol ---------------------------------------------------------------------
hello = {"type": "hello", "proto": "1.0", "version": "0.1.0", "host": "box", "pid": 42,
         "devices": {"cpu": {"model": "X", "physical_cores": 4, "logical_cpus": 8, "torch_threads": 4,
                             "parallel_backend": "OpenMP", "blas": "MKL", "blas_is_reference": False},
                     "gpus": [{"index": 0, "name": "H100", "total_memory_bytes": 85899345920, "compute": "9.0",
                               "multiprocessors": 132, "utilization_percent": None, "used_memory_bytes": None}],
                     "cuda_available": True, "torch": "2.11.0", "host": "box"}}
config = {"type": "config", "proto": "1.0", "workload": "fashion-mlp", "lane": "cpu,threads=2,batch=64",
          "data": "synthetic", "data_dir": "", "train_limit": 1000, "test_limit": None, "epochs": None, "steps": 50,
          "target": 0.8, "seed": 7, "eval_every": 0, "warmup": 20, "report_interval": 0.1, "fail_at_step": 0,
          "expected_parameters": 1000,
          "dist": {"rank": 1, "world": 2, "backend": "gloo", "store_host": "127.0.0.1", "store_port": 29500,
                   "bind_host": "", "timeout": 60, "fixed_global_batch": False}}
ready = {"type": "ready", "batch": 64, "total_steps": 50, "threads": 2,
         "dataset": {"name": "Fashion-MNIST", "source": "/usr/share", "synthetic": False, "train": 60000,
                     "test": 10000, "note": ""}, "store_port": 29500}
sample = {"type": "sample", "sample": lines[1]}
c = lambda m: json.dumps(m, separators=(",", ":")) + "\n"
write("protocol", "session", "Welcome to box\n" + c(hello) + c(config) + c(ready) + c(sample)
      + c({"type": "done"}) + c({"type": "error", "message": "x"}))
write("protocol", "crlf", c(hello).replace("\n", "\r\n") + c(ready).replace("\n", "\r\n"))
write("protocol", "bad-config", c({**config, "lane": "ssh://x/cpu", "dist": {"rank": 5, "world": 2}}))
write("protocol", "deep", "{\"type\":\"x\",\"a\":" + "[" * 70 + "]" * 70 + "}\n")
write("protocol", "garbage", b"\x00\xff{{{\n}\n{\"type\":1}\n[\"type\"]\n" + b"x" * 100 + b"\n{\"type\":\"cut")
write("protocol", "bad-ready", c({**ready, "batch": 0}) + c({"type": "ready", "dataset": 3}))


# --- TensorBoard event files -------------------------------------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def field(num, wire, payload):
    return varint(num << 3 | wire) + payload


def record(data):
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked(head)) + data + struct.pack("<I", masked(data))


version = field(1, 1, struct.pack("<d", 1.7e9)) + field(3, 2, varint(13) + b"brain.Event:2")
value = field(1, 2, varint(17) + b"throughput/steps") + field(2, 5, struct.pack("<f", 12.5))
summary = field(1, 2, varint(len(value)) + value)
event = field(1, 1, struct.pack("<d", 1.7e9 + 1)) + field(2, 0, varint(100)) + field(5, 2, varint(len(summary)) + summary)
events = record(version) + record(event)
write("tensorboard", "valid", events)
write("tensorboard", "truncated", events[:-5])
write("tensorboard", "bad-crc", events[:-1] + bytes([events[-1] ^ 1]))
write("tensorboard", "bad-wire", record(field(1, 3, b"") + b"\x00"))
write("tensorboard", "long-varint", record(field(2, 0, b"\xff" * 11)))

# --- earlier findings, kept as seeds (docs/RELIABILITY.md, "Found and fixed") -------------
write("protocol", "found-ready-6e38", c({**ready, "dataset": {**ready["dataset"], "train": 6.00056e38}}))
write("preset", "found-workers-powers-no-comma.json",
      json.dumps({**preset, "races": [{"workload": "fashion-mlp", "lanes": ["best-deviceworkers=powerse=real"]}]}))
write("idx", "found-gzip-claims-1gib.gz", gz(struct.pack(">IIII", 0x803, 1024, 1024, 1024) + bytes(10)))

print(f"seeds written under {OUT.relative_to(ROOT)}")

#!/usr/bin/env python3
"""Lanes whose ranks a launcher starts, against the local data-parallel lane, on this machine:
a slurm:// lane (a one-node Slurm cluster started from a temporary folder, tests/cli/
slurm_fixture.py) and an attach:// lane (2 ranks started by the .venv's torchrun) against the
local 2-worker lane (cpu,workers=2,threads=1), same workload, batch and steps.

    python bench/clusters/run.py [--cli build/release/app/cli/devicerace-cli] [--runs 3]
                                 [--workload fashion-cnn] [--steps 120] [--json FILE]

Each run is one fair-mode race per lane kind (one lane at a time, each alone on the machine),
the kinds interleaved. Prints a Markdown table: the median samples/s of each kind, its ratio to
the local lane (per-run ratios: median, min-max) and the time from the race command to the
lane's first training sample (median). Needs root and Slurm (scripts/setup).
"""
import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)
sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
import slurm_fixture  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def race(cli, lane, args, env):
    with tempfile.TemporaryDirectory() as tmp:
        rec, out = os.path.join(tmp, "rec"), os.path.join(tmp, "s.json")
        started = time.time()
        r = subprocess.run([cli, "race", "--workload", args.workload, "--data", "synthetic", "--steps",
                            str(args.steps), "--test-limit", "256", "--fair", "--quiet", "--record", rec,
                            "--json", out, "--lane", lane + ",name=lane"],
                           capture_output=True, text=True, env=env, timeout=1200)
        if r.returncode != 0:
            raise SystemExit(f"{lane}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        with open(out) as f:
            summary = json.load(f)["lanes"][0]
        with open(os.path.join(rec, "manifest.json")) as f:
            path = os.path.join(rec, json.load(f)["lanes"][0]["file"])
        with open(path) as f:
            first = next(json.loads(l) for l in f if json.loads(l)["kind"] == "train")
        return summary["samples_per_sec"], first["wall_time"] - started


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workload", default="fashion-cnn")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--json")
    args = p.parse_args()
    why = slurm_fixture.available()
    if why:
        raise SystemExit(f"cannot run: {why}")
    cluster = slurm_fixture.SlurmCluster()
    env = cluster.env(OMP_WAIT_POLICY="PASSIVE")
    keys = f"threads=1,batch={args.batch}"
    token = os.path.join(cluster.dir, "token")
    with open(token, "w") as f:
        f.write(secrets.token_hex(16))
    results = {"local": [], "slurm": [], "attach": []}
    try:
        for _ in range(args.runs):
            results["local"].append(race(args.cli, f"cpu,workers=2,{keys}", args, env))
            results["slurm"].append(race(args.cli, f"slurm:///cpu,workers=2,{keys}", args, env))
            listen = free_port()
            job = subprocess.Popen([os.path.join(ROOT, ".venv", "bin", "python"), "-m", "torch.distributed.run",
                                    "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                                    str(free_port()), "--no-python", args.cli, "worker", "--ranks-from", "env",
                                    "--listen", f"127.0.0.1:{listen}", "--token-file", token, "--proto", "1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                   start_new_session=True)
            deadline = time.time() + 120
            while time.time() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", listen)) == 0:
                        break
                time.sleep(0.2)
            try:
                results["attach"].append(race(args.cli, f"attach://127.0.0.1:{listen}/cpu,token_file={token},{keys}",
                                              args, env))
            finally:
                if job.poll() is None:
                    os.killpg(job.pid, signal.SIGTERM)
                job.wait()
    finally:
        cluster.close()
    local = [r[0] for r in results["local"]]
    print(f"`bench/clusters/run.py --runs {args.runs} --workload {args.workload} --steps {args.steps}` · "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {cpu_model()} ({os.cpu_count()} CPUs) · "
          f"2 ranks x 1 thread, batch {args.batch} per rank, synthetic data, fair mode\n")
    print("| lane | samples/s (median) | x local 2-worker lane (median, min-max) | first sample after (median) |")
    print("|---|---:|---:|---:|")
    for kind, label in (("local", "local, `cpu,workers=2`"), ("slurm", "Slurm, `slurm:///cpu,workers=2`"),
                        ("attach", "torchrun, `attach://…/cpu`")):
        rates = [r[0] for r in results[kind]]
        ratios = [a / b for a, b in zip(rates, local)]
        print(f"| {label} | {statistics.median(rates):,.0f} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) | {statistics.median(r[1] for r in results[kind]):.1f} s |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

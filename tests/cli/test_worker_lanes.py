"""Lanes outside the process, driven through the CLI as a user would: process lanes that are
killed or crash, and remote lanes through a real OpenSSH server on a loopback port (started
here with throw-away keys, stopped at the end).

Run by ctest as: python3 test_worker_lanes.py PATH/TO/devicerace-cli
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
import sshd_fixture  # noqa: E402

CLI = None
# A short real race on a subset of Fashion-MNIST.
SMALL = ["--workload", "fashion-mlp", "--train-limit", "3000", "--test-limit", "500"]


def env(**extra):
    return dict(os.environ, OMP_WAIT_POLICY="PASSIVE", **extra)


def children_running_worker(parent, program=None):
    """Processes whose parent is `parent` running a worker (`program worker ...` when given)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid != parent:
            continue
        if b"worker" not in cmd:
            continue
        try:
            if program and os.path.realpath(f"/proc/{entry}/exe") != os.path.realpath(program):
                continue
        except OSError:
            continue
        out.append(int(entry))
    return out


def wait_for_lines(path, count, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                if sum(1 for _ in f) >= count:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def lane_files(record_dir):
    with open(os.path.join(record_dir, "manifest.json")) as f:
        manifest = json.load(f)
    return {l["name"]: os.path.join(record_dir, l["file"]) for l in manifest["lanes"]}, manifest


class ProcessLanes(unittest.TestCase):
    def test_killed_process_lane_fails_alone_and_the_recording_replays(self):
        with tempfile.TemporaryDirectory() as tmp:
            rec = os.path.join(tmp, "rec")
            summary = os.path.join(tmp, "s.json")
            p = subprocess.Popen([CLI, "race", *SMALL, "--steps", "100000", "--quiet", "--record", rec,
                                  "--json", summary,
                                  "--lane", "cpu,threads=1,isolate=process,name=victim",
                                  "--lane", "cpu,threads=1,name=survivor"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
            try:
                self.assertTrue(wait_for_lines(os.path.join(rec, "lane-0.jsonl"), 8))
                workers = children_running_worker(p.pid)
                self.assertEqual(len(workers), 1, workers)
                os.kill(workers[0], signal.SIGKILL)
                time.sleep(1.5)
                # The survivor is still racing: stop it like a user pressing Ctrl+C.
                self.assertIsNone(p.poll())
                p.send_signal(signal.SIGINT)
                out, err = p.communicate(timeout=60)
            finally:
                if p.poll() is None:
                    p.kill()
            self.assertEqual(p.returncode, 1, out + err)
            with open(summary) as f:
                lanes = {l["name"]: l for l in json.load(f)["lanes"]}
            self.assertEqual(lanes["victim"]["status"], "failed")
            self.assertIn("killed by signal 9 (SIGKILL) at step", lanes["victim"]["error"])
            self.assertEqual(lanes["victim"]["kind"], "process")
            self.assertEqual(lanes["survivor"]["status"], "stopped")
            self.assertGreater(lanes["survivor"]["steps"], lanes["victim"]["steps"])
            r = subprocess.run([CLI, "replay", rec], capture_output=True, text=True, env=env(), timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("victim", r.stdout)
            self.assertIn("failed", r.stdout)

    def test_crashing_process_lane_and_a_finishing_thread_lane(self):
        r = subprocess.run([CLI, "race", *SMALL, "--steps", "60", "--quiet",
                            "--lane", "cpu,threads=1,isolate=process,fault=segv:20,name=crash",
                            "--lane", "cpu,threads=1,name=fine"],
                           capture_output=True, text=True, env=env(), timeout=300)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("SIGSEGV", r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"fine\s.*finished")


SPEAKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes", "protocol_speaker.py")


class CommandLanes(unittest.TestCase):
    """cmd= lanes: any program speaking the protocol, only with the user's consent."""

    def test_a_command_lane_needs_consent(self):
        r = subprocess.run([CLI, "race", *SMALL, "--steps", "5", "--lane", f"cpu,cmd={SPEAKER}"],
                           capture_output=True, text=True, env=env(), timeout=120)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--allow-commands", r.stderr)
        self.assertIn(SPEAKER, r.stderr)

    def test_a_command_lane_races_beside_a_devicerace_lane(self):
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "s.json")
            r = subprocess.run([CLI, "race", *SMALL, "--steps", "20", "--quiet", "--allow-commands", "--json", summary,
                                "--lane", "cpu,threads=1,name=engine", "--lane", f"cpu,cmd={SPEAKER},name=counter"],
                               capture_output=True, text=True, env=env(), timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(summary) as f:
                lanes = {l["name"]: l for l in json.load(f)["lanes"]}
            self.assertEqual(lanes["counter"]["kind"], "external")
            self.assertEqual(lanes["counter"]["status"], "finished")
            self.assertEqual(lanes["counter"]["samples_per_sec"], 640.0)
            self.assertEqual(lanes["counter"]["final_test_accuracy"], 0.9)
            self.assertEqual(lanes["engine"]["status"], "finished")

    def test_the_pytorch_lane_races_beside_a_devicerace_lane(self):
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "s.json")
            r = subprocess.run([CLI, "race", *SMALL, "--steps", "40", "--quiet", "--json", summary,
                                "--lane", "cpu,threads=1,name=engine",
                                "--lane", "cpu,threads=1,framework=pytorch,name=torch"],
                               capture_output=True, text=True, env=env(), timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(summary) as f:
                lanes = {l["name"]: l for l in json.load(f)["lanes"]}
            torch = lanes["torch"]
            self.assertEqual(torch["kind"], "external")
            self.assertEqual(torch["status"], "finished")
            self.assertEqual(torch["steps"], 40)
            self.assertGreater(torch["samples_per_sec"], 0)
            self.assertGreater(torch["final_test_accuracy"], 0.3)
            self.assertIn("PyTorch", torch["execution"])

    def test_a_preset_may_not_name_a_program(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "evil.json"), "w") as f:
                json.dump({"format": 1, "name": "evil", "description": "runs a program",
                           "races": [{"title": "x", "workload": "fashion-mlp", "steps": 5,
                                      "lanes": [f"cpu,cmd={SPEAKER}"]}]}, f)
            r = subprocess.run([CLI, "race", "--preset", "evil", "--allow-commands"], capture_output=True, text=True,
                               env=env(DEVICERACE_PRESETS=tmp), timeout=120)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("presets may not use cmd=", r.stderr)


@unittest.skipIf(sshd_fixture.available(), sshd_fixture.available() or "")
class RemoteLanes(sshd_fixture.WithSshd, unittest.TestCase):
    def race(self, *args, config=None, timeout=300):
        return subprocess.run([CLI, "race", *SMALL, "--quiet", *args], capture_output=True, text=True,
                              env=env(DEVICERACE_SSH_CONFIG=config or self.sshd.config), timeout=timeout)

    def remote_lane(self, extra=""):
        return f"{self.host}/cpu,threads=1,cli={CLI}{extra}"

    def assert_refused(self, r, expected):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(expected, r.stderr)
        self.assertEqual(len([l for l in r.stderr.splitlines() if l.strip()]), 1, r.stderr)

    def test_a_local_and_a_remote_lane_both_finish_with_figures(self):
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "s.json")
            rec = os.path.join(tmp, "rec")
            r = self.race("--steps", "80", "--json", summary, "--record", rec,
                          "--lane", "cpu,threads=1,name=laptop", "--lane", self.remote_lane())
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(summary) as f:
                lanes = json.load(f)["lanes"]
            self.assertEqual([l["status"] for l in lanes], ["finished", "finished"])
            remote = lanes[1]
            self.assertEqual(remote["kind"], "remote")
            self.assertEqual(remote["host"], self.host)
            self.assertTrue(remote["name"].startswith(sshd_fixture.Sshd.ALIAS))
            self.assertGreater(remote["samples_per_sec"], 0)
            self.assertEqual(remote["steps"], 80)
            self.assertEqual(remote["final_test_accuracy"], lanes[0]["final_test_accuracy"])
            _, manifest = lane_files(rec)
            self.assertEqual(manifest["lanes"][1]["kind"], "remote")
            # The "remote" host is this machine over loopback: the worker's own device report
            # (its hello) names the same CPU as the race's, whatever vendor this machine has.
            self.assertTrue(manifest["machine"]["cpu"]["model"], manifest["machine"])
            self.assertEqual(manifest["lanes"][1]["machine"]["cpu"]["model"], manifest["machine"]["cpu"]["model"])
            self.assertIsNone(manifest["lanes"][0]["machine"])  # a thread lane runs on the race's machine

    def test_a_framework_lane_on_a_remote_host(self):
        # framework= over ssh: the remote devicerace-cli runs its own machine's lane program.
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "s.json")
            r = self.race("--steps", "30", "--json", summary,
                          "--lane", self.remote_lane(",framework=pytorch,name=remote-pytorch"), timeout=400)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(summary) as f:
                lane = json.load(f)["lanes"][0]
            self.assertEqual(lane["status"], "finished", lane)
            self.assertEqual(lane["kind"], "remote")
            self.assertEqual(lane["steps"], 30)
            self.assertGreater(lane["samples_per_sec"], 0)

    def test_devices_of_a_remote_host(self):
        r = subprocess.run([CLI, "devices", "--host", self.host, "--cli", CLI, "--json"], capture_output=True,
                           text=True, env=env(DEVICERACE_SSH_CONFIG=self.sshd.config), timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        devices = json.loads(r.stdout)
        self.assertTrue(devices["cpu"]["model"])
        self.assertEqual(set(devices), set(json.loads(subprocess.run([CLI, "devices", "--json"], capture_output=True,
                                                                      text=True, check=True).stdout)))

    def test_connection_lost_mid_race_fails_only_the_remote_lane(self):
        with tempfile.TemporaryDirectory() as tmp:
            rec = os.path.join(tmp, "rec")
            summary = os.path.join(tmp, "s.json")
            p = subprocess.Popen([CLI, "race", *SMALL, "--steps", "700", "--quiet", "--record", rec,
                                  "--json", summary, "--lane", "cpu,threads=1,name=laptop",
                                  "--lane", self.remote_lane(",name=gpubox")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env(DEVICERACE_SSH_CONFIG=self.sshd.config))
            try:
                files, _ = lane_files(rec) if wait_for_lines(os.path.join(rec, "lane-1.jsonl"), 6) else ({}, None)
                self.assertTrue(files, "the remote lane never sent samples")
                self.sshd.kill()
                out, err = p.communicate(timeout=240)
            finally:
                if p.poll() is None:
                    p.kill()
                self.sshd.start()
            self.assertEqual(p.returncode, 1, out + err)
            with open(summary) as f:
                lanes = {l["name"]: l for l in json.load(f)["lanes"]}
            self.assertEqual(lanes["laptop"]["status"], "finished")
            self.assertEqual(lanes["laptop"]["steps"], 700)
            self.assertEqual(lanes["gpubox"]["status"], "failed")
            self.assertIn(f"connection to {sshd_fixture.Sshd.ALIAS} lost at step", lanes["gpubox"]["error"])
            # Every sample that arrived was recorded, and the recording says how it ended.
            with open(files["gpubox"]) as f:
                recorded = [json.loads(line) for line in f]
            self.assertGreaterEqual(len(recorded), 6)
            self.assertEqual(recorded[-1]["state"], "failed")

    def test_wrong_port_is_unreachable(self):
        config = self.sshd.client_config("known_hosts", "user_key", port=sshd_fixture.free_port(), name="wrong_port")
        self.assert_refused(self.race("--steps", "5", "--lane", self.remote_lane(), config=config),
                            "host unreachable")

    def test_refused_key(self):
        config = self.sshd.client_config("known_hosts", "other_key", name="other_key_config")
        self.assert_refused(self.race("--steps", "5", "--lane", self.remote_lane(), config=config),
                            "authentication refused")

    def test_unknown_host_key(self):
        config = self.sshd.client_config("empty_known_hosts", "user_key", name="no_known_hosts")
        self.assert_refused(self.race("--steps", "5", "--lane", self.remote_lane(), config=config),
                            "host key is unknown")

    def test_missing_remote_cli(self):
        r = self.race("--steps", "5", "--lane", f"{self.host}/cpu,cli=/opt/nowhere/devicerace-cli")
        self.assert_refused(r, "has no '/opt/nowhere/devicerace-cli'")

    def test_device_absent_on_the_host(self):
        r = self.race("--steps", "5", "--lane", f"{self.host}/cuda:0,cli={CLI}")
        self.assert_refused(r, f"{sshd_fixture.Sshd.ALIAS}: device cuda:0")

    def test_data_missing_on_the_host(self):
        r = self.race("--steps", "5", "--data-dir", "/nonexistent/fashion", "--lane", self.remote_lane())
        self.assert_refused(r, "/nonexistent/fashion")


if __name__ == "__main__":
    CLI = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)

"""Lanes whose ranks a cluster's launcher starts, with the real launchers on this machine:

- slurm:// through a one-node Slurm cluster that the test starts (slurm_fixture.py): a Slurm lane
  of 2 tasks trains beside a thread lane and ends with the weights of the local 2-worker lane;
  scancel mid-race fails only that lane, with Slurm's word; a job that cannot start times out in
  the queue, saying so, and is cancelled.
- attach:// to ranks that torchrun (the project's .venv, torch.distributed.run) started: a race
  attaches with the job's token and trains; a wrong token is refused; a killed rank fails the lane.

Run by ctest as: python3 test_clusters.py PATH/TO/devicerace-cli
"""
import glob
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_fixture  # noqa: E402
import sshd_fixture  # noqa: E402
from sshd_fixture import free_port  # noqa: E402

CLI = None
SMALL = ["--train-limit", "4096", "--test-limit", "1000"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def read(path):
    with open(path) as f:
        return f.read().strip()


def lanes_of(summary_path):
    with open(summary_path) as f:
        return {l["name"]: l for l in json.load(f)["lanes"]}


def lane_samples(record_dir, name):
    """The lane's samples so far ([] before its file exists)."""
    try:
        with open(os.path.join(record_dir, "manifest.json")) as f:
            manifest = json.load(f)
        path = next(os.path.join(record_dir, l["file"]) for l in manifest["lanes"] if l["name"] == name)
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except (OSError, StopIteration, ValueError):
        return []


def wait_for(predicate, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def first_sample_after(record_dir, name, started):
    trains = [s for s in lane_samples(record_dir, name) if s["kind"] == "train"]
    return trains[0]["wall_time"] - started if trains else None


@unittest.skipIf(slurm_fixture.available(), slurm_fixture.available() or "")
class SlurmLanes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = slurm_fixture.SlurmCluster()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def env(self, **extra):
        return self.cluster.env(OMP_WAIT_POLICY="PASSIVE", **extra)

    def test_a_slurm_lane_trains_beside_a_thread_lane_like_the_local_two_worker_lane(self):
        with tempfile.TemporaryDirectory() as tmp:
            digests = os.path.join(tmp, "digests")
            os.makedirs(digests)
            rec, summary = os.path.join(tmp, "rec"), os.path.join(tmp, "s.json")
            started = time.time()
            r = subprocess.run([CLI, "race", "--workload", "fashion-cnn", *SMALL, "--steps", "12", "--eval-every", "6",
                                "--warmup-steps", "2",
                                "--quiet", "--record", rec, "--json", summary,
                                "--lane", "slurm:///cpu,workers=2,threads=1,batch=32,queue=120,name=slurm",
                                "--lane", "cpu,workers=2,threads=1,batch=32,name=local",
                                "--lane", "cpu,threads=1,batch=32,name=thread"],
                               capture_output=True, text=True, timeout=900,
                               env=self.env(DEVICERACE_WEIGHTS_DIGEST=digests, DEVICERACE_TEST_NO_DROPOUT="1",
                                            DEVICERACE_DENSE_STEP="0"))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            lanes = lanes_of(summary)
            slurm, local = lanes["slurm"], lanes["local"]
            self.assertEqual([lanes[n]["status"] for n in ("slurm", "local", "thread")], ["finished"] * 3)
            self.assertEqual(slurm["kind"], "slurm")
            self.assertEqual(slurm["workers"], 2)
            self.assertEqual(slurm["batch"], 64)
            self.assertTrue(slurm["job"].isdigit(), slurm)
            self.assertEqual(slurm["nodes"], "localhost")
            self.assertEqual(slurm["samples"], local["samples"])
            # Every rank Slurm started holds the local 2-worker lane's weights, bit for bit.
            values = {os.path.basename(f): read(f) for f in glob.glob(os.path.join(digests, "*.txt"))}
            self.assertEqual(values["slurm-rank-0.txt"], values["slurm-rank-1.txt"], values)
            self.assertEqual(values["slurm-rank-0.txt"], values["local-rank-0.txt"], values)
            # The lane said where it stood before it trained.
            states = [s.get("message", "") for s in lane_samples(rec, "slurm") if s["kind"] == "state"]
            self.assertTrue(any(m.startswith("submitting the job to Slurm") for m in states), states)
            print(f"slurm lane: {slurm['samples_per_sec']:.0f} samples/s against the local 2-worker lane's "
                  f"{local['samples_per_sec']:.0f} ({slurm['samples_per_sec'] / local['samples_per_sec']:.2f}x, "
                  f"live beside 2 more lanes); first sample {first_sample_after(rec, 'slurm', started):.1f} s after "
                  "the race began", file=sys.stderr)
            wait_for(lambda: not self.cluster.jobs(), 30, "the job to leave the queue once the lane finished")

    def test_a_script_lane_under_srun(self):
        # The user's own command on the node Slurm gives (README, "Race your own training").
        scripts = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "s.json")
            r = subprocess.run([CLI, "race", "--quiet", "--json", summary, "--lane",
                                f"slurm:///cpu,threads=1,queue=120,name=slurm,workdir={scripts}", "--",
                                sys.executable, "train_fashion.py", "--steps", "60", "--out", f"{tmp}/own.json"],
                               capture_output=True, text=True, timeout=600, env=self.env())
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            lane = lanes_of(summary)["slurm"]
            self.assertEqual((lane["status"], lane["kind"], lane["steps"], lane["samples"]),
                             ("finished", "slurm", 60, 3840))
            self.assertTrue(lane["job"].isdigit(), lane)
            with open(f"{tmp}/own.json") as f:
                self.assertEqual(json.load(f)["threads"], 1)
            wait_for(lambda: not self.cluster.jobs(), 30, "the job to leave the queue once the lane finished")

    def test_scancel_fails_only_the_slurm_lane_with_slurms_word(self):
        with tempfile.TemporaryDirectory() as tmp:
            rec, summary = os.path.join(tmp, "rec"), os.path.join(tmp, "s.json")
            p = subprocess.Popen([CLI, "race", "--workload", "fashion-mlp", *SMALL, "--quiet", "--record", rec,
                                  "--json", summary, "--steps", "3000",
                                  "--lane", "slurm:///cpu,workers=2,threads=1,name=slurm",
                                  "--lane", "cpu,threads=1,name=survivor,batch=16"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env())
            try:
                wait_for(lambda: sum(s["kind"] == "train" for s in lane_samples(rec, "slurm")) >= 2, 180,
                         "the Slurm lane's first samples")
                jobs = [j for j in self.cluster.jobs() if j[1].startswith("devicerace-")]
                self.assertEqual(len(jobs), 1, jobs)
                self.cluster.run("scancel", jobs[0][0])
                out, err = p.communicate(timeout=600)
            finally:
                if p.poll() is None:
                    p.kill()
            self.assertEqual(p.returncode, 1, out + err)
            lanes = lanes_of(summary)
            self.assertEqual(lanes["slurm"]["status"], "failed")
            self.assertIn(f"Slurm ended job {jobs[0][0]} (CANCELLED) at step", lanes["slurm"]["error"])
            self.assertEqual(lanes["survivor"]["status"], "finished")
            self.assertGreaterEqual(sum(s["kind"] == "train" for s in lane_samples(rec, "slurm")), 2,
                                    "what the lane reported before stays in the recording")

    def test_a_job_that_cannot_start_times_out_in_the_queue(self):
        with tempfile.TemporaryDirectory() as tmp:
            rec, summary = os.path.join(tmp, "rec"), os.path.join(tmp, "s.json")
            r = subprocess.run([CLI, "race", "--workload", "fashion-mlp", *SMALL, "--steps", "30", "--quiet",
                                "--record", rec, "--json", summary,
                                "--lane", "slurm:///cpu,nodes=3,threads=1,queue=4,name=big",
                                "--lane", "cpu,threads=1,name=small"],
                               capture_output=True, text=True, timeout=300, env=self.env())
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            lanes = lanes_of(summary)
            self.assertEqual(lanes["small"]["status"], "finished")
            self.assertEqual(lanes["big"]["status"], "failed")
            self.assertRegex(lanes["big"]["error"], r"job \d+ was still queued after 4 s \(Slurm's reason: \w+\); "
                                                     r"cancelled it")
            states = [s.get("message", "") for s in lane_samples(rec, "big") if s["kind"] == "state"]
            self.assertTrue(any(m.startswith("queued: job ") and "waiting for 3 nodes" in m and "position 1 of 1" in m
                                for m in states), states)
            wait_for(lambda: not self.cluster.jobs(), 30, "the cancelled job to leave the queue")

    def test_stopping_the_race_cancels_a_queued_job(self):
        with tempfile.TemporaryDirectory() as tmp:
            rec = os.path.join(tmp, "rec")
            p = subprocess.Popen([CLI, "race", "--workload", "fashion-mlp", *SMALL, "--steps", "100000", "--quiet",
                                  "--record", rec, "--lane", "slurm:///cpu,nodes=2,threads=1,name=waiting",
                                  "--lane", "cpu,threads=1,batch=16,name=other"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env())
            try:
                wait_for(lambda: any(s.get("message", "").startswith("queued: job ")
                                     for s in lane_samples(rec, "waiting")), 60, "the job to be queued")
                self.assertEqual(len(self.cluster.jobs()), 1)
                p.send_signal(signal.SIGINT)
                p.communicate(timeout=120)
            finally:
                if p.poll() is None:
                    p.kill()
            wait_for(lambda: not self.cluster.jobs(), 30, "the stopped race's job to leave the queue")
            ends = [s for s in lane_samples(rec, "waiting") if s["kind"] == "state" and s["state"] == "stopped"]
            self.assertEqual(len(ends), 1, lane_samples(rec, "waiting")[-3:])
            self.assertRegex(ends[0]["message"], r"stopped: job \d+ cancelled")

    def test_slurm_lane_keys_are_checked(self):
        for lane, expected in (("slurm://", "expected slurm://[login-host]/DEVICE"),
                               ("slurm:///cpu+cpu", "one kind of device"),
                               ("slurm:///cuda:all", "count their own GPUs"),
                               ("slurm:///cpu,nodes=0", "nodes=0 is out of range"),
                               ("slurm:///cpu,partition=a;b", "not a partition name"),
                               ("slurm:///cpu,master=10.0.0.1", "isolate and master do not apply"),
                               ("cpu,partition=x", "apply to slurm:// lanes"),
                               ("slurm:///cpu,token_file=t", "applies to attach:// lanes")):
            r = subprocess.run([CLI, "race", "--steps", "5", "--lane", lane], capture_output=True, text=True,
                               timeout=120, env=self.env())
            self.assertEqual(r.returncode, 2, (lane, r.stdout, r.stderr))
            self.assertIn(expected, r.stderr, lane)


@unittest.skipIf(slurm_fixture.available() or sshd_fixture.available(),
                 slurm_fixture.available() or sshd_fixture.available() or "")
class SlurmThroughALoginHost(unittest.TestCase):
    """slurm://HOST/...: srun, squeue and scancel run on the login host through ssh (a real sshd on
    a loopback port whose sessions find the test's cluster through SLURM_CONF)."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = slurm_fixture.SlurmCluster()
        try:
            cls.sshd = sshd_fixture.Sshd()
            with open(f"{cls.sshd.dir}/sshd_config", "a") as f:
                f.write(f"SetEnv SLURM_CONF={cls.cluster.dir}/slurm.conf OMP_WAIT_POLICY=PASSIVE\n")
            cls.sshd.kill()
            cls.sshd.start()
        except Exception:
            cls.cluster.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.sshd.stop()
        cls.cluster.close()

    def test_srun_on_the_login_host_races_the_job(self):
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "s.json")
            env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # only the login host knows it
            env.update(DEVICERACE_SSH_CONFIG=self.sshd.config, OMP_WAIT_POLICY="PASSIVE")
            r = subprocess.run([CLI, "race", "--workload", "fashion-mlp", *SMALL, "--steps", "30", "--quiet",
                                "--json", summary,
                                "--lane", f"slurm://{self.sshd.ALIAS}/cpu,workers=2,threads=1,cli={CLI},name=login"],
                               capture_output=True, text=True, timeout=300, env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            lane = lanes_of(summary)["login"]
            self.assertEqual((lane["status"], lane["kind"], lane["workers"]), ("finished", "slurm", 2))
            self.assertTrue(lane["job"].isdigit(), lane)


def torchrun(port, listen, token_file, *extra, nproc=2):
    """torchrun (the .venv's torch.distributed.run) starting `nproc` DeviceRace ranks."""
    return subprocess.Popen([VENV_PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                             "--master-addr", "127.0.0.1", "--master-port", str(port), "--no-python",
                             CLI, "worker", "--ranks-from", "env", "--listen", f"127.0.0.1:{listen}",
                             "--token-file", token_file, "--proto", "1", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"), start_new_session=True)


def rank_pids(launcher_pid):
    """{RANK: pid} of the processes torchrun started (found through their environment)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if b"RANK" in env and b"TORCHELASTIC_RUN_ID" in env and ppid != launcher_pid and b"LOCAL_RANK" in env:
            out[int(env[b"RANK"])] = int(entry)
    return out


def listening(port):
    import socket
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@unittest.skipUnless(os.path.exists(VENV_PYTHON), "no .venv (scripts/setup makes it, with torch)")
class AttachedJobs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="devicerace-attach-")
        self.token = os.path.join(self.tmp, "token")
        with open(self.token, "w") as f:
            f.write(secrets.token_hex(16) + "\n")
        os.chmod(self.token, 0o600)
        self.listen = free_port()
        self.job = torchrun(free_port(), self.listen, self.token)
        self.addCleanup(self.stop_job)
        wait_for(lambda: listening(self.listen) or self.job.poll() is not None, 120, "rank 0 to listen")
        self.assertIsNone(self.job.poll(), self.job.stderr.read() if self.job.poll() is not None else "")

    def job_log(self):
        """torchrun's and its ranks' output, once the job has ended (for a failure's message)."""
        try:
            out, err = self.job.communicate(timeout=60)
        except (subprocess.TimeoutExpired, ValueError):
            return "(the job's log: not available)"
        return f"the job's log:\n{out[-3000:]}{err[-3000:]}"

    def stop_job(self):
        if self.job.poll() is None:
            os.killpg(self.job.pid, signal.SIGTERM)
            try:
                self.job.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.job.pid, signal.SIGKILL)
                self.job.communicate()
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)

    def race(self, *args, timeout=300):
        return subprocess.run([CLI, "race", "--workload", "fashion-mlp", *SMALL, "--quiet", *args],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))

    def test_a_race_attaches_to_torchruns_ranks_and_a_wrong_token_is_refused(self):
        bad = os.path.join(self.tmp, "bad")
        with open(bad, "w") as f:
            f.write(secrets.token_hex(16))
        r = self.race("--steps", "10", "--lane", f"attach://127.0.0.1:{self.listen}/cpu,token_file={bad}")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"127.0.0.1:{self.listen} refused the token: wrong token", r.stderr)
        # The job waits on for the race that holds its token.
        rec, summary = os.path.join(self.tmp, "rec"), os.path.join(self.tmp, "s.json")
        started = time.time()
        r = self.race("--steps", "40", "--eval-every", "20", "--record", rec, "--json", summary,
                      "--lane", f"attach://127.0.0.1:{self.listen}/cpu,threads=1,token_file={self.token},name=job",
                      "--lane", "cpu,threads=1,name=thread")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lanes = lanes_of(summary)
        job = lanes["job"]
        self.assertEqual((job["status"], lanes["thread"]["status"]), ("finished", "finished"))
        self.assertEqual(job["kind"], "attached")
        self.assertEqual(job["workers"], 2)
        self.assertEqual(job["batch"], 256)
        self.assertEqual(job["samples"], 40 * 256)
        self.assertEqual(len(job["worker_samples_per_sec"]), 2)
        print(f"attached job: first sample {first_sample_after(rec, 'job', started):.1f} s after the race began",
              file=sys.stderr)
        # The job ends with the race.
        self.job.communicate(timeout=60)
        self.assertEqual(self.job.returncode, 0)

    def test_a_killed_rank_fails_the_attached_lane(self):
        rec, summary = os.path.join(self.tmp, "rec"), os.path.join(self.tmp, "s.json")
        p = subprocess.Popen([CLI, "race", "--workload", "fashion-mlp", *SMALL, "--quiet", "--steps", "3000",
                              "--record", rec, "--json", summary,
                              "--lane", f"attach://127.0.0.1:{self.listen}/cpu,threads=1,token_file={self.token},name=job",
                              "--lane", "cpu,threads=1,batch=16,name=survivor"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
        try:
            wait_for(lambda: sum(s["kind"] == "train" for s in lane_samples(rec, "job")) >= 2, 120, "the job's samples")
            ranks = rank_pids(p.pid)
            self.assertIn(1, ranks, ranks)
            os.kill(ranks[1], signal.SIGKILL)
            out, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 1, out + err)
        lanes = lanes_of(summary)
        self.assertEqual(lanes["job"]["status"], "failed")
        self.assertIn("lost a peer rank", lanes["job"]["error"], self.job_log())
        print(f"the attached lane: {lanes['job']['error']}", file=sys.stderr)
        self.assertEqual(lanes["survivor"]["status"], "finished")

    def test_a_job_without_a_token_does_not_listen(self):
        r = subprocess.run([CLI, "worker", "--ranks-from", "env", "--listen", "127.0.0.1:1", "--proto", "1"],
                           capture_output=True, text=True, timeout=60,
                           env=dict({k: v for k, v in os.environ.items() if k != "DEVICERACE_ATTACH_TOKEN"},
                                    RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no token", r.stderr)


if __name__ == "__main__":
    CLI = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)

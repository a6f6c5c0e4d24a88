"""A throw-away one-node Slurm cluster on this machine, for tests of slurm:// lanes.

munged (its own key and socket), slurmctld and slurmd run from a temporary folder with a
generated slurm.conf: localhost is the only node, with this machine's CPUs, in one partition.
Clients find it through SLURM_CONF (env()). Nothing outside the folder is read or written.
Needs root (slurmd starts the tasks as the submitting user) and Debian's slurmctld, slurmd,
slurm-client and munge (scripts/setup installs them).
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "squeue", "scancel", "sinfo", "scontrol")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find(name):
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)),
                                      None)


def available():
    """Why the cluster cannot run here, or None."""
    missing = [p for p in PROGRAMS if not find(p)]
    if missing:
        return (f"{', '.join(missing)} not installed (Debian packages slurmctld, slurmd, slurm-client, munge; "
                "scripts/setup installs them)")
    if os.geteuid() != 0:
        return "slurmd needs root to start tasks (run the tests as root, as CI does)"
    if (os.cpu_count() or 1) < 2:
        return "the tests ask for 2 tasks: this machine has 1 CPU"
    return None


class SlurmCluster:
    PARTITION = "race"

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="devicerace-slurm-")
        d = self.dir
        os.chmod(d, 0o755)  # munged insists that everyone may reach its socket's folder
        self.procs = []
        os.makedirs(f"{d}/state")
        os.makedirs(f"{d}/spool")
        with open(f"{d}/munge.key", "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(f"{d}/munge.key", 0o400)
        self.cpus = os.cpu_count() or 2
        ctld, slurmd = free_port(), free_port()
        with open(f"{d}/slurm.conf", "w") as f:
            f.write(f"""ClusterName=devicerace-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName={self.PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""")
        self.munge_err = open(f"{d}/munged.err", "w")  # its reason, when it refuses to start
        try:
            self.procs.append(subprocess.Popen(
                [find("munged"), "-F", f"--key-file={d}/munge.key", f"--socket={d}/munge.sock",
                 f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"],
                stdout=subprocess.DEVNULL, stderr=self.munge_err))
            self._wait(lambda: os.path.exists(f"{d}/munge.sock"), "munged made no socket")
            self.procs.append(subprocess.Popen([find("slurmctld"), "-D", "-i", "-f", f"{d}/slurm.conf"],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env()))
            self.procs.append(subprocess.Popen([find("slurmd"), "-D", "-f", f"{d}/slurm.conf", "-N", "localhost"],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env()))
            self._wait(lambda: self.run("sinfo", "-h", "-o", "%t").stdout.strip() == "idle",
                       "the node never became idle", seconds=60)
        except Exception:
            self.close()
            raise

    def env(self, **extra):
        return dict(os.environ, SLURM_CONF=f"{self.dir}/slurm.conf", **extra)

    def run(self, *argv, timeout=30):
        return subprocess.run([find(argv[0]), *argv[1:]], capture_output=True, text=True, env=self.env(),
                              timeout=timeout)

    def jobs(self):
        """[(id, name, state)] of the cluster's jobs in the queue."""
        out = self.run("squeue", "-h", "-o", "%i|%j|%T").stdout
        return [tuple(line.split("|")) for line in out.splitlines() if line.count("|") == 2]

    def log(self, name):
        try:
            with open(f"{self.dir}/{name}") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def _wait(self, ready, what, seconds=20):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if ready():
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{what}: {p.args[0]} exited with {p.returncode}\n"
                                       f"{self.log('munged.err')}{self.log('slurmctld.log')}\n"
                                       f"{self.log('slurmd.log')}")
            time.sleep(0.2)
        raise RuntimeError(f"{what}\n{self.log('slurmctld.log')}\n{self.log('slurmd.log')}")

    def close(self):
        if self.procs:
            try:
                self.run("scancel", "--full", "--user=root", timeout=10)
            except Exception:
                pass
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        self.munge_err.close()
        shutil.rmtree(self.dir, ignore_errors=True)

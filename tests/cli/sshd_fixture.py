"""A throw-away OpenSSH server on a loopback port, for tests of remote lanes.

Host and user keys are generated in a temporary folder; the client side is an ssh config
file (DEVICERACE_SSH_CONFIG) naming the host alias, the port, the key and a known_hosts file
holding the server's key. Nothing outside the folder is read or written (except /run/sshd,
which OpenSSH's privilege separation needs when running as root).
"""
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available():
    """Why the fixture cannot run here, or None."""
    if not os.path.exists(SSHD):
        return "sshd is not installed (Debian package openssh-server; scripts/setup installs it)"
    if not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "the OpenSSH client is not installed"
    return None


class Sshd:
    ALIAS = "devicerace-test-host"

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="devicerace-sshd-")
        self.port = free_port()
        self.user = getpass.getuser()
        d = self.dir
        for name in ("host_key", "user_key", "other_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{d}/{name}"], check=True)
        shutil.copy(f"{d}/user_key.pub", f"{d}/authorized_keys")
        os.chmod(d, 0o700)
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        with open(f"{d}/sshd_config", "w") as f:
            f.write(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
AuthorizedKeysFile {d}/authorized_keys
PidFile {d}/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
LogLevel ERROR
""")
        with open(f"{d}/host_key.pub") as f:
            host_key = " ".join(f.read().split()[:2])
        with open(f"{d}/known_hosts", "w") as f:
            f.write(f"[127.0.0.1]:{self.port} {host_key}\n")
        open(f"{d}/empty_known_hosts", "w").close()
        self.config = self.client_config("known_hosts", "user_key")
        self.proc = None
        self.start()

    def client_config(self, known_hosts, key, port=None, name="ssh_config"):
        """An ssh config for the alias; variants test refused keys, unknown host keys, wrong ports."""
        path = f"{self.dir}/{name}"
        with open(path, "w") as f:
            f.write(f"""Host {self.ALIAS}
    HostName 127.0.0.1
    Port {port or self.port}
    User {self.user}
    IdentityFile {self.dir}/{key}
    IdentitiesOnly yes
    IdentityAgent none
    UserKnownHostsFile {self.dir}/{known_hosts}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    LogLevel ERROR
""")
        return path

    def start(self):
        with open(f"{self.dir}/sshd.log", "ab") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", f"{self.dir}/sshd_config"],
                                         stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        deadline = time.time() + 10
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                with open(f"{self.dir}/sshd.log") as log:
                    raise RuntimeError(f"sshd did not start: {log.read()}")
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 10 s")

    def sshd_pids(self):
        """The listener and every per-connection sshd it forked (not the programs they run)."""
        pids = {self.proc.pid}
        changed = True
        while changed:
            changed = False
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) in pids:
                    continue
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        stat = f.read()
                    exe = os.readlink(f"/proc/{entry}/exe")
                except OSError:
                    continue
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
                if ppid in pids and os.path.basename(exe) == "sshd":
                    pids.add(int(entry))
                    changed = True
        return pids

    def kill(self):
        """Kills the server and its sessions at once, as a dropped network would end them."""
        for pid in self.sshd_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_or_skip():
    """A running Sshd for a test class's setUpClass; unittest.SkipTest where sshd cannot run as this
    user (as root it must start: a failure there is a real one)."""
    import unittest
    try:
        return Sshd()
    except RuntimeError as e:
        if os.geteuid() == 0:
            raise
        raise unittest.SkipTest(f"sshd cannot run as this user here: {e}")


class WithSshd:
    """A test class's throw-away sshd for all its tests (mix in before unittest.TestCase): `sshd`,
    and `host`, the ssh:// URL of its alias."""

    @classmethod
    def setUpClass(cls):
        cls.sshd = start_or_skip()
        cls.host = f"ssh://{Sshd.ALIAS}"

    @classmethod
    def tearDownClass(cls):
        cls.sshd.stop()

"""Real test hosts on one machine: network namespaces on a bridge, one OpenSSH sshd each.

Each host is a network namespace joined to a private bridge by a veth pair, with its own
address, an sshd listening on it (own ed25519 host key, key-only auth), and its own
hostname and /etc/hosts through a private UTS and mount namespace. The filesystem and
PID space are shared with the controller, so tests can plant faults and look at what a
probe left behind. Needs root, iproute2, util-linux and openssh-server.

    with TestHosts(4, tmp_dir) as hosts:
        hosts.write_inventory(path)
        hosts.stop_sshd(hosts[2])  # faults, for real

Names carry a random prefix and the hosts a random 10.213.X.0/24, so two runs on one
machine do not collide. Teardown kills every process in each namespace, then removes
the namespaces and the bridge, also after a failed run.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REQUIRED_TOOLS = ("ip", "nsenter", "unshare", "ssh-keygen", "/usr/sbin/sshd")
SFTP_SERVER = "/usr/lib/openssh/sftp-server"

# Inside the host's private namespaces: its name, its /etc/hosts, a .bashrc of its own
# (empty: root's may run slow shell init on every command; a test may make it chatty, as
# HPC login shells loading modules are), then sshd in the foreground.
HOST_INIT = ('hostname "$1" && mount --bind "$2" /etc/hosts && '
             '{ [ ! -e "$3/.bashrc" ] || mount --bind "$4" "$3/.bashrc"; } && '
             'exec /usr/sbin/sshd -D -e -f "$5"')


def missing_requirements() -> str:
    """Why test hosts cannot be built here, or '' when they can."""
    if os.geteuid() != 0:
        return "test hosts need root"
    missing = [t for t in REQUIRED_TOOLS if not shutil.which(t)]
    if not os.path.exists(SFTP_SERVER):
        missing.append(SFTP_SERVER)
    return f"missing tools: {', '.join(missing)} (apt-get install openssh-server iproute2)" \
        if missing else ""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=60)


@dataclass
class Host:
    name: str
    address: str
    netns: str
    veth: str  # the root namespace's end, on the bridge
    dir: Path
    sshd: subprocess.Popen | None = None
    host_key_line: str = ""


@dataclass
class TestHosts:
    count: int
    workdir: Path
    prefix: str = field(default_factory=lambda: f"bt{random.randrange(16**4):04x}")
    subnet: str = ""
    hosts: list[Host] = field(default_factory=list)

    __test__ = False  # not a test class, whatever its name

    def __post_init__(self):
        self.workdir = Path(self.workdir)
        if not self.subnet:
            self.subnet = _free_subnet()
        self.bridge = f"{self.prefix}-br"
        self.client_key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.hosts_file = self.workdir / "hosts"

    def __enter__(self) -> TestHosts:
        try:
            self.start()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def start(self) -> None:
        problem = missing_requirements()
        if problem:
            raise RuntimeError(problem)
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "burnin-tests",
           "-f", str(self.client_key))
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        self.hosts = [self._make_host(i) for i in range(1, self.count + 1)]
        self.hosts_file.write_text("127.0.0.1 localhost\n" + "".join(
            f"{h.address} {h.name}\n" for h in self.hosts))
        self.write_known_hosts()
        for h in self.hosts:
            self.start_sshd(h, wait=False)
        for h in self.hosts:
            self.wait_listening(h)

    def _make_host(self, i: int) -> Host:
        h = Host(name=f"h{i}", address=f"{self.subnet}.{10 + i}",
                 netns=f"{self.prefix}-h{i}", veth=f"{self.prefix}-v{i}",
                 dir=self.workdir / f"h{i}")
        h.dir.mkdir()
        sh("ip", "netns", "add", h.netns)
        sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", f"{self.prefix}-p{i}")
        sh("ip", "link", "set", f"{self.prefix}-p{i}", "netns", h.netns, "name", "eth0")
        sh("ip", "link", "set", h.veth, "master", self.bridge, "up")
        for cmd in (("addr", "add", f"{h.address}/24", "dev", "eth0"),
                    ("link", "set", "eth0", "up"), ("link", "set", "lo", "up")):
            sh("ip", "-n", h.netns, *cmd)
        key = h.dir / "ssh_host_ed25519_key"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        kind, blob = (key.with_suffix(".pub")).read_text().split()[:2]
        h.host_key_line = f"{h.address} {kind} {blob}"
        (h.dir / "sshd_config").write_text(
            f"ListenAddress {h.address}\nPort 22\nHostKey {key}\nPidFile {h.dir}/sshd.pid\n"
            f"AuthorizedKeysFile {self.workdir}/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"Subsystem sftp {SFTP_SERVER}\nLogLevel ERROR\nMaxStartups 200:30:400\n"
            "MaxSessions 64\n")
        (self.workdir / "authorized_keys").write_text(
            self.client_key.with_suffix(".pub").read_text())
        return h

    def write_known_hosts(self, skip: tuple[Host, ...] = ()) -> None:
        self.known_hosts.write_text("".join(f"{h.host_key_line}\n" for h in self.hosts
                                            if h not in skip))

    def bashrc(self, h: Host) -> Path:
        """The host's root .bashrc: write to it to change what its login shells do."""
        return h.dir / "bashrc"

    def start_sshd(self, h: Host, wait: bool = True) -> None:
        home = os.path.expanduser("~root")
        if not self.bashrc(h).exists():
            self.bashrc(h).write_text("")
        h.sshd = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{h.netns}", "--", "unshare", "--uts", "--mount",
             "--propagation", "private", "--", "sh", "-c", HOST_INIT, "sh", h.name,
             str(self.hosts_file), home, str(self.bashrc(h)), str(h.dir / "sshd_config")],
            stdout=subprocess.DEVNULL, stderr=open(h.dir / "sshd.log", "ab"))
        if wait:
            self.wait_listening(h)

    def wait_listening(self, h: Host, timeout_s: float = 15) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection((h.address, 22), timeout=1).close()
                return
            except OSError:
                if h.sshd.poll() is not None or time.monotonic() > deadline:
                    log = (h.dir / "sshd.log").read_text(errors="replace")
                    raise RuntimeError(f"sshd on {h.name} did not start: {log}") from None
                time.sleep(0.05)

    # --- faults, for real -------------------------------------------------------------

    def stop_sshd(self, h: Host) -> None:
        """Stop the listening sshd (new connections are refused)."""
        if h.sshd and h.sshd.poll() is None:
            h.sshd.kill()
            h.sshd.wait()

    def kill_all_sshd(self, h: Host) -> None:
        """Kill every sshd of the host, the sessions' too: open connections drop."""
        self.stop_sshd(h)
        for pid in self.pids(h):
            if _comm(pid) == "sshd":
                _kill(pid)

    def link_down(self, h: Host) -> None:
        sh("ip", "link", "set", h.veth, "down")

    def rate_limit(self, h: Host, rate: str = "100mbit", burst: str = "64kb") -> None:
        """Slow the host's link for real: a token bucket on its bridge-side veth (this
        kernel has no netem), which limits what reaches the host; the first `burst` bytes
        pass at full speed."""
        sh("tc", "qdisc", "add", "dev", h.veth, "root", "tbf", "rate", rate, "burst", burst,
           "latency", "50ms")

    def block_outbound(self, h: Host) -> None:
        """The host can no longer open connections to the others (answers still flow)."""
        rules = (f"add table inet burnin\n"
                 f"add chain inet burnin out {{ type filter hook output priority 0; }}\n"
                 f"add rule inet burnin out ip daddr {self.subnet}.0/24 ct state new drop\n")
        subprocess.run(["ip", "netns", "exec", h.netns, "nft", "-f", "-"], input=rules,
                       text=True, check=True, capture_output=True, timeout=30)

    def only_via(self, h: Host, bastion: Host) -> None:
        """The controller can no longer reach h's sshd; `bastion` still can: h is behind
        it, as nodes behind a login host are."""
        rules = (f"add table inet burnin_in\n"
                 f"add chain inet burnin_in in {{ type filter hook input priority 0; }}\n"
                 f"add rule inet burnin_in in ip saddr {self.subnet}.1 tcp dport 22 drop\n")
        subprocess.run(["ip", "netns", "exec", h.netns, "nft", "-f", "-"], input=rules,
                       text=True, check=True, capture_output=True, timeout=30)

    def pids(self, h: Host) -> list[int]:
        res = sh("ip", "netns", "pids", h.netns, check=False)
        return [int(p) for p in res.stdout.split()]

    # --- the controller's view -----------------------------------------------------

    def inventory(self, **defaults) -> dict:
        base = {"transport": "ssh", "python": sys.executable, "gpus": 0,
                "workdir": str(self.workdir / "remote"),
                "ssh": {"user": "root", "identity_file": str(self.client_key),
                        "known_hosts": str(self.known_hosts),
                        # A loaded machine can take seconds to answer a healthy host's
                        # handshake: a test that needs "no answer" sets a short time-out on
                        # the unreachable node alone.
                        "connect_timeout_s": 30}}
        for key, value in defaults.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        return {"version": 1, "cluster": self.prefix, "defaults": base,
                "nodes": [{"name": h.name, "address": h.address} for h in self.hosts]}

    def write_inventory(self, path: Path, nodes: dict[str, dict] | None = None,
                        checks: dict | None = None, **defaults) -> Path:
        """Write an inventory of every host; `nodes` adds per-node overrides by name."""
        doc = self.inventory(**defaults)
        for entry in doc["nodes"]:
            entry.update((nodes or {}).get(entry["name"], {}))
        if checks:
            doc["checks"] = checks
        Path(path).write_text(yaml.safe_dump(doc, sort_keys=False))
        return Path(path)

    def teardown(self) -> None:
        for h in self.hosts:
            for _ in range(3):  # processes can fork while we kill; look again
                pids = self.pids(h)
                if not pids:
                    break
                for pid in pids:
                    _kill(pid)
                time.sleep(0.05)
            if h.sshd:
                try:
                    h.sshd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            sh("ip", "netns", "del", h.netns, check=False)
            sh("ip", "link", "del", h.veth, check=False)
        sh("ip", "link", "del", self.bridge, check=False)
        self.hosts = []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _free_subnet() -> str:
    used = sh("ip", "-o", "-4", "addr", "show", check=False).stdout
    for _ in range(100):
        candidate = f"10.213.{random.randrange(1, 255)}"
        if f" {candidate}." not in used:
            return candidate
    raise RuntimeError("no free 10.213.X.0/24 for test hosts")

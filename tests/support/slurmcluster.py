"""A real Slurm cluster on the test hosts: munged, slurmctld and one slurmd per host.

Builds on TestHosts (tests/support/testhosts.py): each host's slurmd runs in that host's network
namespace with its own hostname; slurmctld runs in the root namespace on the bridge's
address under its own hostname; one munged serves all through its socket file. Commands
(srun, scontrol, sinfo) find the cluster through SLURM_CONF, which env() returns.
Needs root and Debian's slurmctld, slurmd, slurm-client and munge.

GPUs are declared as Slurm GRES, as on a GPU cluster: `SlurmCluster(hosts, gpus=2)` gives
each host `Gres=gpu:2` backed by character devices standing in for /dev/nvidia0.. (aliases
of /dev/null; gres.conf with AutoDetect=off), under select/cons_tres. A job that asks for
them sees CUDA_VISIBLE_DEVICES; one that does not, sees none. `gpus` may be a dict
{host name: count} for a mixed cluster.

    with TestHosts(4, d) as hosts, SlurmCluster(hosts, gpus=2) as slurm:
        subprocess.run(["srun", "-N4", "--gres=gpu:2", "env"], env=slurm.env())
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.testhosts import TestHosts

REQUIRED = ("munged", "slurmctld", "slurmd", "srun", "scontrol", "sinfo")


def missing_requirements() -> str:
    missing = [t for t in REQUIRED if not shutil.which(t)]
    return (f"missing Slurm tools: {', '.join(missing)} (apt-get install slurmctld slurmd "
            "slurm-client munge)") if missing else ""


class SlurmCluster:
    def __init__(self, hosts: TestHosts, gpus: int | dict[str, int] = 0, cpus: int = 2,
                 epilog_s: float = 0, extra_conf: str = ""):
        self.hosts = hosts
        self.extra_conf = extra_conf  # slurm.conf lines of a test's own (HealthCheckProgram)
        self.epilog_s = epilog_s  # an Epilog this long keeps a finished job's nodes COMPLETING
        self.gpus = {h.name: gpus.get(h.name, 0) if isinstance(gpus, dict) else gpus
                     for h in hosts.hosts}
        self.cpus = cpus  # per host: an all-reduce step runs one task per GPU
        self.dir = hosts.workdir / "slurm"
        self.conf = self.dir / "slurm.conf"
        self.port = random.randrange(20000, 30000)
        self.procs: list[subprocess.Popen] = []

    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        problem = missing_requirements()
        if problem:
            raise RuntimeError(problem)
        d = self.dir
        for sub in ("munge", "state", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        # Unix socket paths (munge's, slurmstepd's under the spool) are limited to 108
        # bytes: a test's own directory, under an xdist worker's, can be longer.
        self.short = Path(tempfile.mkdtemp(prefix="bsl-", dir="/tmp"))
        (self.short / "spool").mkdir()
        self.short.chmod(0o755)  # the socket's directory must be world-executable
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.socket = self.short / "munge.socket"
        self._spawn(["munged", "--foreground", "--force", f"--socket={self.socket}",
                     f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
                     f"--log-file={d}/log/munged.log", f"--seed-file={d}/munge/seed"])
        self._wait(lambda: self.socket.exists(), "munged")
        ctl = f"{self.hosts.subnet}.1"
        nodes = "".join(f"NodeName={h.name} NodeAddr={h.address} CPUs={self._cpus(h.name)}"
                        f"{self._gres(h.name)} State=UNKNOWN\n" for h in self.hosts.hosts)
        self._write_gres_conf()
        self.conf.write_text(
            f"ClusterName=burnintest\nSlurmctldHost=ctl({ctl})\nSlurmctldPort={self.port}\n"
            "SlurmdPort=6818\nSlurmUser=root\nSlurmdUser=root\n"
            f"AuthType=auth/munge\nAuthInfo=socket={self.socket}\nCredType=cred/munge\n"
            f"StateSaveLocation={d}/state\nSlurmdSpoolDir={self.short}/spool/%n\n"
            f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.%n.pid\n"
            f"SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.%n.log\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nReturnToService=2\n"
            "SlurmdTimeout=10\nMessageTimeout=5\nSchedulerType=sched/builtin\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nGresTypes=gpu\n"
            "MpiDefault=none\nJobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/none\nInactiveLimit=0\nKillWait=2\n"
            "MinJobAge=5\n" + self._epilog() + self.extra_conf +
            # The hosts share this machine's cores: slurmd reports the configured CPUs.
            "SlurmdParameters=config_overrides\n"
            f"{nodes}PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
        hosts_file = d / "hosts"
        hosts_file.write_text(self.hosts.hosts_file.read_text() + f"{ctl} ctl\n")
        init = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
        self._spawn(["unshare", "--uts", "--mount", "--propagation", "private", "--", "sh",
                     "-c", init, "sh", "ctl", str(hosts_file), "slurmctld", "-D", "-c",
                     "-f", str(self.conf)])
        for h in self.hosts.hosts:
            self._spawn(["nsenter", f"--net=/run/netns/{h.netns}", "--", "unshare", "--uts",
                         "--mount", "--propagation", "private", "--", "sh", "-c", init, "sh",
                         h.name, str(hosts_file), "slurmd", "-D", "-N", h.name,
                         "-f", str(self.conf)])
        self._wait(self._all_idle, "every slurmd to register idle", timeout_s=60)

    def _epilog(self) -> str:
        if not self.epilog_s:
            return ""
        script = self.dir / "epilog.sh"
        self.set_epilog(self.epilog_s)
        script.write_text(f"#!/bin/sh\nsleep \"$(cat {self.dir / 'epilog_s'})\"\n")
        script.chmod(0o755)
        return f"Epilog={script}\n"

    def set_epilog(self, seconds: float) -> None:
        """How long the Epilog of the jobs that end from now on takes (a cluster made with
        an epilog_s): a test that needs one job COMPLETING for long need not wait that
        long again for each job after it."""
        (self.dir / "epilog_s").write_text(f"{seconds:g}\n")

    def _cpus(self, node: str) -> int:
        return max(self.cpus, self.gpus[node])

    def _gres(self, node: str) -> str:
        return f" Gres=gpu:{self.gpus[node]}" if self.gpus[node] else ""

    def _write_gres_conf(self) -> None:
        """Device files standing in for each host's /dev/nvidia*: character devices (as
        /dev/null), which is what slurmd's gres/gpu plugin requires of a File=."""
        lines = ["AutoDetect=off\n"]
        for h in self.hosts.hosts:
            count = self.gpus[h.name]
            if not count:
                continue
            devices = self.dir / "dev" / h.name
            devices.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                dev = devices / f"nvidia{i}"
                if not dev.exists():
                    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                    dev.chmod(0o666)  # past the umask
            lines.append(f"NodeName={h.name} Name=gpu File={devices}/nvidia[0-{count - 1}]\n")
        (self.dir / "gres.conf").write_text("".join(lines))

    def _spawn(self, argv: list[str]) -> None:
        log = open(self.dir / "log" / f"{Path(argv[0]).name}-{len(self.procs)}.out", "ab")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env()))

    def _wait(self, ready, what: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "".join(f"\n--- {f.name}\n{f.read_text(errors='replace')[-1500:]}"
                               for f in sorted((self.dir / "log").iterdir()))
                why = f"exited: {dead}" if dead else "timed out"
                raise RuntimeError(f"waiting for {what}: {why}{logs}")
            time.sleep(0.2)

    def _all_idle(self) -> bool:
        res = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                             text=True, env=self.env(), timeout=30)
        states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
        return len(states) == len(self.hosts.hosts) and all(
            s == "idle" for s in states.values())

    def state(self, node: str) -> tuple[str, str]:
        """(state, reason) of a node as Slurm reports it, e.g. ('drained', 'burnin: ...')."""
        res = subprocess.run(["sinfo", "-h", "-n", node, "-N", "-o", "%T|%E"],
                             capture_output=True, text=True, env=self.env(), timeout=30)
        state, _, reason = res.stdout.strip().partition("|")
        # A trailing '*' is Slurm's "not responding" flag, which a just-resumed node
        # shows here until slurmctld's next ping: the state is what is asserted.
        return state.rstrip("*"), "" if reason == "none" else reason

    def slurmd_pid(self, node: str) -> int:
        """The pid of `node`'s slurmd: its mount namespace is the node's own."""
        h = next(h for h in self.hosts.hosts if h.name == node)
        for pid in self.hosts.pids(h):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd":
                    return pid
            except OSError:
                continue
        raise RuntimeError(f"no slurmd running for {node}")

    def in_node(self, node: str, *argv: str) -> subprocess.CompletedProcess:
        """Run argv in `node`'s mount namespace (umount, mount: that node's view alone)."""
        return subprocess.run(["nsenter", f"--mount=/proc/{self.slurmd_pid(node)}/ns/mnt",
                               "--", *argv], capture_output=True, text=True, timeout=30)

    def scontrol(self, *args: str) -> None:
        subprocess.run(["scontrol", *args], check=True, capture_output=True, env=self.env(),
                       timeout=30)

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True,
                       env=self.env(), timeout=30, check=False)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()  # slurmstepd ignores SIGTERM; processes in the hosts' namespaces
            try:    # are killed by TestHosts' teardown
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        if getattr(self, "short", None) is not None:
            shutil.rmtree(self.short, ignore_errors=True)


# Logs a Slurm command's argv (and, for a step of a job, the job as Slurm shows it at that
# moment: exclusive? which GRES?), then becomes the real command: same process, signals.
LOGGING = """import json, os, subprocess, sys
real, log = {real!r}, {log!r}
entry = {{"cmd": os.path.basename(real), "argv": sys.argv[1:]}}
job = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--jobid=")), None)
if job:
    entry["job"] = subprocess.run(["scontrol", "show", "job", job, "--oneliner"],
                                  capture_output=True, text=True).stdout
with open(log, "a") as f:
    f.write(json.dumps(entry) + "\\n")
os.execv(real, [real, *sys.argv[1:]])
"""


def logged_commands(directory: Path, commands=("srun", "salloc")) -> tuple[str, Path]:
    """(a PATH on which each of `commands` logs every call, the log): one JSON line per
    call, {"cmd", "argv", "job"}. Read it with calls(log)."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "calls.jsonl"
    log.touch()
    for name in commands:
        real = shutil.which(name)
        wrapper = directory / name
        wrapper.write_text(f"#!{sys.executable}\n" + LOGGING.format(real=real, log=str(log)))
        wrapper.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}", log


def calls(log: Path, cmd: str | None = None) -> list[dict]:
    entries = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
    return [e for e in entries if cmd is None or e["cmd"] == cmd]


def option(argv: list[str], name: str) -> str | None:
    """The value of --name=VALUE in argv, or None."""
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), None)

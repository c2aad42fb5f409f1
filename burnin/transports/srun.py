"""The srun transport: probes run as one-task Slurm job steps, `srun -w NODE -N1 ...`.

Probes travel on stdin, not through a shared file system: a small bootstrap (run by the
node's Python) writes them into a private directory under workdir, runs the probe with
its settings and removes the directory, also when killed. `--immediate` makes a node
Slurm cannot give (down, drained by someone else) fail with Slurm's reason, never hang.

A node that burnin itself drained is re-tested inside a reservation of its own for the
run (created, node resumed into it, drained again and the reservation deleted at the
end), so that no production job lands on it meanwhile.
"""

from __future__ import annotations

import getpass
import json
import secrets
import subprocess

from burnin.actions import REASON_PREFIX, slurm_reason
from burnin.transports import NodeUnreachable, Transport
from burnin.transports.local import run_bounded

BOOTSTRAP = r"""
import json, os, shutil, signal, subprocess, sys, tempfile, threading
probe, workdir = sys.argv[1], os.path.expanduser(sys.argv[2])
envelope = json.loads(sys.stdin.buffer.readline())
os.makedirs(workdir, exist_ok=True)
where = tempfile.mkdtemp(prefix="burnin-", dir=workdir)
child = None
def stop(sig, frame):
    if child is not None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(where, ignore_errors=True)
    os._exit(128 + sig)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
try:
    for name, text in envelope["files"].items():
        with open(os.path.join(where, name), "w") as f:
            f.write(text)
    child = subprocess.Popen([sys.executable, os.path.join(where, probe + ".py")],
                             stdin=subprocess.PIPE, start_new_session=True)
    def relay():  # the settings, then the controller's heartbeat and its end: the lifeline
        try:
            child.stdin.write(envelope["stdin"].encode() + b"\n")
            child.stdin.flush()
            while envelope.get("lifeline"):
                chunk = os.read(0, 4096)
                if not chunk:
                    break
                child.stdin.write(chunk)
                child.stdin.flush()
        except OSError:
            pass
        finally:
            try:
                child.stdin.close()
            except OSError:
                pass
    threading.Thread(target=relay, daemon=True).start()
    code = child.wait()
finally:
    shutil.rmtree(where, ignore_errors=True)
sys.exit(code if code >= 0 else 128 - code)
"""

REFUSALS = (b"Unable to allocate resources", b"Required node not available",
            b"Invalid node name", b"invalid partition", b"Unable to contact slurm controller")
RESERVATION_MINUTES = 24 * 60


class SrunTransport(Transport):
    def __init__(self, node, probes_dir, run_id="unnamed"):
        super().__init__(node, probes_dir, run_id)
        self._prepared = False
        self._reservation: str | None = None
        self._drain_reason = ""
        self._files: dict[str, str] | None = None

    def _scontrol(self, *args: str) -> tuple[bool, str]:
        try:
            res = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                                 timeout=self.node.ssh.connect_timeout_s + 30)
        except (FileNotFoundError, subprocess.TimeoutExpired) as e:
            return False, str(e)
        return res.returncode == 0, (res.stderr or res.stdout).strip()

    def _prepare(self) -> None:
        """Once per run: a node burnin drained is resumed into a reservation of its own."""
        if self._prepared:
            return
        self._prepared = True
        reason = slurm_reason(self.node.name) or ""
        if not reason.startswith(REASON_PREFIX):
            return  # not ours: if Slurm cannot give it, srun says so
        name = f"burnin-{self.node.name}-{secrets.token_hex(3)}"
        ok, msg = self._scontrol("create", "reservation", f"ReservationName={name}",
                                 f"Nodes={self.node.name}", f"Users={getpass.getuser()}",
                                 "StartTime=now", f"Duration={RESERVATION_MINUTES}",
                                 "Flags=MAINT,IGNORE_JOBS")
        if not ok:
            raise NodeUnreachable(f"cannot reserve {self.node.name} to re-test it: {msg}")
        self._reservation, self._drain_reason = name, reason
        ok, msg = self._scontrol("update", f"nodename={self.node.name}", "state=resume")
        if not ok:
            raise NodeUnreachable(f"cannot resume {self.node.name} into {name}: {msg}")

    def probe_command(self, probe: str) -> list[str]:
        self._prepare()
        srun = self.node.srun
        argv = ["srun", "-w", self.node.name, "-N1", "--ntasks=1",
                f"--immediate={max(1, int(self.node.ssh.connect_timeout_s))}",
                f"--job-name=burnin-{probe}"]
        if srun.partition:
            argv.append(f"--partition={srun.partition}")
        if self._reservation:
            argv.append(f"--reservation={self._reservation}")
        return [*argv, *srun.extra_args, self.python, "-c", BOOTSTRAP, probe, self.node.workdir]

    def run(self, argv, stdin, timeout_s, max_stdout, on_stderr=None, lifeline=False,
            cancel=None):
        if self._files is None:
            self._files = {p.name: p.read_text() for p in sorted(self.probes_dir.glob("*.py"))}
        envelope = json.dumps({"files": self._files, "stdin": stdin.decode(),
                               "lifeline": lifeline}).encode()
        # The envelope is one line; with a lifeline the heartbeat follows and is relayed.
        result = run_bounded(argv, envelope, timeout_s, max_stdout, on_stderr=on_stderr,
                             lifeline=True, cancel=cancel)
        if result.exit_code and any(r in result.stderr_tail for r in REFUSALS):
            said = [ln.strip() for ln in result.stderr_tail.decode(errors="replace").splitlines()
                    if ln.startswith("srun:")]
            raise NodeUnreachable(f"Slurm cannot give node {self.node.name}: "
                                  f"{'; '.join(said[-2:]) or 'srun refused'}")
        return result

    def close(self) -> None:
        if not self._reservation:
            return
        # Back as it was: drained with burnin's reason. The gate resumes it if released.
        self._scontrol("update", f"nodename={self.node.name}", "state=drain",
                       f"reason={self._drain_reason}")
        self._scontrol("delete", f"reservation={self._reservation}")
        self._reservation = None

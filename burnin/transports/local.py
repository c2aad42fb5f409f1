"""The local transport: the probe runs as a subprocess of the controller."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time

from burnin.transports import HEARTBEAT_S, CommandResult, Transport, claims
from burnin.transports.reading import read_bounded

KILL_GRACE_S = 2.0
# Where a local node's ranks meet the other members of a group when the inventory gives
# the node no address (its address is then its name, which need not resolve).
LOOPBACK = "127.0.0.1"


class LocalTransport(Transport):
    def __init__(self, node, probes_dir, run_id="unnamed"):
        super().__init__(node, probes_dir, run_id)
        self._claimed: str | None = None  # the workdir the node is claimed in

    @classmethod
    def rendezvous_address(cls, node) -> str:
        """A local node's probes run on the controller's machine: its address where the
        inventory gives one, else the loopback."""
        return LOOPBACK if node.address == node.name else node.address

    @property
    def python(self) -> str:
        # On the controller's own machine the interpreter running pytest is the one
        # that has torch, unless the inventory says otherwise.
        return self.node.python or sys.executable

    def probe_command(self, probe: str) -> list[str]:
        if self._claimed is None:
            workdir = os.path.expanduser(self.node.workdir)
            claims.claim(workdir, self.node.name, self.run_id)
            self._claimed = workdir
        return [self.python, str(self.probes_dir / f"{probe}.py")]

    def close(self) -> None:
        workdir, self._claimed = self._claimed, None
        if workdir is not None:
            claims.release(workdir, self.node.name, self.run_id)

    # A transport dropped without close() (a caller that ran one probe) must not keep its
    # node claimed for the life of the process.
    def __del__(self) -> None:
        workdir, self._claimed = self._claimed, None
        if workdir is not None:
            claims.release_later(workdir, self.node.name, self.run_id)

    def run(self, argv: list[str], stdin: bytes, timeout_s: float, max_stdout: int,
            on_stderr=None, lifeline: bool = False, cancel=None) -> CommandResult:
        return run_bounded(argv, stdin, timeout_s, max_stdout, on_stderr=on_stderr,
                           lifeline=lifeline, cancel=cancel)


def run_bounded(argv: list[str], stdin: bytes, timeout_s: float, max_stdout: int,
                env: dict | None = None, on_stderr=None, lifeline: bool = False,
                cancel: threading.Event | None = None) -> CommandResult:
    """Run argv in its own process group; bound its time and what is kept of its output.

    At the timeout, or when stdout passes max_stdout, the whole group gets SIGTERM and,
    after a short grace, SIGKILL. stderr keeps only its last STDERR_TAIL_BYTES.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=env)
    except OSError as e:
        return CommandResult(127, b"", f"cannot start {argv[0]}: {e}".encode(), 0.0)
    done = threading.Event()
    feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin, lifeline, done),
                              daemon=True)
    feeder.start()

    deadline = start + timeout_s
    with _Pipes(proc) as pipes:
        r = read_bounded(pipes, deadline, max_stdout, on_stderr, cancel)
    timed_out = r.timed_out
    if r.stopped:
        kill_group(proc)
    else:
        # Output closed; the process may linger a moment, or hang after closing its pipes.
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
    done.set()
    assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE, ...)
    proc.stdout.close()
    proc.stderr.close()
    return CommandResult(
        exit_code=None if timed_out or r.stopped else proc.returncode,
        stdout=r.stdout[:max_stdout], stderr_tail=r.stderr_tail,
        duration_s=time.monotonic() - start, timed_out=timed_out, overflow=r.overflow,
        cancelled=r.cancelled)


class _Pipes:
    """A subprocess's stdout and stderr as the read loop's Source."""

    def __init__(self, proc: subprocess.Popen):
        self.sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE, ...)
        self.sel.register(proc.stdout, selectors.EVENT_READ, "out")
        self.sel.register(proc.stderr, selectors.EVENT_READ, "err")

    def __enter__(self) -> _Pipes:
        return self

    def __exit__(self, *exc) -> None:
        self.sel.close()

    def ended(self) -> bool:
        return not self.sel.get_map()

    def read(self, timeout_s: float) -> tuple[bytes, bytes]:
        got = {"out": b"", "err": b""}
        for key, _ in self.sel.select(timeout=timeout_s):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                self.sel.unregister(key.fileobj)
            got[key.data] += chunk
        return got["out"], got["err"]


def _feed(pipe, data: bytes, lifeline: bool, done: threading.Event) -> None:
    """Write the settings; with a lifeline, then a heartbeat until the command is done."""
    try:
        pipe.write(data + b"\n" if lifeline else data)
        pipe.flush()
        while lifeline and not done.wait(HEARTBEAT_S):
            pipe.write(b"\n")
            pipe.flush()
    except (OSError, ValueError):
        pass  # the probe exited without reading; its exit code says the rest
    finally:
        try:
            pipe.close()
        except (OSError, ValueError):
            pass


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to `proc`'s process group (a session leader's), SIGKILL if it lingers, and
    SIGKILL to what is left of the group once the leader is gone."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            if sig == signal.SIGTERM:
                # The leader is gone; make sure none of its group outlives it.
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue

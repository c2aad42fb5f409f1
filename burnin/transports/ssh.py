"""The ssh transport, on paramiko: key authentication, strict host keys, a timeout on
everything, one connection per node per run (sshconnect.py).

Per run, a holder process on the node (nodeside.HOLDER) checks the staging directory is
safe, takes the node's lock (a second run against a node under test fails it "busy"),
and makes a private directory into which it writes the probes, sent once down its own
stdin as one compressed stream (made once per run: probes_archive); when its connection
closes (the run ends, or the controller or the link dies) it removes that directory and
the lock is gone with it. (SFTP, a request per file and a subsystem per node, cost the
controller 27 ms per node: benchmarks/ssh_start_skew.py.)

Remote command lines are built from argv lists with shlex; no inventory value is ever
pasted into a shell line unquoted. A probe's shell writes its PID to a pidfile in the
private directory, so the kill at a timeout never depends on parsing what a node prints
(login shells that print banners on stderr are common on HPC nodes).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import paramiko

from burnin.transports import CommandResult, NodeBusy, NodeUnreachable, Transport
from burnin.transports.fanout import start_gate
from burnin.transports.nodeside import HOLDER
from burnin.transports.reading import LINE_MAX, POLL_S, capped, read_bounded, too_long
from burnin.transports.sshbounds import Bound, bounded, within
from burnin.transports.sshchannel import LIFELINE, ChannelSource
from burnin.transports.sshconnect import connect, hang_up, transport_of

KILL_GRACE_S = 2
# How often a running probe's read loop wakes up with nothing to read, when the run's
# cancel wakes it anyway (fanout.Cancel): for the deadline it waits exactly; this is only
# a backstop. (Every second, it cost 60 us of CPU per running probe per second.)
IDLE_POLL_S = 30.0
STAGE_TIMEOUT_S = 60


class SshTransport(Transport):
    starts_together = True
    connection_held = True

    def __init__(self, node, probes_dir: Path, run_id: str = "unnamed"):
        super().__init__(node, probes_dir, run_id)
        self._client: paramiko.SSHClient | None = None
        self._hops: list[paramiko.SSHClient] = []
        self._holder: paramiko.Channel | None = None
        self._staged: str | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"{self.node.address}:{self.node.ssh.port}"

    def _connect(self) -> paramiko.SSHClient:
        client = self._client
        t = client.get_transport() if client is not None else None
        if client is not None and t is not None and t.is_active():
            return client
        if self._client is not None:
            self._client = None
            raise NodeUnreachable(f"connection to {self.where} lost")
        self._client, self._hops = connect(self.node)
        return self._client

    # --- the node, held for the run -----------------------------------------------

    def _hold(self, client: paramiko.SSHClient) -> str:
        """Take the node for this run and stage the probes; the staged directory."""
        if self._staged:
            return self._staged
        # The holder needs only the standard library: the node's python3, whatever the
        # inventory's interpreter (a venv with torch) does; that one if there is none.
        args = shlex.join(["-c", HOLDER, self.node.workdir, self.node.name, self.run_id])
        line = (f"p=$(command -v python3) || p={shlex.quote(self.python)}; "
                f'exec "$p" {args}')
        wait = self.node.ssh.connect_timeout_s
        timeout = wait + STAGE_TIMEOUT_S  # the holder's interpreter may be slow to start
        try:
            what = "the start of the command that holds the node"
            with self._bounded(wait) as bound:
                chan = transport_of(client).open_session(timeout=wait)
                chan.exec_command(line)
            what = "the command that holds the node (it never said ready)"
            with self._bounded(timeout) as bound:
                chan.settimeout(timeout)  # a stalled node cannot hold us
                answers = chan.makefile("rb")
                first = answers.readline(LINE_MAX)
        except Exception as e:
            raise NodeUnreachable(f"cannot start a command on {self.where}: "
                                  f"{self._hung(bound, what, e) or e}") from None
        if too_long(first):
            within(self._bounded(wait), chan.close)
            raise NodeUnreachable(f"the command that holds {self.where} printed more than "
                                  f"{LINE_MAX} bytes without an end of line instead of ready: "
                                  f"{capped(first.decode(errors='replace'))}")
        answer = first.decode(errors="replace").strip()
        word, _, rest = answer.partition(" ")
        if word != "ready":
            status = chan.exit_status if chan.status_event.wait(5) else None
            within(self._bounded(wait), chan.close)
            if word == "busy":
                raise NodeBusy(f"under test by {capped(rest)}")
            if word == "unsafe":
                raise NodeUnreachable(f"refusing to stage probes in workdir "
                                      f"{self.node.workdir} on {self.where}: {capped(rest)}")
            if status == 127:
                raise NodeUnreachable(f"could not start: interpreter or probe not found "
                                      f"(status 127: {self.python} on {self.where})")
            raise NodeUnreachable(f"cannot prepare {self.node.workdir} on {self.where} "
                                  f"(status {status}): {capped(answer) or 'no answer'}")
        self._holder = chan
        try:
            with self._bounded(timeout) as bound:
                archive = probes_archive(self.probes_dir)
                chan.sendall(b"probes %d\n" % len(archive) + archive)
                said = answers.readline(LINE_MAX)
            staged = (f"more than {LINE_MAX} bytes without an end of line: "
                      f"{said.decode(errors='replace')}" if too_long(said)
                      else said.decode(errors="replace").strip())
        except Exception as e:
            staged = self._hung(bound, "the probes sent to it", e) or f"{type(e).__name__}: {e}"
        if not staged.startswith("staged "):
            raise NodeUnreachable(f"cannot stage probes into {capped(rest)} on {self.where}: "
                                  f"{capped(staged.removeprefix('unstaged ')) or 'no answer'}")
        self._staged = rest
        return rest

    @contextmanager
    def _bounded(self, seconds: float) -> Iterator[Bound]:
        """Bound the block's waits on this node's connection: past `seconds`, the
        connection is hung up and the block raises (sshbounds.py)."""
        clients = [c for c in (self._client, *self._hops) if c is not None]

        def hang_up_node() -> None:
            for c in clients:
                hang_up(c)
        with bounded(seconds, hang_up_node) as bound:
            yield bound

    def _hung(self, bound: Bound | None, what: str, e: Exception) -> str:
        """Why the node failed, when `e` came from its connection hung up at `bound` (or
        paramiko's own bound on a session's open); '' when it did not."""
        # paramiko's own bound on opening a session says the same as ours, in its words.
        opening = isinstance(e, paramiko.SSHException) and "Timeout opening channel" in str(e)
        if bound is None or not (bound.expired or opening):
            return ""
        return (f"no answer within {bound.seconds:g} s to {what}: the node's sshd or the link "
                "to it hung (the connection is closed)")

    def prepare(self) -> None:
        with self._lock:
            self._hold(self._connect())

    def probe_command(self, probe: str) -> list[str]:
        with self._lock:
            staged = self._hold(self._connect())
        return [self.python, f"{staged}/{probe}.py"]

    # --- commands -----------------------------------------------------------------

    def run(self, argv, stdin, timeout_s, max_stdout, on_stderr=None, lifeline=False,
            cancel=None):
        client = self._connect()
        # sshd makes the remote shell a session leader, so its PID is the probe's process
        # group, which a second channel kills at the timeout. The shell waits for the probe
        # and exits with $? (128+N for signal N): paramiko drops sshd's exit-signal.
        pidfile = f"{self._staged}/.pid-{secrets.token_hex(4)}" if self._staged else None
        line = f"{shlex.join(argv)}; exit $?"
        if pidfile:
            line = f"echo $$ > {shlex.quote(pidfile)}; {line}"
        start = time.monotonic()
        chan = self._start_command(client, line)
        self._send_settings(chan, stdin + b"\n" if lifeline else stdin, lifeline)
        if lifeline:
            LIFELINE.hold(chan)
        try:
            return self._command_result(chan, client, start, pidfile, timeout_s, max_stdout,
                                        on_stderr, cancel)
        finally:
            LIFELINE.release(chan)
            within(self._bounded(self.node.ssh.connect_timeout_s), chan.close)

    def _start_command(self, client: paramiko.SSHClient, line: str) -> paramiko.Channel:
        """A channel running `line` on the node; NodeUnreachable when none can be opened."""
        wait = self.node.ssh.connect_timeout_s
        try:
            with self._bounded(wait) as bound:
                chan = transport_of(client).open_session(timeout=wait)
                chan.exec_command(line)
        except Exception as e:
            raise NodeUnreachable(f"cannot start a command on {self.where}: "
                                  f"{self._hung(bound, 'its request', e) or e}") from None
        return chan

    def _send_settings(self, chan: paramiko.Channel, data: bytes, lifeline: bool) -> None:
        """Write `data` (the probe's settings) to the command's stdin, closed after them
        unless the lifeline's heartbeats follow; NodeUnreachable (the channel closed) when
        the write hung. A probe that exited without reading is no error here: its exit
        status says the rest."""
        wait = self.node.ssh.connect_timeout_s
        sent = self._start_together(chan, data)
        bound: Bound | None = None
        try:
            # Settings are a few kB, within the channel's window; the time-out bounds a
            # probe that neither reads them nor exits (its deadline then kills it). The
            # bound, past that time-out, is for a connection whose writes hang (a node
            # behind a bastion that stopped reading: paramiko retries them until closed).
            with self._bounded(2 * wait) as bound:
                chan.settimeout(wait)
                if sent < len(data):
                    chan.sendall(data[sent:])
                if not lifeline:
                    chan.shutdown_write()
        except Exception as e:
            hung = self._hung(bound, "the probe's settings", e)
            if hung:
                chan.close()
                raise NodeUnreachable(f"cannot send the probe its settings on {self.where}: "
                                      f"{hung}") from None

    def _command_result(self, chan: paramiko.Channel, client: paramiko.SSHClient,
                        start: float, pidfile: str | None, timeout_s, max_stdout, on_stderr,
                        cancel) -> CommandResult:
        """The command's output, read until it ends, its deadline passes or `cancel` is
        set (its process group then killed), and its exit status; NodeUnreachable when the
        connection went away under it."""
        wait = self.node.ssh.connect_timeout_s
        source = ChannelSource(chan, client, cancel)
        r = read_bounded(source, start + timeout_s, max_stdout, on_stderr, cancel,
                         IDLE_POLL_S if source.wakes else POLL_S)
        unkilled, status = "", -1
        if r.stopped:
            unkilled = self._kill_group(pidfile)
        elif chan.status_event.wait(wait):  # the output ended: the status is due
            status = chan.exit_status
        if not r.stopped and status == -1:
            # Closed with no exit status: sshd or the link went away under the probe.
            raise NodeUnreachable(f"connection to {self.where} lost after "
                                  f"{time.monotonic() - start:.0f} s while the probe ran")
        return CommandResult(
            exit_code=None if r.stopped else status,
            stdout=r.stdout[:max_stdout], stderr_tail=r.stderr_tail,
            duration_s=time.monotonic() - start, timed_out=r.timed_out,
            overflow=r.overflow, cancelled=r.cancelled, unkilled=unkilled)

    def _start_together(self, chan: paramiko.Channel, data: bytes) -> int:
        """Wait at the fan-out's start gate, if any, for the other nodes' probes to start
        (fanout.py); the bytes of `data` written from the gate's loop, the rest being
        this thread's to write. The probe reads its settings before it measures anything,
        so the probes' work starts together, a send apart."""
        gate = start_gate()
        if gate is None:
            return 0
        sent = 0

        def send_now() -> None:  # in the gate's loop: what fits the window, never waiting
            nonlocal sent
            if chan.get_transport().clear_to_send.is_set():  # not during a key exchange
                sent = chan.send(data)  # one packet: settings are a few kB
        chan.settimeout(0.0)
        gate.arrive(send_now, self.node.ssh.connect_timeout_s)
        return sent

    def _kill_group(self, pidfile: str | None) -> str:
        """Kill the command's whole process group; '' when done, else why it could not be."""
        if pidfile is None:
            return "no pidfile to find it by"
        group = f'-"$(cat {shlex.quote(pidfile)})"'
        line = (f"kill -TERM -- {group} 2>/dev/null; sleep {KILL_GRACE_S}; "
                f"kill -KILL -- {group} 2>/dev/null; true")
        return self._quiet(line, KILL_GRACE_S + self.node.ssh.connect_timeout_s)

    def _quiet(self, line: str, timeout_s: float) -> str:
        """Run a housekeeping command, bounded; '' when it ran, else why not."""
        wait = self.node.ssh.connect_timeout_s
        bound = None
        try:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                return f"the connection to {self.where} is lost"
            with self._bounded(wait) as bound:
                chan = transport.open_session(timeout=wait)
                chan.exec_command(line)
            done = chan.status_event.wait(timeout_s)  # recv_exit_status() would wait forever
            with self._bounded(wait) as bound:
                chan.close()
            return "" if done else f"no answer from {self.where} within {timeout_s:g} s"
        except Exception as e:
            hung = self._hung(bound, "a command", e)
            return f"{self.where}: {hung}" if hung else f"{type(e).__name__}: {e}"

    def close(self) -> None:
        client, self._client = self._client, None
        holder, self._holder = self._holder, None
        if holder is not None:
            # End of its stdin: the holder removes the staged directory and lets the lock go.
            wait = self.node.ssh.connect_timeout_s
            try:
                with self._bounded(wait):
                    holder.shutdown_write()
                holder.status_event.wait(wait)
                with self._bounded(wait):
                    holder.close()
            except Exception:
                pass  # hung up: the holder cleans up when its connection ends
        self._staged = None
        for c in (client, *self._hops):
            if c is not None:
                hang_up(c)
        self._hops = []


_archives: dict[str, tuple[tuple, bytes]] = {}
_archives_lock = threading.Lock()


def probes_archive(probes_dir: Path) -> bytes:
    """The probes of `probes_dir` as the holder reads them, made once per process (and
    again if a probe file changes): every node of a run is sent the same bytes."""
    with os.scandir(probes_dir) as entries:
        files = sorted((e.name, e.path, e.stat()) for e in entries if e.name.endswith(".py"))
    stamp = tuple((name, st.st_mtime_ns, st.st_size) for name, _, st in files)
    with _archives_lock:
        known = _archives.get(str(probes_dir))
        if known is None or known[0] != stamp:
            contents = [(name, Path(path).read_bytes()) for name, path, _ in files]
            index = json.dumps([[name, len(c)] for name, c in contents])
            known = _archives[str(probes_dir)] = (stamp, zlib.compress(
                index.encode() + b"\n" + b"".join(c for _, c in contents), 6))
        return known[1]

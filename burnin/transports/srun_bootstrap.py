"""What every task of a burnin job step runs first, ON the node: `python -S -c <this file>
PROBE`. Imports nothing of burnin, and only what Python has without site-packages: it
starts once per node per check, on every node of the fleet, so it stays small and quick
(no json, re, threading or subprocess).

stdin (the same for every task, srun broadcasts it): one line, the envelope, base64 of
zlib of records `KIND NAMELEN VALUELEN\\n NAME VALUE`: F (a probe file: name, text), and
per node S (the probe's stdin), W (its workdir), L (b"1": keep the probe's stdin open as
its lifeline); this task takes the records named after its node (SLURMD_NODENAME). Then
the controller's heartbeat lines, relayed to the probe, and "K NODE..." lines: stop the
probe of the nodes named (SIGTERM to its process group, SIGKILL 2 s later).

stdout: the probe's stdout as frames "O<base64 of at most 600 bytes>~", short enough to
cross srun's 1 KiB I/O messages whole, then "X<status>~" (negative: killed by that signal;
126: the probe could not be started). stderr is the probe's own, labelled by srun.

The probes are written into a fresh 0700 directory under the node's workdir, removed when
the probe ends and when the task is signalled (a cancelled step). A workdir another local
user could swap the probes in (nodeside.SAFE_WORKDIR's `unsafe_workdir`, which srun_step.py
puts in front of this file) is refused: "U<base64 of why>~", and nothing is written.
"""

import binascii
import os
import select
import signal
import sys
import time
import zlib

probe, me = sys.argv[1], os.environ.get("SLURMD_NODENAME", "").encode()
pending = [b""]
where = child = None


def lines(block=True):
    """Complete lines from stdin: what is there now; None once stdin has ended."""
    if block or select.select([0], [], [], 0)[0]:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return None
        pending[0] += chunk
    *done, pending[0] = pending[0].split(b"\n")
    return done


def records(blob):
    at = 0
    while at < len(blob):
        end = blob.index(b"\n", at)
        kind, n, v = blob[at:end].split(b" ")
        start = end + 1 + int(n)
        yield kind, blob[end + 1:start], blob[start:start + int(v)]
        at = start + int(v)


def remove(path):
    for top, dirs, names in os.walk(path, topdown=False):
        for name in names:
            os.unlink(os.path.join(top, name))
        for name in dirs:
            os.rmdir(os.path.join(top, name))
    os.rmdir(path)


def kill(sig):
    try:
        os.killpg(child, sig)
    except (OSError, TypeError):
        pass


def stop(sig, frame):  # the step is cancelled: nothing may outlive it
    kill(signal.SIGKILL)
    if where:
        try:
            remove(where)
        except OSError:
            pass
    os._exit(128 + sig)


def frame(tag, data):
    os.write(1, tag + data + b"~\n")


def main():
    global where, child
    got = []
    while not got:
        got = lines()
        if got is None:
            return 3  # stdin ended before the envelope: the controller is gone
    files, mine = {}, {}
    for kind, name, value in records(zlib.decompress(binascii.a2b_base64(got.pop(0)))):
        if kind == b"F":
            files[name.decode()] = value
        elif name == me:
            mine[kind] = value
    if b"S" not in mine:
        sys.stderr.write(f"burnin: no payload for node {me.decode()!r} in this step\n")
        return 2
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    live = mine.get(b"L") == b"1"
    try:
        workdir = mine[b"W"].decode()
        why = unsafe_workdir(workdir)  # noqa: F821 (nodeside.SAFE_WORKDIR, put in front)
        if why:
            said = f"refusing to stage probes in workdir {workdir} on {me.decode()}: {why}"
            frame(b"U", binascii.b2a_base64(said.encode()[:600], newline=False))
            return 0
        path = os.path.join(os.path.abspath(os.path.expanduser(workdir)),
                            "burnin-" + binascii.hexlify(os.urandom(6)).decode())
        os.mkdir(path, 0o700)
        where = path
        for name, text in files.items():
            with open(os.path.join(where, name), "wb") as f:
                f.write(text)
        code = run(os.path.join(where, probe + ".py"), mine[b"S"], live, got)
    except Exception as e:  # the probe could not be started: said on stderr, status 126
        sys.stderr.write(f"burnin: cannot start probe {probe}: {type(e).__name__}: {e}\n")
        code = 126
    finally:
        if where:
            try:
                remove(where)
            except OSError:
                pass
    frame(b"X", str(code).encode())
    return 0


def run(path, stdin, live, early):
    """The probe at `path`, given `stdin` (then, when `live`, the controller's heartbeats,
    `early` the lines that came with the envelope) and relayed until it ends; its status."""
    pid, w_in, r_out = spawn(path)
    relay = Relay(w_in, live)
    relay.to_probe(stdin + b"\n")
    if not live:
        relay.close_stdin()
    relay.heard(early)
    status = relay.until_exit(pid, r_out)
    relay.close_stdin()
    return status


def spawn(path):
    """The probe started in a session of its own, so that its whole group can be stopped:
    its pid, the write end of its stdin (never blocking) and the read end of its stdout."""
    global child
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(r_in, 0)
            os.dup2(w_out, 1)
            for fd in (r_in, w_in, r_out, w_out):
                os.close(fd)
            os.execv(sys.executable, [sys.executable, path])
        except OSError as e:
            os.write(2, f"burnin: cannot start the probe: {e}\n".encode())
        os._exit(126)
    child = pid
    os.close(r_in)
    os.close(w_out)
    os.set_blocking(w_in, False)  # a probe that never reads stdin must not stall us
    return pid, w_in, r_out


class Relay:
    """Between the controller and a running probe: the controller's lines (heartbeats,
    relayed to the probe's stdin when it is `live`; the word to stop it) and the probe's
    stdout, framed back."""

    def __init__(self, w_in, live):
        self.w_in, self.live, self.kill_at = w_in, live, None

    def to_probe(self, data):
        if self.w_in is None:
            return
        try:
            os.write(self.w_in, data)
        except BlockingIOError:
            pass
        except OSError:
            self.close_stdin()

    def close_stdin(self):
        if self.w_in is not None:
            os.close(self.w_in)
            self.w_in = None

    def heard(self, got):
        for line in got:
            if line.startswith(b"K "):
                if me in line[2:].split() and self.kill_at is None:
                    kill(signal.SIGTERM)  # the controller's word: past its timeout
                    self.kill_at = time.monotonic() + 2.0
            elif self.live:
                self.to_probe(line + b"\n")

    def until_exit(self, pid, r_out):
        """Relay until the probe's stdout has ended and the probe with it; its status
        (negative: killed by that signal), its SIGKILL due 2 s after a SIGTERM."""
        stdin_open, out_open, status = True, True, None
        while status is None:
            fds = ([r_out] if out_open else []) + ([0] if stdin_open else [])
            wait = 0.05 if not out_open else None
            if self.kill_at is not None:
                wait = max(0.0, min(wait or 2.0, self.kill_at - time.monotonic()))
            ready = select.select(fds, [], [], wait)[0] if fds else time.sleep(wait or 0.05)
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                kill(signal.SIGKILL)
                self.kill_at = float("inf")
            if ready and r_out in ready:
                out_open = self.from_probe(r_out)
            if ready and 0 in ready:
                stdin_open = self.from_controller()
            if not out_open:
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = -os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st)
        return status

    def from_probe(self, r_out):
        """One read of the probe's stdout, framed to ours; False once it has ended."""
        chunk = os.read(r_out, 600)
        if not chunk:
            os.close(r_out)
            return False
        frame(b"O", binascii.b2a_base64(chunk, newline=False))
        return True

    def from_controller(self):
        """The controller's lines now on stdin, heard; False once stdin has ended (the
        controller is gone: the probe's lifeline ends with it)."""
        got = lines(block=False)
        if got is None:
            self.close_stdin()
            return False
        self.heard(got)
        return True


sys.exit(main())

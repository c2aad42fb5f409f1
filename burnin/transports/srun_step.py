"""One job step over many nodes: what runs on each task, and how the controller keeps
every node's output apart.

The step is `srun --jobid=J --nodelist=<one entry per task> --distribution=arbitrary
--label --input=all ...`: task i runs on the i-th listed node, so srun's own label says
which node wrote a line (a node cannot speak for another). stdin is broadcast to every
task: first one envelope (the probes and every node's payload, compressed; each task
takes its node's by SLURMD_NODENAME), then the controller's heartbeat (the probes'
lifeline: a controller that dies closes srun's stdin and every probe stops itself), and
"K <node>..." lines that stop a node's probe (its timeout, or output past its bound).

On the node a bootstrap checks the node's workdir as every staging transport does
(nodeside.SAFE_WORKDIR: an unsafe one is refused, "U<why>~", and nothing is staged),
unpacks the probes into a private directory under it, runs the probe, and frames its
stdout as short base64 lines ("O<data>~") and its status ("X<code>~"); stderr passes
through, labelled by srun. Frames are shorter than
srun's 1 KiB I/O message, so they arrive whole; a frame srun split anyway is put back
together by its closing '~'.
"""

from __future__ import annotations

import base64
import os
import queue
import re
import selectors
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from burnin.transports import HEARTBEAT_S, STDERR_TAIL_BYTES, CommandResult
from burnin.transports.local import kill_group
from burnin.transports.nodeside import SAFE_WORKDIR
from burnin.transports.reading import LINE_MAX

STEP_GRACE_S = 10.0  # after every task settled, srun has this long to end by itself

# Runs first on every task, ON the node (its docstring says what it does), after the
# workdir check every staging transport shares.
BOOTSTRAP = SAFE_WORKDIR + (Path(__file__).with_name("srun_bootstrap.py")).read_text()

# Picks the node's own interpreter when nodes of one step have different ones; the
# names and paths are arguments, never shell text.
SELECT = r"""py=$1; shift
while [ "$1" != -- ]; do
  if [ "$1" = "$SLURMD_NODENAME" ]; then py=$2; fi
  shift 2
done
shift
exec "$py" "$@"
"""

LABEL = re.compile(rb"^\s*(\d+): ?(.*)$", re.S)
STATUS = re.compile(rb"^srun: error: (\S+): tasks? ([0-9,\-]+): (.*)$")
SIGNALS = {b"Killed": -9, b"Terminated": -15, b"Segmentation fault": -11, b"Aborted": -6,
           b"Bus error": -7, b"Interrupt": -2}


def envelope(files: dict[str, str], per_node: dict[str, dict], lifeline: bool) -> bytes:
    """The one stdin line every task receives: the probes, and every node's stdin and
    workdir (srun_bootstrap.py reads it)."""
    parts = [_record(b"F", name, text) for name, text in files.items()]
    for node, mine in per_node.items():
        parts += [_record(b"S", node, mine["stdin"]), _record(b"W", node, mine["workdir"]),
                  _record(b"L", node, "1" if lifeline else "0")]
    return base64.b64encode(zlib.compress(b"".join(parts), 6)) + b"\n"


def _record(kind: bytes, name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return b"%s %d %d\n%s%s" % (kind, len(n), len(v), n, v)


def command(pythons: dict[str, str], probe: str) -> list[str]:
    """The argv every task runs: the bootstrap under its node's interpreter."""
    names = sorted(pythons)
    counts: dict[str, int] = {}
    for p in pythons.values():
        counts[p] = counts.get(p, 0) + 1
    common = max(counts, key=lambda p: counts[p])
    # -S: the bootstrap needs only the standard library, and site's start-up is most of
    # an interpreter's (the probe itself starts with site, under the same interpreter).
    tail = ["-S", "-c", BOOTSTRAP, probe]
    if len(counts) == 1:
        return [common, *tail]
    pairs = [x for n in names if pythons[n] != common for x in (n, pythons[n])]
    return ["/bin/sh", "-c", SELECT, "sh", common, *pairs, "--", *tail]


class Refused(str):
    """A task's node refused to stage the probes (its workdir is unsafe): why, in full."""


@dataclass
class _Task:
    node: str
    deadline: float
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    partial: bytearray = field(default_factory=bytearray)
    code: int | None = None
    ended: float | None = None     # when its status arrived
    timed_out: bool = False
    overflow: bool = False
    lost: str = ""                 # srun's word on a task that ended without a status
    refused: str = ""              # the node's workdir is unsafe: nothing was staged

    @property
    def settled(self) -> bool:
        return self.ended is not None or self.timed_out or self.overflow


def run_step(argv: list[str], env: dict, stdin_line: bytes, tasks: list[str],
             timeouts: list[float], max_stdout: int, on_stderr: dict | None = None,
             cancel: threading.Event | None = None) -> tuple[list[CommandResult | str], str]:
    """Run one step whose task i runs on node tasks[i]; bound each task by its own timeout
    and max_stdout. Returns (per task: its result, or why srun lost it; srun's own words)."""
    start = time.monotonic()
    state = [_Task(n, start + t) for n, t in zip(tasks, timeouts, strict=True)]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=env)
    except OSError as e:
        return [f"cannot start srun: {e}"] * len(tasks), ""
    words: queue.Queue = queue.Queue()
    done = threading.Event()
    threading.Thread(target=_feed, args=(proc.stdin, stdin_line, words, done),
                     daemon=True).start()
    said = bytearray()
    try:
        ended = _pump(proc, state, said, max_stdout, on_stderr, cancel, words, done, start)
    except BaseException:  # Ctrl-C in the calling thread: the step must not outlive it
        done.set()
        kill_group(proc)  # srun ends its step on SIGTERM (its tasks are signalled)
        raise
    done.set()
    try:
        # srun closed its output: it is ending. Otherwise it is stopped now.
        proc.wait(timeout=STEP_GRACE_S if ended is None else 0.1)
    except subprocess.TimeoutExpired:
        kill_group(proc)
    assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE, ...)
    proc.stdout.close()
    proc.stderr.close()
    end = time.monotonic()
    cancelled = ended == "cancelled"
    return [_result(t, start, end, cancelled) for t in state], said.decode(errors="replace")


def _pump(proc, state: list[_Task], said: bytearray, max_stdout: int, on_stderr,
          cancel, words: queue.Queue, done: threading.Event, start: float) -> str | None:
    """Read srun's output until it ends (None), every task settled and a grace passed
    ("settled") or the last deadline did ("late"), or the run is cancelled ("cancelled")."""
    buffers = {"out": bytearray(), "err": bytearray()}
    last_deadline = max(t.deadline for t in state) if state else start
    settled_at = None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        while sel.get_map():
            now = time.monotonic()
            if cancel is not None and cancel.is_set():
                return "cancelled"
            late = [t for t in state if not t.settled and now > t.deadline]
            for t in late:
                t.timed_out = True
            if late:
                words.put(b"K " + " ".join(sorted({t.node for t in late})).encode() + b"\n")
            if all(t.settled for t in state):
                if settled_at is None:
                    settled_at = now
                    done.set()  # stdin closes: every bootstrap still there ends
                elif now - settled_at > STEP_GRACE_S:
                    return "settled"
            elif now > last_deadline + STEP_GRACE_S:
                return "late"
            for key, _ in sel.select(timeout=0.5):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = buffers[key.data]
                buf.extend(chunk)
                if b"\n" in chunk:  # else a long line: no copy of what came before
                    *lines, rest = bytes(buf).split(b"\n")
                    buf[:] = rest
                    for line in lines:
                        _line(key.data, line, state, said, max_stdout, on_stderr, words)
                if len(buf) > LINE_MAX:
                    # A line without end (srun splits a task's lines; this is not one of
                    # them, or a node printing past it): what came is handled as a line,
                    # the rest of it keeps its task's label. Memory stays bounded.
                    line = bytes(buf)
                    _line(key.data, line, state, said, max_stdout, on_stderr, words)
                    m = LABEL.match(line)
                    buf[:] = line[:m.start(2)] if m else b""
    return None


def _line(stream: str, line: bytes, state: list[_Task], said: bytearray, max_stdout: int,
          on_stderr: dict | None, words: queue.Queue) -> None:
    m = LABEL.match(line)
    if m is None or int(m.group(1)) >= len(state):
        if stream == "err":
            _srun_said(line, state, said)
        return
    t, text = state[int(m.group(1))], m.group(2)
    if stream == "err":
        t.err.extend(text + b"\n")
        if len(t.err) > 2 * STDERR_TAIL_BYTES:
            del t.err[:-STDERR_TAIL_BYTES]
        callback = (on_stderr or {}).get(t.node)
        if callback:
            callback(text + b"\n")
        return
    t.partial.extend(text)
    if not t.partial.endswith(b"~"):
        if len(t.partial) > max_stdout + 4096:  # not frames: what the task printed itself
            if not t.settled:
                _out(t, t.partial, max_stdout, words)
            t.partial.clear()
        return
    frame = bytes(t.partial[:-1])
    t.partial.clear()
    if t.settled:
        return
    if frame.startswith(b"O"):
        try:
            _out(t, base64.b64decode(frame[1:], validate=True), max_stdout, words)
        except ValueError:
            _out(t, frame, max_stdout, words)
    elif frame.startswith(b"U"):
        try:
            t.refused = base64.b64decode(frame[1:], validate=True).decode(errors="replace")
        except ValueError:
            t.refused = "refusing to stage probes (an unreadable reason)"
        t.ended = time.monotonic()
    elif frame.startswith(b"X"):
        try:
            t.code = int(frame[1:])
        except ValueError:
            t.code = 126  # a status that is no number: nothing ran as it should
        t.ended = time.monotonic()
    else:
        _out(t, frame + b"~", max_stdout, words)


def _out(t: _Task, data: bytes | bytearray, max_stdout: int, words: queue.Queue) -> None:
    """More of the task's stdout; past max_stdout the task overflows and is stopped."""
    t.out.extend(data)
    if len(t.out) > max_stdout:
        t.overflow = True
        words.put(b"K " + t.node.encode() + b"\n")


def _srun_said(line: bytes, state: list[_Task], said: bytearray) -> None:
    """srun's own line: a task's end (when its bootstrap could not say it), or a message."""
    said.extend(line + b"\n")
    if len(said) > STDERR_TAIL_BYTES:
        del said[:-STDERR_TAIL_BYTES // 2]
    m = STATUS.match(line)
    if not m:
        return
    what = m.group(3).strip()
    code = None
    if what.startswith(b"Exited with exit code "):
        code = int(what.rsplit(b" ", 1)[1])
    elif what in SIGNALS:
        code = SIGNALS[what]
    for i in _ranges(m.group(2).decode()):
        if i < len(state) and not state[i].settled:
            t = state[i]
            if code is None:
                t.lost = f"srun: {what.decode(errors='replace')}"
            else:
                t.code, t.ended = code, time.monotonic()


def _ranges(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _result(t: _Task, start: float, end: float, cancelled: bool) -> CommandResult | str:
    if t.partial and not t.overflow:  # an overflowed task's output is cut at its bound
        t.out.extend(t.partial)
    if t.refused:
        return Refused(t.refused)
    stopped = cancelled and not t.settled
    if not (t.settled or stopped):
        return t.lost or "the task ended without a status (its node or its slurmd died?)"
    return CommandResult(
        exit_code=None if t.timed_out or t.overflow or stopped else t.code,
        stdout=bytes(t.out), stderr_tail=bytes(t.err[-STDERR_TAIL_BYTES:]),
        duration_s=(t.ended or end) - start, timed_out=t.timed_out and not t.overflow,
        overflow=t.overflow, cancelled=stopped)


def _feed(pipe, first: bytes, words: queue.Queue, done: threading.Event) -> None:
    """The envelope, then a heartbeat every HEARTBEAT_S and the controller's words, until
    the step is done: then stdin closes, which every task sees."""
    try:
        pipe.write(first)
        pipe.flush()
        last = time.monotonic()
        while not done.is_set():
            try:
                word = words.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() - last < HEARTBEAT_S:
                    continue
                word = b"\n"
            last = time.monotonic()
            pipe.write(word)
            pipe.flush()
    except (OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except (OSError, ValueError):
            pass

"""The SSH fan-out's start skew and its controller CPU per node, on N real SSH test hosts.

Builds N hosts (tests/support/testhosts.py: network namespaces, one sshd each) and runs the
health check's probe on all of them at once through burnin's launch layer (burnin.engine.run.Run,
as the suite does, without pytest), twice per repeat: `cold` (the run's first check:
connect, authenticate, stage the probes, start) and `warm` (a later check, such as the
burn after health: the connections are held, only the start is left). The probe is light
on purpose: each node's `python:` is a wrapper that notes the moment it starts (bash's
$EPOCHREALTIME, no fork), sleeps --settle-s and replays a recorded document
(tests/support/replay.py) holding the lifeline for --hold-s; the skew measured is the
controller's, not torch's import.

Start skew: the last probe's start minus the first's, as the hosts saw them (a probe
starts when its settings arrive: it waits for them before it measures anything); and on
the controller's side, from the first probe that had its command and settings to the
last (the read loop's start). On this machine the hosts' sshd, shells and probes share
the controller's 2 cores, so the skew the hosts see is an upper bound. The extrapolation
to 10,000 nodes uses the controller's own CPU per node (on a fleet every node has its own
CPUs), on one core (paramiko's work holds the GIL): with the start gate (fanout.py: every
probe started, then the settings written in one loop) 10,000 x that loop's CPU per node;
without it (before), 10,000 x the CPU of a probe's start, once every node is ready; were
nodes readied one by one as their probes start (before that), 10,000 x connect + auth +
staging + start. Running: the controller's CPU per running probe per second, from the
last start to the first probe's earliest end (read loops, paramiko's threads, heartbeats).

Controller CPU per node (this process, every thread: getrusage), split by phase with
per-thread CPU clocks (paramiko's transport threads included): connect (TCP, key
exchange, host key check), auth, staging (the node's holder and the probes), start (the
probe's command, up to its read loop), read (the loop over its output), finish (its
exit status, its channel closed), lifeline (the heartbeats), close; `other` is the rest
(thread pool, parsing and shape checks; no verdicts are asked for).

    python benchmarks/ssh_start_skew.py [--hosts 200] [--repeat 3] [--hold-s 6]

Prints, last, the extrapolated warm skew at 10,000 nodes against the quick profile's
burn (60 s): `skew/burn = X` (goal: under 0.1).
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import paramiko  # noqa: E402
from support.replay import replay_python  # noqa: E402
from support.testhosts import TestHosts  # noqa: E402

from burnin.checks import CHECKS  # noqa: E402
from burnin.engine.run import Run  # noqa: E402
from burnin.inventory.schema import load_inventory  # noqa: E402
from burnin.transports import HEARTBEAT_S, fanout, ssh  # noqa: E402

FLEET = 10_000
PHASES = ("connect", "auth", "staging", "start", "read", "finish", "lifeline", "close")


def quick_burn_s() -> float:
    return float(CHECKS["burn"].resolve("quick", None, None)["duration_s"])


def thread_cpu(thread) -> float:
    """CPU seconds of a live thread (0 once it has ended: its time is in the process's)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, TypeError, ValueError, AttributeError):
        return 0.0


def as_thread(c) -> threading.Thread | None:
    """The paramiko Transport (a thread) of an SSHClient, or the Transport itself."""
    c = c.get_transport() if hasattr(c, "get_transport") else c
    return c if isinstance(c, threading.Thread) else None


def paramiko_thread(t) -> threading.Thread | None:
    """The paramiko Transport behind an SshTransport."""
    return as_thread(getattr(t, "_client", None))


class Costs:
    """CPU seconds per phase, summed over nodes, from hooks around burnin's own functions."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.sent: list[float] = []  # when each probe had its command and settings
        self.loops: list[tuple[int, float, float]] = []  # the start gate's: (sends, wall, CPU)

    def started(self) -> list[float]:
        with self.lock:
            out, self.sent = sorted(self.sent), []
        return out

    def add(self, phase: str, seconds: float) -> None:
        with self.lock:
            self.cpu[phase] += seconds

    def reset(self) -> dict[str, float]:
        with self.lock:
            out, self.cpu = self.cpu, dict.fromkeys(PHASES, 0.0)
            loops, self.loops = self.loops, []
        # The settings written in one loop once every probe has started (fanout.StartGate;
        # none before it): that loop's wall per node is what sets the skew.
        sends = sum(n for n, _, _ in loops)
        return {**out, "sends": sends, "loop_wall": sum(w for _, w, _ in loops),
                "loop_cpu": sum(c for _, _, c in loops)}

    def around(self, phase: str, of=paramiko_thread, within: str = ""):
        """Wrap a method of an SshTransport (or a paramiko Transport: of=itself): the
        calling thread's CPU plus its paramiko thread's while it runs. `within`: the
        phase that wraps this one, from which its time is taken out."""
        def wrap(fn):
            @functools.wraps(fn)
            def timed(obj, *a, **kw):
                before = of(obj)
                t0, p0 = time.thread_time(), thread_cpu(before)
                try:
                    return fn(obj, *a, **kw)
                finally:
                    after = of(obj)
                    p1 = thread_cpu(after) if after is before else p0
                    spent = time.thread_time() - t0 + max(0.0, p1 - p0)
                    self.add(phase, spent)
                    if within:
                        self.add(within, -spent)
            return timed
        return wrap

    def install(self) -> None:
        """Hook the phases (functions looked up at call time, so patching them works)."""
        connect = ssh.connect

        def timed_connect(node):
            t0 = time.thread_time()
            client, hops = connect(node)
            # The transport thread began with this connection: its CPU so far is the key
            # exchange and the authentication (which is taken out: the hook below).
            self.add("connect", time.thread_time() - t0 + thread_cpu(as_thread(client)))
            return client, hops
        ssh.connect = timed_connect
        paramiko.Transport.auth_publickey = self.around("auth", of=lambda t: t, within="connect")(
            paramiko.Transport.auth_publickey)
        for name, phase in (("_hold", "staging"), ("close", "close")):
            setattr(ssh.SshTransport, name,
                    self.around(phase)(getattr(ssh.SshTransport, name)))
        # A command, in three: its start (up to its read loop: what each node costs before
        # its probe runs), the read loop, and its finish (exit status, channel closed).
        local = threading.local()

        def spend(phase: str) -> None:
            t, p, tr = local.mark
            now_t, now_p = time.thread_time(), thread_cpu(tr)
            self.add(phase, now_t - t + max(0.0, now_p - p))
            local.mark = (now_t, now_p, tr)
        run, read = ssh.SshTransport.run, ssh.read_bounded

        def timed_run(obj, *a, **kw):
            tr = paramiko_thread(obj)
            local.mark, local.phase = (time.thread_time(), thread_cpu(tr), tr), "start"
            try:
                return run(obj, *a, **kw)
            finally:
                spend(local.phase)

        def timed_read(*a, **kw):
            spend("start")
            with self.lock:
                self.sent.append(time.time())
            local.phase = "read"
            try:
                return read(*a, **kw)
            finally:
                spend("read")
                local.phase = "finish"
        ssh.SshTransport.run, ssh.read_bounded = timed_run, timed_read
        gate = getattr(fanout, "StartGate", None)
        if gate is not None:
            write = gate._write

            def timed_write(sends):
                w0, c0 = time.perf_counter(), time.thread_time()
                try:
                    return write(sends)
                finally:
                    with self.lock:
                        self.loops.append((len(sends), time.perf_counter() - w0,
                                           time.thread_time() - c0))
            gate._write = staticmethod(timed_write)
        for name in ("_feed", "_heartbeats"):  # the lifeline: per command, or one thread
            fn = getattr(ssh, name, None)
            if fn is not None:
                setattr(ssh, name, self.thread_body(fn, "lifeline"))

    def thread_body(self, fn, phase: str):
        @functools.wraps(fn)
        def timed(*a, **kw):
            t0 = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                self.add(phase, time.thread_time() - t0)
        return timed


def process_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Sampler:
    """The process's CPU, sampled while a check runs: its rate while every probe runs (from
    the last start to the first probe's earliest possible end) is the steady-state cost."""

    def __init__(self):
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stop.wait(0.25):
            self.samples.append((time.time(), process_cpu()))

    def rate(self, start: float, end: float) -> float | None:
        """CPU seconds per second between `start` and `end` (wall clock), or None."""
        self.stop.set()
        self.thread.join()
        inside = [x for x in self.samples if start <= x[0] <= end]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < 1.0:
            return None
        (ta, ca), (tb, cb) = inside[0], inside[-1]
        return (cb - ca) / (tb - ta)


def settle(threads: int, limit_s: float) -> None:
    """Wait (at most `limit_s`) for the threads the probes started to end (the
    lifeline's: after its next beat), so that their CPU is counted."""
    deadline = time.monotonic() + limit_s
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.1)


def starts(log: Path, hosts: int) -> list[float]:
    got = [float(f.read_text()) for f in log.iterdir()]
    if len(got) != hosts:
        raise SystemExit(f"{len(got)} of {hosts} probes noted their start")
    return sorted(got)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--hold-s", type=float, default=6.0,
                   help="seconds each probe holds the lifeline before it answers")
    p.add_argument("--settle-s", type=float, default=5.0,
                   help="seconds each probe waits, once its start is noted, before its "
                   "interpreter starts: N interpreters starting at once would take the "
                   "cores the later nodes' sshd need to start theirs (the hosts share "
                   "this machine's cores)")
    p.add_argument("--threads-wait-s", type=float, default=2 * HEARTBEAT_S,
                   help="after each phase, wait at most this long for the probes' threads to "
                   "end (a lifeline's ends after its next heartbeat), so that their CPU is "
                   "counted; 0 for a smoke run (their last beats left out)")
    args = p.parse_args()
    costs = Costs()
    costs.install()
    with tempfile.TemporaryDirectory() as d, TestHosts(args.hosts, Path(d) / "hosts") as hosts:
        log = Path(d) / "starts"
        log.mkdir()
        replay = replay_python(Path(d) / "replay", delay_s=args.hold_s)
        wrapper = Path(d) / "python"
        # The probe's start as it sees it: the moment its settings line arrives (bash's
        # read takes one line, byte by byte, and leaves the lifeline to the probe).
        wrapper.write_text(f"#!/bin/bash\nIFS= read -r settings\n"
                           f"echo $EPOCHREALTIME > {log}/$HOSTNAME\n"
                           f"sleep {args.settle_s:g}\n"
                           f'exec {replay} "$@" < <(printf "%s\\n" "$settings"; exec cat)\n')
        wrapper.chmod(0o755)
        inv = load_inventory(hosts.write_inventory(Path(d) / "inv.yaml", python=str(wrapper)))
        rows: dict[str, list[dict]] = {"cold": [], "warm": [], "close": []}
        for i in range(args.repeat):
            run = Run(inv, list(inv.nodes), "quick", Path(d) / "reports", f"skew{i}",
                      fanout=args.hosts)
            try:
                for kind in ("cold", "warm"):
                    for f in log.iterdir():
                        f.unlink()
                    costs.reset()
                    threads = threading.active_count()
                    cpu0, t0 = process_cpu(), time.time()
                    sampler = Sampler()
                    outcomes = run.execute("health")
                    settle(threads, args.threads_wait_s)
                    cpu = process_cpu() - cpu0
                    bad = [f"{n}: {o.reason}" for n, o in outcomes.items() if not o.ok]
                    if bad:
                        raise SystemExit(f"{len(bad)} probes failed: {bad[:3]}")
                    s, sent = starts(log, args.hosts), costs.started()
                    phases = costs.reset()
                    steady = sampler.rate(s[-1] + 0.5, s[0] + args.settle_s + args.hold_s)
                    rows[kind].append({"skew": s[-1] - s[0], "first": s[0] - t0,
                                       "last": s[-1] - t0, "sent": sent[-1] - sent[0],
                                       "cpu": cpu, "steady": steady, **phases})
            finally:
                costs.reset()
                cpu0 = process_cpu()
                run.close()
                rows["close"].append({"cpu": process_cpu() - cpu0, **costs.reset()})
        report(rows, args.hosts)


def report(rows: dict[str, list[dict]], n: int) -> None:
    def med(kind: str, key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows[kind])

    ms = 1000 / n
    print(f"{n} hosts, {len(rows['cold'])} repeat(s), load {os.getloadavg()[0]:.1f}; medians:")
    for kind in ("cold", "warm"):
        split = ", ".join(f"{k} {med(kind, k) * ms:.2f}" for k in PHASES if k != "close")
        total = med(kind, "cpu")
        runs = ", ".join(f"{r['skew']:.2f}" for r in rows[kind])
        print(f"  {kind}: start skew {med(kind, 'skew'):.2f} s (runs {runs}; first probe "
              f"after {med(kind, 'first'):.2f} s, last after {med(kind, 'last'):.2f} s); "
              f"controller's side {med(kind, 'sent'):.2f} s")
        print(f"  {kind}: controller CPU {total * ms:.2f} ms per node: {split}, other "
              f"{(total - sum(med(kind, k) for k in PHASES)) * ms:.2f}")
    print(f"  close: controller CPU {med('close', 'cpu') * ms:.2f} ms per node "
          f"(close {med('close', 'close') * ms:.2f}); cold + close "
          f"{(med('cold', 'cpu') + med('close', 'cpu')) * ms:.2f} ms per node")
    ready = sum(med("cold", k) for k in ("connect", "auth", "staging")) / n
    # With every node ready first, a probe's start is the same work in the first check as
    # in a later one: the median over both.
    both = rows["cold"] + rows["warm"]
    start = statistics.median(r["start"] for r in both) / n
    steady = [r["steady"] for r in both if r["steady"] is not None]
    print(f"  a probe's start: controller CPU {start * 1000:.3f} ms per node (its session, "
          f"command and settings); running: "
          + (f"{statistics.median(steady) / n * 1000:.3f} ms of CPU per probe per second "
             f"(runs {', '.join(f'{x / n * 1000:.3f}' for x in steady)})" if steady
             else "too short a run to measure its CPU per second"))
    if all(r["sends"] for r in both):
        # Probes wait at the start gate and get their settings in one loop: the skew is
        # that loop's, whatever each start cost before it.
        per = statistics.median(r["loop_wall"] / r["sends"] for r in both)
        loop_cpu = statistics.median(r["loop_cpu"] / r["sends"] for r in both)
        print(f"  the settings loop: {loop_cpu * 1e6:.0f} us of CPU per node "
              f"({per * 1e6:.0f} us of wall here, where the hosts' sshd and shells share the "
              f"cores: {per * FLEET:.1f} s at {FLEET:,} nodes), "
              f"{statistics.median(r['sends'] for r in both):g} sends in one loop")
    print(f"  at {FLEET:,} nodes, extrapolated: getting every node ready {ready * FLEET:.0f} s "
          f"of one core (connect + auth + staging, {ready * 1000:.2f} ms per node); "
          f"node by node {(ready + start) * FLEET:.0f} s of skew")
    if all(r["sends"] for r in both):
        start = loop_cpu  # as before, the controller's CPU: on a fleet each node has its own
    burn = quick_burn_s()
    print(f"{n} hosts: start skew at {FLEET:,} nodes {start * FLEET:.1f} s ({start * 1000:.2f} "
          f"ms per start) against the quick profile's {burn:g} s burn: "
          f"skew/burn = {start * FLEET / burn:.4f}")


if __name__ == "__main__":
    main()

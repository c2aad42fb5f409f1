"""pytest plugin for benchmarks only: where a run's controller time and memory go, by
phase. Load with `-p phase_timer` and benchmarks/ on PYTHONPATH, beside `-p
instant_transport` as controller_scale.py runs the suites. At the end it prints, for each
phase, its CPU seconds (process time: every thread, so a fan-out's worker threads count in
the phase that started them), its wall seconds, how often it ran, and the highest
resident memory seen while it was the innermost phase running (sampled every 50 ms).

Phases are functions of burnin, wrapped where they are looked up when this plugin is
imported (before burnin registers its hooks: a hook of burnin's that is a plain function
is timed too; pytest's collection is timed by a hook wrapper); a phase counts only
its outermost call (a re-entrant one is not counted twice). Nested phases overlap: the
collection of a check's outcomes includes its probes' fan-out, and so on.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
import time
import tracemalloc

import pytest

# PHASE_TRACEMALLOC=1: also trace Python's allocations (slow: use a small fleet), and
# print what is held when publish starts and publish's own peak above that.
TRACE = os.environ.get("PHASE_TRACEMALLOC") == "1"
# PHASE_TIMER_OUT=FILE: the table is written there too (controller_scale.py drops the
# run's stdout).
OUT = os.environ.get("PHASE_TIMER_OUT")
_held: list[str] = []

# (module, class or None, function, the phase's name), outermost first where they nest.
PHASES = [
    ("burnin.engine.run", "Run", "verdict", "tests: verdicts (probes, judging)"),
    ("burnin.engine.outcome_store", "OutcomeStore", "_shared", "  a check's outcomes, recorded"),
    ("burnin.engine.run", "Run", "execute", "    fan-out and reading of documents"),
    ("burnin.engine.launch", "Launch", "at_once", "      inter-node: groups and rounds"),
    ("burnin.engine.launch", "Launch", "prepare", "      prepare (transports, node locks)"),
    ("burnin.probe.protocol", None, "judge_output", "      reading one document"),
    ("burnin.engine.outcome_store", "OutcomeStore", "_record", "    results.jsonl lines"),
    ("burnin.engine.outcome_store", None, "kept_line", "    .kept.jsonl lines"),
    ("burnin.engine.outcome_store", None, "append_durably", "    appending durably"),
    ("burnin.engine.run", "Run", "summary", "  fleet figures"),
    ("burnin.engine.run", "Run", "_judge_all", "  judging"),
    ("burnin.engine.run", "Run", "_release", "  letting documents go"),
    ("burnin.plugin", "BurninState", "pytest_runtest_logreport", "burnin's logreport hook"),
    ("burnin.plugin", "BurninState", "pytest_sessionfinish", "sessionfinish (burnin)"),
    ("burnin.plugin.run_end", "RunEnd", "_finish", "  end: goodput, history, junit, gate"),
    ("burnin.figures.goodput", None, "of_run", "    goodput"),
    ("burnin.figures.track_record", None, "of_ledger", "    history from the ledger"),
    ("burnin.plugin.run_end", "RunEnd", "_junit", "    junit.xml"),
    ("burnin.plugin.run_end", None, "settle", "    gate (ledger)"),
    ("burnin.plugin", None, "publish", "  publish"),
    ("burnin.report.evidence", None, "add_record", "    evidence: a record's files"),
    ("burnin.report.summary.page", None, "render", "    summary.html"),
    ("burnin.report.metrics", None, "write", "    metrics.prom"),
    ("burnin.engine.run", "Run", "close", "  closing transports"),
]

_cpu: dict[str, float] = {}
_wall: dict[str, float] = {}
_calls: dict[str, int] = {}
_peak: dict[str, int] = {}
_active: dict[str, int] = {}
_stack: list[str] = []  # the main thread's phases now running, innermost last
_guard = threading.Lock()
_page = os.sysconf("SC_PAGE_SIZE")
_t0 = time.monotonic()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _page


def _wrap(fn, name: str):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        with _guard:
            outer = _active.get(name, 0) == 0
            _active[name] = _active.get(name, 0) + 1
        if not outer:
            try:
                return fn(*args, **kwargs)
            finally:
                with _guard:
                    _active[name] -= 1
        main = threading.current_thread() is threading.main_thread()
        if main:
            _stack.append(name)
        if TRACE and name == "  publish":
            _trace_held()
        c, w = time.process_time(), time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            with _guard:
                _active[name] -= 1
                _cpu[name] = _cpu.get(name, 0.0) + time.process_time() - c
                _wall[name] = _wall.get(name, 0.0) + time.monotonic() - w
                _calls[name] = _calls.get(name, 0) + 1
            if main:
                _stack.pop()
    return timed


def _trace_held() -> None:
    """What Python holds as publish starts, by the line that allocated it."""
    now, _ = tracemalloc.get_traced_memory()
    stats = tracemalloc.take_snapshot().statistics("lineno")
    _held.append(f"tracemalloc when publish starts: {now >> 20} MiB traced; top lines:")
    _held.extend(f"  {s.size >> 20:6d} MiB {s.count:9d} blocks  {s.traceback[0]}"
                 for s in stats[:25])
    tracemalloc.reset_peak()


def _sample(stop: threading.Event) -> None:
    while not stop.wait(0.05):
        where = _stack[-1] if _stack else "(none)"
        rss = _rss()
        if rss > _peak.get(where, 0):
            _peak[where] = rss


_stop = threading.Event()


for _module, _cls, _fn, _name in PHASES:
    _owner = importlib.import_module(_module)
    _owner = getattr(_owner, _cls) if _cls else _owner
    setattr(_owner, _fn, _wrap(getattr(_owner, _fn), _name))
threading.Thread(target=_sample, args=(_stop,), daemon=True).start()
if TRACE:
    tracemalloc.start()
COLLECTION = "collection (pytest)"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection(session: pytest.Session):
    _stack.append(COLLECTION)
    c, w = time.process_time(), time.monotonic()
    try:
        return (yield)
    finally:
        _cpu[COLLECTION], _wall[COLLECTION] = time.process_time() - c, time.monotonic() - w
        _calls[COLLECTION] = 1
        _stack.pop()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _stop.set()
    lines = [f"phase_timer: whole process CPU {time.process_time():.1f} s, wall "
             f"{time.monotonic() - _t0:.1f} s (from the plugin's import), RSS now "
             f"{_rss() >> 20} MiB",
             f"{'phase':48} {'CPU s':>8} {'wall s':>8} {'calls':>7} {'peak RSS MiB':>13}"]
    for name in [COLLECTION, *(p[3] for p in PHASES)]:
        if name in _calls or name in _peak:
            lines.append(f"{name:48} {_cpu.get(name, 0):8.2f} {_wall.get(name, 0):8.2f} "
                         f"{_calls.get(name, 0):7d} {_peak.get(name, 0) >> 20:13d}")
    lines.append(f"{'(outside every phase)':48} {'':8} {'':8} {'':7} "
                 f"{_peak.get('(none)', 0) >> 20:13d}")
    if TRACE and _held:
        now, peak = tracemalloc.get_traced_memory()
        lines += [*_held, f"tracemalloc peak from publish's start to the end: {peak >> 20} "
                          f"MiB traced; now {now >> 20} MiB"]
    print("\n" + "\n".join(lines), flush=True)
    if OUT:
        with open(OUT, "w") as f:
            f.write("\n".join(lines) + "\n")

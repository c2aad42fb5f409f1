"""`gpu_first_run.py --device-call` on a lent machine it has never seen: a checkout whose
parent it cannot write, and a benchmark or train run that hangs, cost at most their own
step (benchmarks/device_call.py), never the call's first_run.json or the steps after."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from test_first_run import load


def test_storage_falls_back_when_the_checkouts_parent_cannot_be_written(tmp_path):
    dc = load("device_call")
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder under a file cannot be made, even by root
    inside = tmp_path / "inside"
    dc.STORAGE_CANDIDATES = (blocker / "storage", inside)
    assert dc.storage_dir(None) == inside and inside.is_dir()
    dc.STORAGE_CANDIDATES = (blocker / "storage",)
    last = dc.storage_dir(None)
    assert last.is_dir() and last.name.startswith("burnin-first-run-storage-")
    last.rmdir()
    # and the call goes on to its steps, writing each as it lands
    dc.facts = lambda gpu: {"device": "X"}
    dc.nvml_raw = lambda: {}
    dc.sdc_exactness = lambda gpu, small: []
    code = dc.run(tmp_path / "out", smoke=False, storage=None, deadline_s=30)
    steps = json.loads((tmp_path / "out" / "first_run.json").read_text())["steps"]
    assert code == 1 and steps["facts"]["status"] == "done", steps


def test_a_hung_benchmark_costs_its_pair_not_the_step(tmp_path):
    gfr = load("gpu_first_run")
    sys.modules["gpu_first_run"] = gfr
    dc = load("device_call")
    dc.FLOOR_S = 1
    seen = []

    def bench(name, n, dtype, seconds, repeat, gpus, timeout_s=3600):
        seen.append((name, timeout_s))
        if name == "sdc":
            raise subprocess.TimeoutExpired("probe_vs_mm", timeout_s)
        return "burn: probe/bare = 1.0"

    gfr.probe_vs_mm = bench
    try:
        got = dc.ratios(True, False, left=lambda: 7.0)
    finally:
        del sys.modules["gpu_first_run"]
    assert seen == [("sdc", 7.0), ("burn", 7.0)]
    assert got == {"sdc": {"failed": "not done within 7 s"}, "burn": "burn: probe/bare = 1.0"}
    # and train's two runs are bounded by what is left of their step
    bounds = []
    dc.judged = lambda *a, timeout_s=None, **k: (bounds.append(timeout_s) or {}, _Failed())
    dc.train_twice(0, True, left=lambda: 9.0)
    assert bounds == [9.0, 9.0]


class _Failed:
    ok, data = False, {}


def test_a_benchmark_past_its_bound_is_killed_with_the_processes_it_started(tmp_path):
    gfr = load("gpu_first_run")
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    # A probe_vs_mm that starts a probe of its own and never ends.
    child = tmp_path / "probe.py"
    child.write_text(f"import os, time\nopen({str(tmp_path / 'pid')!r}, 'w')"
                     ".write(str(os.getpid()))\ntime.sleep(60)\n")
    (bench / "probe_vs_mm.py").write_text(
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(child)!r}])\n"
        "time.sleep(60)\n")
    gfr.REPO = tmp_path
    t = time.monotonic()
    try:
        gfr.probe_vs_mm("sdc", 64, "fp32", 0.1, 1, 0, timeout_s=5)
    except subprocess.TimeoutExpired:
        pass
    else:
        raise AssertionError("a benchmark past its bound returned")
    assert time.monotonic() - t < 30
    pid = int((tmp_path / "pid").read_text())
    for _ in range(50):  # its parent's death reaped it: gone within moments
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the probe it started still runs"

"""Every benchmark under benchmarks/ runs to completion at a tiny scale and prints its
ratio last: a smoke test so the benchmarks do not rot (as controller_scale.py did when
run() grew arguments its instant transport lacked).

Figures on this CPU are noise: these tests assert that a benchmark finished and printed
a finite, positive ratio, never how fast anything was. A benchmark checks by itself that
it measured the right thing (controller_scale.py: every verdict as planted, no
controller error; storage_vs_fio.py: fio moved the probe's bytes from the probe's files).
Time-outs are for hangs only.

benchmarks/probe_vs_mm.py runs, for the sdc and the burn probe, in the first-run script's
smoke mode (tests/test_first_run.py), which asserts its ratio the same way.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
HANG_S = 1200  # healthy work on a loaded 2-core machine can be slow; this is for hangs


def need(ok: bool, why: str) -> None:
    """Fail in CI (which installs every tool), skip on a developer's machine."""
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"benchmark smoke test cannot run in CI: {why}")
        pytest.skip(why)


def run_benchmark(script: str, *args: str) -> list[str]:
    """Run benchmarks/<script> to completion; its stdout lines."""
    __tracebackhide__ = True
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                         capture_output=True, text=True, timeout=HANG_S, env=env, cwd=REPO)
    assert res.returncode == 0, f"{script} exited {res.returncode}:\n" \
        f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    lines = res.stdout.strip().splitlines()
    assert lines, f"{script} printed nothing"
    return lines


def ratios(line: str, label: str) -> list[float]:
    """The ratios `label = X` (or `label X`) on the benchmark's last line."""
    __tracebackhide__ = True
    found = [float(x) for x in re.findall(re.escape(label) + r"\s*=?\s*(\d+\.\d+)", line)]
    assert found, f"no '{label}' ratio on the last line: {line!r}"
    for r in found:
        assert math.isfinite(r) and r > 0, f"implausible ratio {r} in {line!r}"
    return found


def test_controller_scale_runs_passing_and_failing_fleets():
    # The documents recorded from the real probes (tests/corpus/, which the replayed nodes
    # of the controller's tests answer with too), not a capture: a real run of every probe
    # was 30 of this test's 40 CPU seconds, and the probes' own tests run them.
    lines = run_benchmark("controller_scale.py", "--nodes", "20", "--repeat", "1",
                          "--modes", "serial", "--fleets", "pass,fail", "--documents",
                          str(REPO / "tests" / "corpus"))
    # One row per (checks, fleet): the health check alone and the whole suite.
    rows = [ln for ln in lines if ln.startswith("20 nodes, ")]
    assert len(rows) == 4, lines
    for row in rows:
        assert re.search(r"wall median \d+\.\d s .* CPU median \d+\.\d s .* peak RSS max "
                         r"[1-9]\d* MiB", row), row
    # The anchor, bare pytest with as many trivial tests, and the whole suite against it.
    assert any(re.match(r"20 nodes x \d+ checks, bare pytest, serial: wall median", ln)
               for ln in lines), lines
    assert all(ratios(row, "bare pytest: wall") for row in rows if ", all, " in row)
    assert ratios(lines[-1], "worst") and "(over 2 pairs)" in lines[-1], lines[-1]


def test_allreduce_vs_bare():
    lines = run_benchmark("allreduce_vs_bare.py", "--ranks", "2", "--max-mb", "1",
                          "--seconds", "0.2", "--repeat", "1")
    assert ratios(lines[-1], "probe/bare"), lines


def test_train_vs_bare():
    # One rank each side: three torch processes, not five (each about 1.5 s of CPU to start).
    lines = run_benchmark("train_vs_bare.py", "--ranks", "1", "--steps", "3", "--repeat", "1",
                          "--shape",
                          '{"d_model": 32, "layers": 1, "heads": 2, "seq_len": 16, '
                          '"vocab": 64, "batch": 2}')
    assert ratios(lines[-1], "probe/bare:"), lines
    assert re.search(r"MFU \d+\.\d%", lines[-2]), lines


def test_storage_vs_fio(tmp_path):
    need(shutil.which("fio") is not None, "fio is not installed")
    # /var/tmp: on the disk (O_DIRECT), where /tmp may be a tmpfs.
    base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else tmp_path
    # --settle-s 0: no wait for an idle device before each phase (on a machine shared
    # with other tests it never idles, and each wait ran to its 20 s limit).
    lines = run_benchmark("storage_vs_fio.py", "--dir", str(base), "--size-gb", "0.02",
                          "--streams", "2", "--repeat", "1", "--settle-s", "0")
    got = ratios(lines[-1], "probe/fio")
    assert len(got) == 2, lines[-1]  # write and read


def test_ssh_fanout_vs_pdsh():
    need(os.geteuid() == 0, "test hosts need root")
    need(shutil.which("pdsh") is not None, "pdsh is not installed")
    need(shutil.which("sshd") is not None or Path("/usr/sbin/sshd").exists(),
         "openssh-server is not installed")
    lines = run_benchmark("ssh_fanout_vs_pdsh.py", "--hosts", "2", "--repeat", "1")
    assert ratios(lines[-1], "burnin / pdsh"), lines


def test_ssh_start_skew():
    need(os.geteuid() == 0, "test hosts need root")
    need(Path("/usr/sbin/sshd").exists(), "openssh-server is not installed")
    # --threads-wait-s 0: no wait, after each phase, for the lifelines' threads to end at
    # their next heartbeat (up to 10 s each)
    lines = run_benchmark("ssh_start_skew.py", "--hosts", "4", "--repeat", "1",
                          "--hold-s", "1", "--settle-s", "0", "--threads-wait-s", "0")
    for kind in ("cold", "warm"):  # every phase measured, the skew as the hosts saw it
        assert any(re.match(rf"  {kind}: start skew \d+\.\d+ s", ln) for ln in lines), lines
        assert any(re.match(rf"  {kind}: controller CPU \d+\.\d+ ms per node: connect ", ln)
                   for ln in lines), lines
    assert ratios(lines[-1], "skew/burn"), lines


def test_verdict_calibration_captures_and_replays_every_rule():
    # Two captured nodes (of 2 GPUs each): fleets of 3 are drawn from them node by node;
    # every rule's figures are captured all the same, at two thirds of the probes' cost.
    # A 1 s burn and 0.2 s PCIe copies (not 4 s and 0.5 s): each still yields its figures
    # per device (a burn's TFLOPS, a direction's GB/s), which is all a rule replays.
    lines = run_benchmark("verdict_calibration.py", "--runs", "1", "--nodes", "2",
                          "--node-runs", "30", "--trials", "5", "--sizes", "3",
                          "--settings", json.dumps({"burn": {"duration_s": 1},
                                                    "pcie": {"seconds": 0.2}}))
    rows = [ln for ln in lines if ln.startswith("| ") and " | 3 | " in ln]
    rules = {row.split(" | ")[0].lstrip("| ") for row in rows}
    assert len(rules) == 6, lines  # burn, PCIe both ways, storage both phases, busbw
    for row in rows:
        false = float(row.split(" | ")[5])
        assert 0 <= false <= 1000, row


def test_ledger_backends_records_into_sqlite_and_postgresql():
    from support import pgserver
    need(not pgserver.missing_requirements(), pgserver.missing_requirements())
    lines = run_benchmark("ledger_backends.py", "--failures", "50", "--repeat", "1")
    assert ratios(lines[-1], "postgresql/sqlite"), lines
    assert lines[-1].startswith("50 failures in one run: sqlite median "), lines


def test_ledger_history_keeps_runs_and_reads_them_back():
    lines = run_benchmark("ledger_history.py", "--nodes", "200", "--runs", "3", "--repeat", "1")
    assert ratios(lines[-1], "record_runs/bare"), lines
    assert lines[0] == "200 nodes, 3 runs kept a node, medians of 1:", lines


def test_group_search_finds_every_slow_node_in_fewer_launches_than_pairs():
    lines = run_benchmark("group_search.py", "--nodes", "64,256", "--slow", "1,3")
    rows = [ln for ln in lines if " slow, " in ln]
    assert len(rows) == 8, lines
    for row in rows:
        pairs, search = (int(x) for x in re.findall(r"(\d+) launches", row))
        assert search < pairs, row
    assert ratios(lines[-1], "launches")[0] < 1, lines[-1]


def test_node_check_against_true_and_bare_python():
    lines = run_benchmark("node_check.py", "--repeat", "1", "--gpus", "2")
    assert ratios(lines[-1], "node-check/python") and ratios(lines[-1], "gpu/python"), lines
    assert any("its checks " in ln for ln in lines), lines

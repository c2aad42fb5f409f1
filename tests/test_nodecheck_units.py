"""node-check's pieces in this process: the budget's threads, and the probe module they
share."""

from __future__ import annotations

import threading
import time

from burnin.nodecheck import budget, probelink
from burnin.nodecheck.model import CheckResult


def test_a_hung_check_is_reported_unfinished_and_the_others_are_kept():
    release = threading.Event()

    def hangs():
        release.wait(60)  # a hang, released at the end of the test
        return CheckResult("hangs")

    try:
        t0 = time.monotonic()
        out = budget.run_checks({"quick": lambda: CheckResult("quick"), "hangs": hangs,
                                 "raises": lambda: 1 / 0}, time.monotonic() + 0.5, 0.5)
        assert time.monotonic() - t0 < 30
        by = {r.check: r for r in out}
        assert [r.check for r in out] == ["quick", "hangs", "raises"]
        assert by["quick"].finished and not by["quick"].findings
        assert not by["hangs"].finished
        assert by["hangs"].failures[0].text.startswith("did not finish within its time budget")
        assert by["raises"].failures[0].text == ("could not be checked: ZeroDivisionError: "
                                                 "division by zero")
    finally:
        release.set()


def test_the_shared_probe_module_is_whole_for_every_thread(monkeypatch):
    # The race that once lost the host check its module: loaded by threads at once, many
    # times over, since a race shows only now and then.
    modules = __import__("sys").modules
    monkeypatch.delitem(modules, probelink._NAME, raising=False)
    seen = []
    for _ in range(20):
        modules.pop(probelink._NAME, None)
        start = threading.Barrier(8)

        def load(start=start):
            start.wait(10)
            seen.append(hasattr(probelink.hostfacts(), "_cpus"))

        threads = [threading.Thread(target=load) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert seen == [True] * 160


def test_the_drain_reason_is_one_safe_line_under_slurms_room_and_names_its_checks():
    from burnin.gate.actions import REASON_MAX
    from burnin.nodecheck.slurm import checks_named, drain_reason, ours

    lines = ["storage: storage.path /mnt/a'b\"c$(reboot)\nx does not exist",
             "gpu: " + "GPU 0 (GPU-1234): row remap pending; " * 20]
    reason = drain_reason(lines)
    assert reason.startswith("burnin: node-check: storage: storage.path /mnt/a b c (reboot) x")
    assert len(reason) <= REASON_MAX and reason.endswith("...")
    assert not set(reason) & set("'\"$`\\\n!<>&|")
    assert ours(reason) and not ours("burnin: failed health; ...") and not ours("admin: x")
    assert checks_named(reason) == {"storage", "gpu"}


def test_bounded_returns_raises_or_gives_up_at_the_deadline():
    release = threading.Event()
    try:
        assert budget.bounded("x", lambda: 42, time.monotonic() + 10) == 42
        try:
            budget.bounded("x", lambda: 1 / 0, time.monotonic() + 10)
            raise AssertionError("not raised")
        except ZeroDivisionError:
            pass
        t0 = time.monotonic()
        try:
            budget.bounded("x", lambda: release.wait(60), time.monotonic() + 0.2)
            raise AssertionError("not raised")
        except TimeoutError as e:
            assert "did not finish within the time budget" in str(e)
        assert time.monotonic() - t0 < 30
    finally:
        release.set()


def test_a_checks_child_still_running_when_node_check_ends_is_killed():
    import subprocess
    import sys

    procs = []

    def waits_on_its_child():
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        procs.append(proc)
        with budget.child(proc):
            proc.wait()  # its thread is left at the deadline, still waiting
        return CheckResult("waits")

    try:
        out = budget.run_checks({"waits": waits_on_its_child}, time.monotonic() + 0.5, 0.5)
        assert not out[0].finished and procs
        assert budget.kill_children() == 1
        assert procs[0].wait(30) == -9
        assert budget.kill_children() == 0
    finally:
        for p in procs:
            p.kill()

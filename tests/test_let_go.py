"""Before publishing, the run lets go of what nothing after it reads (publish
built its page beside them, the peak of a 10,000-node run): the run's kept outcomes and
verdicts (junit.xml and the ledger hold them) and pytest's collected items. The cyclic
collector is paused from collection until then, and always given back."""

from __future__ import annotations

import gc
import textwrap

from support.replay import replay_python
from support.suiterun import SUITES, junit_cases, script

from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.ledger.api import Ledger

# Loaded with -p into the run: counts, when publish starts, the pytest items of the tests
# that ran still alive (the deselected ones are pytest's terminal summary's to keep).
WATCH = '''
import gc

import pytest

import burnin.plugin as plugin
from burnin.engine.run import Run

_publish = plugin.publish


def publish(run_dir, *args, **kwargs):
    alive = sum(isinstance(o, pytest.Item) and o.name.startswith("test_health[")
                for o in gc.get_objects())
    (run_dir / "items-alive-at-publish").write_text(str(alive))
    judged = [o.judged("health", "n1") for o in gc.get_objects() if isinstance(o, Run)]
    (run_dir / "verdicts-at-publish").write_text(repr(judged))
    (run_dir / "gc-at-publish").write_text(f"{gc.isenabled()} {sorted(set(IN_TESTS))}")
    return _publish(run_dir, *args, **kwargs)


plugin.publish = publish
IN_TESTS = []


def pytest_runtest_call(item):
    IN_TESTS.append(gc.isenabled())
'''


def pair_inventory(tmp_path):
    replay = replay_python(tmp_path / "replay")
    inv = tmp_path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        nodes:
          - name: n[1-2]
        quarantine:
          ledger: {tmp_path / 'ledger.db'}
        """))
    Ledger(tmp_path / "ledger.db")  # burnin ledger init: a run never creates a configured one
    return inv


def test_publish_starts_with_no_item_of_the_run_alive(pytester):
    pytester.makepyfile(watch_publish=WATCH)
    inv = pair_inventory(pytester.path)
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        SUITES, "--inventory", str(inv), "--reports",
        str(reports), "-p", "no:cacheprovider", "-p", "watch_publish", "-k", "health",
        timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    cases = junit_cases(reports)
    assert {n: c["health"][0] for n, c in cases.items()} == {"n1": "passed", "n2": "passed"}
    assert (reports / "latest" / "summary.html").exists()
    assert (reports / "latest" / "items-alive-at-publish").read_text() == "0"
    assert (reports / "latest" / "verdicts-at-publish").read_text() == "[None]", \
        "the run's verdicts are let go too (junit.xml and the ledger have them)"
    assert (reports / "latest" / "gc-at-publish").read_text() == "True [False]", \
        "the cyclic collector is paused in the test loop and back before publishing"


def test_a_run_in_this_process_gives_the_cyclic_collector_back(pytester):
    assert gc.isenabled()
    inv = pair_inventory(pytester.path)
    for extra in ([], ["--collect-only"]):  # the second ends before publishing
        pytester.runpytest_inprocess(SUITES, "--inventory", str(inv), "--reports",
                                     str(pytester.path / "reports"), "-p", "no:cacheprovider",
                                     "-k", "health", *extra)
        assert gc.isenabled(), extra


def test_a_run_let_go_still_knows_what_ran_and_reads_it_back_when_asked(tmp_path):
    inv = pair_inventory(tmp_path)
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "r1")
    try:
        node = run.nodes[0]
        assert run.verdict("health", node).passed
        kept = run.outcomes("health")[node.name]
        run.let_go()
        assert run.judged("health", node.name) is None, "the verdicts are gone"
        assert run.has_outcomes("health") and not run.has_outcomes("burn")
        # Asked again (nothing in a run does, after it), the outcomes come back whole
        # from the run's directory, and the verdict with them.
        again = run.outcomes("health")[node.name]
        assert again.ok and again.data["devices"] is not None and again is not kept
        assert run.verdict("health", node).passed
    finally:
        run.close()


def test_a_failed_test_gives_the_cyclic_collector_back(pytester):
    # Each failed test's exception holds its frames in a cycle: a failing fleet's would
    # pile up with the collector paused.
    pytester.makepyfile(watch_publish=WATCH)
    inv = pair_inventory(pytester.path)
    broken = script(pytester.path / "broken-python", "exit 3\n")
    inv.write_text(inv.read_text().replace("  - name: n[1-2]\n",
                                           f"  - name: n1\n  - name: n2\n    python: {broken}\n"))
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        SUITES, "--inventory", str(inv), "--reports", str(reports), "-p", "no:cacheprovider",
        "-p", "watch_publish", "-k", "health or memory", timeout=600)
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert junit_cases(reports)["n2"]["health"][0] == "failure"
    assert (reports / "latest" / "gc-at-publish").read_text() == "True [False, True]"

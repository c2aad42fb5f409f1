"""Figures, not documents: once a check is judged on every node, the run lets
its documents go and keeps what the rest of the run needs: the verdicts, the speed-bearing
figures goodput prices, and of the facts check what later checks read (GPU count, tools,
baselines). Three nodes replay the real probes' recorded documents (tests/support/replay.py)."""

from __future__ import annotations

import json
import textwrap

from support.replay import replay_python

from burnin.checks import CHECKS
from burnin.engine.run import Run
from burnin.figures import goodput
from burnin.figures.record_figures import key_figures, read_records
from burnin.inventory.schema import load_inventory


def replay_run(tmp_path) -> Run:
    replay = replay_python(tmp_path / "replay")
    inv = tmp_path / "inv.yaml"
    # No `gpus:`: every node's count is learned from its health facts (NodeFacts).
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, python: {replay}}}
        nodes:
          - name: n[1-3]
        quarantine:
          ledger: {tmp_path / 'ledger.db'}
        """))
    inventory = load_inventory(inv)
    return Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "r1")


def test_a_judged_checks_documents_are_let_go_and_what_the_run_needs_is_kept(tmp_path):
    run = replay_run(tmp_path)
    try:
        facts = {n.name: (run.gpus(n), run.equipped(n), run.baseline("fabric", n))
                 for n in run.nodes}
        assert all(b is not None for _, _, b in facts.values()), facts  # a real baseline
        for check in ("health", "burn"):
            verdicts = {n.name: run.verdict(check, n) for n in run.nodes}
            assert all(v.passed for v in verdicts.values()), verdicts
        records = read_records(run.run_dir / "results.jsonl")
        assert {r["check"] for r in records} == {"health", "burn"}
        # results.jsonl has them whole: burn's devices, health's baselines.
        assert all(r["data"]["devices"] if r["check"] == "burn"
                   else r["data"]["figures"]["baselines"] for r in records)
        for check in ("health", "burn"):
            for name, o in run.outcomes(check).items():
                assert o.ok and "devices" not in o.data, (check, name, o.data)
                assert len(json.dumps(o.data)) < 200, (check, name, o.data)
        # What later checks and the report read of the facts is as it was.
        assert {n.name: (run.gpus(n), run.equipped(n), run.baseline("fabric", n))
                for n in run.nodes} == facts
        # goodput prices the figures the documents had.
        speed = {m.metric for m in CHECKS["burn"].measures if m.speed}
        want = {r["node"]: [f for f in key_figures(r) if f.metric in speed]
                for r in records if r["check"] == "burn"}
        assert run.figures("burn") == want and all(want.values())
        assert goodput.of_run(run)[0] == goodput.speeds(
            {node: [("burn", f) for f in figs] for node, figs in want.items()})
    finally:
        run.close()


def test_a_check_not_yet_judged_keeps_its_documents(tmp_path):
    """The fleet figures and judges of a check read its whole documents: nothing is let
    go before every node of it is judged."""
    run = replay_run(tmp_path)
    try:
        outcomes = run.outcomes("burn")
        assert all(o.data["devices"] for o in outcomes.values())
        assert run.judged("burn", "n1") is None
    finally:
        run.close()

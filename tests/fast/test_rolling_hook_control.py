"""`rolling.hooks` without hosts: the section refused with its line and key when a hook is
missing or empty, and the loop failing closed on hooks that fail or hang (real scripts on
this machine, a real ledger; the wave's run stands in: every node it is given passes). A
node whose out hook fails is never validated nor counted out, a busy hook that errs or hangs
keeps its node from validation, a back hook that fails or hangs leaves its node counted out
of service (the next loop takes it up), and each hook's answer is in the ledger, bounded."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from burnin.cli.rolling import Loop
from burnin.gate.rolling_control import HookControl
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import Ledger
from burnin.ledger.rolling import HOOK, OUT, RELEASED, VALIDATED
from burnin.model.outcome import Outcome


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def inventory(tmp: Path, hooks: dict, **rolling) -> Path:
    inv = tmp / "inv.yaml"
    inv.write_text(yaml.safe_dump({
        "version": 1, "cluster": "c", "defaults": {"transport": "ssh", "gpus": 0},
        "nodes": [{"name": "n[1-3]", "address": "10.0.0.[1-3]"}],
        "quarantine": {"ledger": str(tmp / "q.db"), "actions": []},
        "rolling": {"max_out": 1, "drain_timeout_s": 1, "poll_s": 0.05, "retries": 2,
                    "hooks": hooks, **rolling}}, sort_keys=False))
    return inv


@pytest.mark.parametrize("hooks, error", [
    ({"busy": ["b"], "out": ["o"]}, "rolling.hooks: missing back; every one of busy, out and "
                                    "back is needed"),
    ({"busy": [], "out": ["o"], "back": ["k"]}, "rolling.hooks.busy: expected a command"),
    ({"busy": "b {node}", "out": ["o"], "back": ["k"]}, "rolling.hooks.busy: expected a list"),
    ({"busy": ["b"], "out": ["o"], "back": ["k"], "timeout_s": 0},
     "rolling.hooks.timeout_s: expected"),
    ({"busy": ["b"], "out": ["o"], "back": ["k"], "drain": ["d"]},
     "rolling.hooks.drain: unknown key"),
])
def test_a_bad_hooks_section_is_refused_with_its_key(tmp_path, hooks, error):
    with pytest.raises(InventoryError) as e:
        load_inventory(inventory(tmp_path, hooks))
    assert error in str(e.value)


class StandInRun(Loop):
    """The loop with its wave's run replaced: every node given passes."""

    validated: list[str]

    def run_wave(self, names):
        self.validated = getattr(self, "validated", []) + list(names)
        return "run-1", {n: [("health", Outcome.PASSED, "")] for n in names}


def loop_of(tmp: Path, busy: str, out: str, back: str, **hooks) -> tuple[StandInRun, Ledger]:
    inv = load_inventory(inventory(tmp, {
        "busy": [script(tmp / "busy", busy), "{node}"],
        "out": [script(tmp / "out", out), "{node}"],
        "back": [script(tmp / "back", back), "{node}"], "timeout_s": 0.5, **hooks}))
    ledger = Ledger(tmp / "q.db")
    nodes = {n.name: n for n in inv.nodes}
    loop = StandInRun(inv, list(nodes), ledger, tmp / "reports", [], "inv.yaml",
                      HookControl(inv.rolling.hooks, nodes, ledger))
    return loop, ledger


def test_an_out_hook_that_fails_or_hangs_keeps_its_node_from_the_wave(tmp_path):
    loop, ledger = loop_of(tmp_path, busy="exit 1\n",
                           out='[ "$1" = n1 ] && exit 3; [ "$1" = n2 ] && sleep 5; exit 0\n',
                           back="exit 0\n")
    assert loop.run() == 1
    assert loop.validated == ["n3"]
    last = ledger.rolling_last()
    assert last.get("n1") is None and last.get("n2") is None, last  # never counted out
    said = [e["why"] for e in ledger.history("n2") if e["event"] == HOOK]
    assert said == ["out hook: timed out after 0.5 s"], said


def test_a_busy_hook_that_errs_or_hangs_means_busy(tmp_path):
    loop, ledger = loop_of(tmp_path, out="exit 0\n", back="exit 0\n",
                           busy='[ "$1" = n1 ] && { echo cannot ask; exit 2; }\n'
                                '[ "$1" = n2 ] && sleep 5; exit 1\n')
    assert loop.run() == 1
    assert loop.validated == ["n3"]
    for n in ("n1", "n2"):  # given back after drain_timeout_s, each of its two tries
        assert ledger.rolling_last()[n] == RELEASED
        assert [e["event"] for e in ledger.history(n)].count(OUT) == 2
    said = [e["why"] for e in ledger.history("n1") if e["event"] == HOOK]
    assert "busy hook: exit 2: cannot ask" in said, said


def test_a_back_hook_that_fails_leaves_its_node_out_and_the_next_loop_takes_it_up(tmp_path):
    flag = tmp_path / "back-fails"
    flag.touch()
    loop, ledger = loop_of(tmp_path, busy="exit 1\n", out="exit 0\n",
                           back=f'[ "$1" = n2 ] && [ -e {flag} ] && {{ sleep 5; exit 0; }}\n'
                                f"seq 1 1000; exit 0\n", output_bytes=20)
    assert loop.run() == 1
    # n2 stays out, counted in max_out: n3 waits for the next loop
    assert loop.validated == ["n1", "n2"]
    assert ledger.rolling_last()["n2"] == OUT, ledger.history("n2")
    said = [e["why"] for e in ledger.history("n1") if e["event"] == HOOK]
    assert any(w.startswith("back hook: exit 0: [") and w.endswith("1000") for w in said), \
        said
    assert all(len(w) < 100 for w in said), said  # output_bytes bounds what is kept
    flag.unlink()
    again, _ = loop_of(tmp_path, busy="exit 1\n", out="exit 0\n", back="exit 0\n")
    assert again.run() == 0
    assert again.validated == ["n3"]  # n2 validated within `every`: only put back
    assert ledger.rolling_last()["n2"] == RELEASED
    assert [e["event"] for e in ledger.history("n2")].count(VALIDATED) == 1

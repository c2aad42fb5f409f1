"""The train job across nodes on real processes: 'nodes' on the local transport, each its
own probe and rank processes, one gloo group over TCP between them; a node whose optimizer
update flips a bit is planted below its probe (tests/test_train.py's FLIP)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from support.suiterun import TINY_TRAIN, junit_cases, run_suite, script
from test_train import FLIP, python_with

pytestmark = pytest.mark.slow


def inventory(path, pythons: dict[str, str]) -> str:
    inv = path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0}}
        checks:
          train: {json.dumps({**TINY_TRAIN, "rendezvous_timeout_s": 30})}
        nodes:
        """) + "".join(f"  - name: {n}\n    address: 127.0.0.1\n    python: {p}\n"
                       for n, p in pythons.items()))
    return str(inv)


def records(reports) -> dict[str, dict]:
    return {r["node"]: r for r in map(json.loads, (reports / "latest" / "results.jsonl").open())
            if r["check"] == "train_internode"}


def test_three_nodes_train_one_job_and_pass(pytester, finding):
    healthy = script(pytester.path / "python", f"OMP_NUM_THREADS=1 exec {sys.executable} "
                                               "\"$@\"\n")
    inv = inventory(pytester.path, {f"n{i}": healthy for i in (1, 2, 3)})
    result, reports = run_suite(pytester, inv, "-k", "train_internode")
    cases = junit_cases(reports)
    for n in ("n1", "n2", "n3"):
        assert cases[n] == {"train_internode": ("passed", "")}, cases[n]
    recs = records(reports)
    group = recs["n1"]["data"]["figures"]["group"]
    assert group["members"] == 3 and group["world"] == 3 and group["rank0"] == "n1"
    # one job: each node's rank is its place in the group, and all end with the same bits
    assert [d["rank"] for n in ("n1", "n2", "n3") for d in recs[n]["data"]["devices"]] == \
        [0, 1, 2]
    assert len({d["digest"] for r in recs.values() for d in r["data"]["devices"]}) == 1
    assert group["losses"][-1] < group["losses"][0]
    finding(f"train_internode: 3 local nodes, 1 gloo rank each: {group['tokens_per_s']:g} "
            f"tokens/s, step {group['step_s']:g} s (slowest rank)")
    result.assert_outcomes(passed=3)


def test_a_node_whose_update_flips_a_bit_fails_alone_named_by_node_and_device(pytester):
    healthy = script(pytester.path / "python", f"OMP_NUM_THREADS=1 exec {sys.executable} "
                                               "\"$@\"\n")
    # n2's rank is rank 1 of the group. A wrong product in its forward or backward would
    # corrupt its gradient, which the all-reduce spreads to every replica alike (the train
    # check's digest consensus catches that node on its own); a fault in its update, after
    # the all-reduce, makes its replica leave the others'.
    wrong = python_with(pytester.path, "flip", FLIP, ranks=("1",))
    inv = inventory(pytester.path, {"n1": healthy, "n2": wrong, "n3": healthy})
    result, reports = run_suite(pytester, inv, "-k", "train_internode")
    cases = {n: c["train_internode"] for n, c in junit_cases(reports).items()}
    assert cases["n1"] == ("passed", "") and cases["n3"] == ("passed", ""), cases
    outcome, message = cases["n2"]
    assert outcome == "failure" and "rank 1 on n2 (cpu)" in message, message
    assert "after step 3 across nodes" in message, message

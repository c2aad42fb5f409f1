"""The train job across nodes over the real SSH test hosts (tests/support/testhosts.py):
each host its own network namespace and sshd, its probe and rank processes started over
SSH, one gloo group over TCP across the namespaces; a host whose optimizer update flips a
bit is planted below its probe (its `python:`, tests/test_train.py's FLIP)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from support.replay import replay_python
from support.suiterun import TINY_TRAIN, junit_cases, run_suite, script
from test_train import FLIP, SITE, TORCH

# Real SSH hosts: minutes, not seconds. CI runs them; `-m "not slow"` leaves them out.
pytestmark = pytest.mark.slow

# The recorded model, and a rendezvous bound for a hang only: the hosts share this
# machine's (loaded) cores.
SETTINGS = {"train": {**TINY_TRAIN, "rendezvous_timeout_s": 60}}


def admitted_by_replay(path, python: str) -> str:
    """A node's `python:` whose health and single-node train probes print their recorded
    honest documents (tests/support/replay.py) while its train_internode ranks run for
    real on `python`. The single-node probes are not what these tests claim: they are run
    only so that the node is admitted to the inter-node job, as an operator's run has
    them (their own measurements and faults are tests/test_train.py's, on the real
    probes); replayed, they cost no `import torch` (six of a test's twelve torch
    processes)."""
    return replay_python(path, real_in_groups=("train",), python=python)


def records(reports) -> dict[str, dict]:
    return {r["node"]: r for r in map(json.loads, (reports / "latest" / "results.jsonl").open())
            if r["check"] == "train_internode"}


def test_three_ssh_hosts_train_one_job_and_pass(pytester, make_hosts, finding):
    hosts = make_hosts(3)
    # One thread a rank: three hosts' ranks share this machine's cores. Each start says
    # where it ran: the host's own name is its UTS namespace's, set by its sshd's init.
    where = pytester.path / "where.log"
    healthy = script(pytester.path / "python", f"hostname >> {where}\n"
                                               f"OMP_NUM_THREADS=1 exec {sys.executable} "
                                               "\"$@\"\n")
    inv = hosts.write_inventory(pytester.path / "inv.yaml", checks=SETTINGS,
                                python=admitted_by_replay(pytester.path / "replay", healthy))
    # The job and what admits a node to it: health (its device count) and the single-node
    # train check, as an operator's run has them (replayed; the job itself is real).
    result, reports = run_suite(pytester, inv, "-k", "health or train")
    cases = junit_cases(reports)
    for name in ("h1", "h2", "h3"):
        assert cases[name] == {check: ("passed", "") for check in
                               ("health", "train", "train_internode")}, cases[name]
    assert set(where.read_text().split()) == {"h1", "h2", "h3"}
    recs = records(reports)
    group = recs["h1"]["data"]["figures"]["group"]
    assert group["members"] == 3 and group["world"] == 3 and group["rank0"] == "h1", group
    # One job across the namespaces: each host's rank is its place in the group (its own
    # document says so), and every replica ends with the same bits.
    assert [d["rank"] for n in ("h1", "h2", "h3") for d in recs[n]["data"]["devices"]] == \
        [0, 1, 2]
    assert len({d["digest"] for r in recs.values() for d in r["data"]["devices"]}) == 1
    assert group["losses"][-1] < group["losses"][0]
    finding(f"train_internode over 3 SSH hosts, 1 gloo rank each: {group['tokens_per_s']:g} "
            f"tokens/s, step {group['step_s']:g} s (slowest rank)")
    result.assert_outcomes(passed=9)


def test_an_ssh_host_whose_update_flips_a_bit_fails_alone(pytester, make_hosts):
    hosts = make_hosts(3)
    healthy = script(pytester.path / "python", f"OMP_NUM_THREADS=1 exec {sys.executable} "
                                               "\"$@\"\n")
    # h2 holds rank 1. The flip is in its update, after the all-reduce: its replica leaves
    # the others' (a fault before the all-reduce would spread to every replica alike). It
    # fires in the three-rank job alone: the single-node train check (two ranks on the
    # host) would otherwise fail h2 and keep it out, and the inter-node job must be seen
    # to name it on its own evidence. (The single-node probes replay here, so h2's pass
    # there is its recorded healthy document; the guard keeps the planted fault to the
    # job whichever way they run.)
    in_the_group = "    if os.environ.get('WORLD_SIZE') == '3':\n" + textwrap.indent(FLIP, "    ")
    site = pytester.path / "site-flip"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE.format(ranks={"1"}, imports=TORCH,
                                                       body=in_the_group))
    # The flip's site under the replay's (which runs it: replay_site chains to the
    # sitecustomize it shadows), so that h2's rank 1 in the job loads it.
    wrong = script(pytester.path / "python-flip",
                   f"PYTHONPATH={site} exec "
                   f"{admitted_by_replay(pytester.path / 'replay-flip', healthy)} \"$@\"\n")
    inv = hosts.write_inventory(pytester.path / "inv.yaml", checks=SETTINGS,
                                python=admitted_by_replay(pytester.path / "replay", healthy),
                                nodes={"h2": {"python": wrong}})
    result, reports = run_suite(pytester, inv, "-k", "health or train")
    every = junit_cases(reports)
    # h2 passes the single-node checks, joins the inter-node job, and only it fails there.
    assert all(every[n]["health"] == every[n]["train"] == ("passed", "") for n in every), every
    cases = {n: c["train_internode"] for n, c in every.items()}
    assert cases["h1"] == ("passed", "") and cases["h3"] == ("passed", ""), cases
    outcome, message = cases["h2"]
    assert outcome == "failure" and "rank 1 on h2 (cpu)" in message, message
    assert "after step 3 across nodes" in message, message
    result.assert_outcomes(passed=8, failed=1)

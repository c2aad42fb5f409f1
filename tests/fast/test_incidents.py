"""The shared-cause decision alone (burnin/gate/incidents.py): its rules at their edges, and a
Hypothesis property over random fleets."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from burnin.gate.incidents import FRACTION, TOPOLOGY, binomial_tail, detect
from burnin.model.nodes import SharedCauseSettings

S = SharedCauseSettings()
CHECKS = ("health", "memory", "sdc", "burn", "storage", "allreduce", "fabric", "pcie",
          "allreduce_internode")
RATE = 6.5 / 1000  # failures per node-day (Meta's RSC, arXiv 2410.21680): one night's run


def fleet(n: int, per_switch: int = 4) -> dict[str, dict[str, str]]:
    return {f"n{i:05d}": {"switch": f"leaf{i // per_switch}", "rack": f"r{i // 2}"}
            for i in range(n)}


def verdicts(nodes, failing) -> dict[str, bool]:
    return {n: n in failing for n in nodes}


def test_every_node_failing_is_one_fraction_incident_with_the_words_of_the_issue():
    nodes = [f"n{i}" for i in range(6)]
    (i,) = detect({"storage": verdicts(nodes, nodes)}, {}, S)
    assert (i.rule, i.nodes, i.judged) == (FRACTION, tuple(nodes), 6)
    assert i.message.startswith("shared cause suspected: storage failed on 6 of 6 nodes")


def test_the_fraction_rule_needs_more_than_the_fraction_and_the_minimum():
    nodes = [f"n{i}" for i in range(20)]
    assert detect({"burn": verdicts(nodes, nodes[:4])}, {}, S) == []  # 20%: not more
    assert [i.nodes for i in detect({"burn": verdicts(nodes, nodes[:5])}, {}, S)] == \
        [tuple(nodes[:5])]
    few = nodes[:5]  # 2 of 5 is 40%, but under min_nodes
    assert detect({"burn": verdicts(few, few[:2])}, {}, S) == []
    assert detect({"burn": verdicts(few, few[:3])}, {}, S) != []
    strict = SharedCauseSettings(fraction=0.5, min_nodes=2)
    assert detect({"burn": verdicts(few, few[:2])}, {}, strict) == []
    assert detect({"burn": verdicts(few, few[:3])}, {}, strict) != []


def test_a_switch_whose_nodes_all_fail_is_named_while_the_others_pass():
    labels = {f"n{i}": {"switch": "leafA" if i < 3 else "leafB"} for i in range(6)}
    (i,) = detect({"allreduce_internode": verdicts(labels, ["n3", "n4", "n5"])}, labels, S)
    assert (i.rule, i.component, i.nodes) == (TOPOLOGY, "switch=leafB", ("n3", "n4", "n5"))
    assert i.message.startswith("switch=leafB: allreduce_internode failed on all 3 of its "
                                "nodes, none elsewhere")


def test_two_nodes_of_one_rack_failing_among_other_failures_are_not_confined():
    labels = fleet(40)
    failing = ["n00000", "n00001", "n00020"]  # rack r0 whole, and one elsewhere
    found = detect({"sdc": verdicts(labels, failing)}, labels, S)
    assert all(i.rule != TOPOLOGY for i in found), found
    assert detect({"sdc": verdicts(labels, failing[:2])}, labels, S) == []  # under min_nodes
    two = SharedCauseSettings(min_nodes=2)
    alone = detect({"sdc": verdicts(labels, failing[:2])}, labels, two)  # none elsewhere
    assert [(i.component, i.nodes) for i in alone] == [("rack=r0", ("n00000", "n00001"))]
    assert all(i.rule != TOPOLOGY for i in detect({"sdc": verdicts(labels, failing)}, labels,
                                                  two))


def test_the_largest_failing_component_is_named_not_its_racks():
    labels = fleet(40, per_switch=8)
    failing = [f"n{i:05d}" for i in range(8)] + ["n00030"]
    (i,) = detect({"fabric": verdicts(labels, failing)}, labels, S)
    assert i.component == "switch=leaf0" and len(i.nodes) == 8 and i.elsewhere == 1


def test_only_the_labels_named_are_components():
    labels = {f"n{i:02d}": {"switch": f"leaf{i // 8}", "rack": f"r{i // 4}"} for i in range(40)}
    failing = [f"n{i:02d}" for i in range(8)]  # leaf0: racks r0 and r1
    assert [i.component for i in detect({"fabric": verdicts(labels, failing)}, labels, S)] \
        == ["switch=leaf0"]
    named = detect({"fabric": verdicts(labels, failing)}, labels,
                   SharedCauseSettings(labels=("rack",)))
    assert sorted(i.component for i in named) == ["rack=r0", "rack=r1"]
    assert detect({"fabric": verdicts(labels, failing)}, labels,
                  SharedCauseSettings(labels=())) == []


def test_the_binomial_figure_of_the_defaults():
    # docs/operator/incidents.md quotes these: a healthy fleet's independent failures reach the
    # fraction rule at most this often, whatever its size.
    worst = max(binomial_tail(n, RATE, max(3, int(0.2 * n) + 1)) for n in range(2, 400))
    assert 9e-5 < worst < 1e-4
    assert binomial_tail(6, RATE, 3) < 6e-6


@settings(derandomize=True, max_examples=300, deadline=None)
@given(n=st.integers(2, 3000), per_switch=st.integers(2, 64), seed=st.integers(0, 2**32),
       rate=st.floats(0, RATE))
def test_independent_faults_at_realistic_rates_never_raise_an_incident(n, per_switch, seed,
                                                                       rate):
    rng = random.Random(seed)  # independent faults: hypothesis chooses no pattern
    labels = fleet(n, per_switch)
    judged = {c: {node: rng.random() < rate for node in labels} for c in CHECKS}
    assert detect(judged, labels, S) == []


@settings(derandomize=True, max_examples=300, deadline=None)
@given(n=st.integers(6, 3000), per_switch=st.integers(8, 64), seed=st.integers(0, 2**32),
       rate=st.floats(0, RATE), share=st.floats(0.21, 1.0))
def test_a_planted_shared_cause_always_raises_one(n, per_switch, seed, rate, share):
    rng = random.Random(seed)
    labels = fleet(n, per_switch)
    names = sorted(labels)
    judged = {c: {node: rng.random() < rate for node in labels} for c in CHECKS}
    # a leaf switch down (one of the full ones, not the whole fleet): its nodes all fail
    # allreduce_internode, while independent faults go on elsewhere
    full = n // per_switch
    if 0 < full and per_switch < n:
        switch = f"leaf{rng.randrange(full)}"
        down = [x for x in names if labels[x]["switch"] == switch]
        for x in down:
            judged["allreduce_internode"][x] = True
    else:
        down = []
    # a storage service down: more than `share` of the fleet fails storage
    planted = rng.sample(names, min(n, max(3, int(share * n) + 1)))
    for x in planted:
        judged["storage"][x] = True
    found = detect(judged, labels, S)
    covered = {(x, i.check) for i in found for x in i.nodes}
    assert all((x, "allreduce_internode") in covered for x in down)
    named = {i.component for i in found if i.check == "allreduce_internode"}
    assert not down or f"switch={labels[down[0]]['switch']}" in named or \
        any(i.rule == FRACTION for i in found if i.check == "allreduce_internode")
    assert all((x, "storage") in covered for x in planted)


def test_the_inventory_s_shared_cause_settings_are_read_and_checked(tmp_path):
    import pytest

    from burnin.inventory.schema import InventoryError, load_inventory

    inv = tmp_path / "inv.yaml"
    head = "version: 1\nnodes: [{name: n1}]\nquarantine:\n"
    inv.write_text(head + "  shared_cause: {fraction: 0.3, min_nodes: 4, labels: [switch]}\n"
                          "  incident_command: [/bin/page, '{run}']\n")
    q = load_inventory(inv).quarantine
    assert q.shared_cause == SharedCauseSettings(0.3, 4, ("switch",))
    assert q.incident_command == ("/bin/page", "{run}")
    inv.write_text(head + "  release_after: 2\n")
    assert load_inventory(inv).quarantine.shared_cause == SharedCauseSettings(0.2, 3, None)
    inv.write_text(head + "  shared_cause: {fraction: 2, min_nodes: 0, labels: switch, x: 1}\n")
    with pytest.raises(InventoryError) as e:
        load_inventory(inv)
    text = str(e.value)
    for key in ("quarantine.shared_cause.fraction", "quarantine.shared_cause.min_nodes",
                "quarantine.shared_cause.labels", "quarantine.shared_cause.x"):
        assert key in text, text
    assert ":4:" in text or "line 4" in text or "inv.yaml:4" in text, text

"""The shared-cause decision alone (burnin/gate/incidents.py): its rules at their edges, and a
Hypothesis property over random fleets."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from burnin.gate.incidents import FRACTION, TOPOLOGY, binomial_tail, detect, fraction_reached
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
    # None elsewhere, and still no incident: of 20 racks of two, one failing whole by
    # chance is 20 x 0.0065 ** 2 = 8e-4, no rarity.
    assert detect({"sdc": verdicts(labels, failing[:2])}, labels, two) == []
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
    assert load_inventory(inv).quarantine.shared_cause == SharedCauseSettings(
        0.2, 3, ("switch", "leaf", "spine", "rack", "pdu", "chassis", "row"))
    inv.write_text(head + "  shared_cause: {fraction: 2, min_nodes: 0, labels: switch, x: 1}\n")
    with pytest.raises(InventoryError) as e:
        load_inventory(inv)
    text = str(e.value)
    for key in ("quarantine.shared_cause.fraction", "quarantine.shared_cause.min_nodes",
                "quarantine.shared_cause.labels", "quarantine.shared_cause.x"):
        assert key in text, text
    assert ":4:" in text or "line 4" in text or "inv.yaml:4" in text, text


def test_the_binomial_tail_at_its_edges():
    assert binomial_tail(5, 0.0, 0) == 1.0  # nothing to reach: certain, whatever p
    assert binomial_tail(1, 0.5, 1) == 0.5
    assert abs(binomial_tail(2, 0.5, 1) - 0.75) < 1e-12
    assert abs(binomial_tail(2, 0.5, 2) - 0.25) < 1e-12  # k == n: one term, not none
    assert binomial_tail(2, 0.5, 3) == 0.0
    # a probability, never above 1, though the terms' rounding sums past it
    assert all(binomial_tail(n, p, 1) <= 1.0 for n in range(1, 40) for p in (0.9, 0.99))


def test_the_fraction_rule_itself_is_more_than_the_fraction():
    assert not fraction_reached(4, 20, S)  # 20% exactly: not more
    assert not fraction_reached(3, 20, S)
    assert fraction_reached(5, 20, S)
    assert not fraction_reached(2, 5, S)  # under min_nodes


def test_a_fraction_incident_records_the_settings_that_raised_it():
    nodes = [f"n{i}" for i in range(6)]
    (i,) = detect({"storage": verdicts(nodes, nodes)}, {}, SharedCauseSettings(0.3, 4))
    assert i.figures == {"fraction": 0.3, "min_nodes": 4}


def test_a_topology_incident_counts_the_nodes_judged():
    labels = {f"n{i}": {"switch": "leafA" if i < 3 else "leafB"} for i in range(6)}
    (i,) = detect({"fabric": verdicts(labels, ["n0", "n1", "n2"])}, labels, S)
    assert (i.judged, i.group, i.elsewhere) == (6, 3, 0)


def test_nodes_without_labels_are_judged_but_in_no_component():
    labels = {f"n{i}": {"switch": "leafA"} for i in range(3)}  # n3..n9: no inventory labels
    nodes = [f"n{i}" for i in range(10)]
    (i,) = detect({"fabric": verdicts(nodes, ["n0", "n1", "n2"])}, labels, S)
    assert (i.component, i.judged) == ("switch=leafA", 10)


def test_one_component_holding_every_judged_node_is_the_fraction_rule_s():
    labels = {f"n{i}": {"switch": "leafA"} for i in range(6)}
    (i,) = detect({"storage": verdicts(labels, labels)}, labels, S)
    assert (i.rule, i.component, len(i.nodes)) == (FRACTION, "", 6)


def test_components_of_one_size_are_named_by_label_then_value():
    # the same three nodes are rack z and switch a: the label decides, rack before switch
    labels = {f"n{i}": {"rack": "z" if i < 3 else "y", "switch": "a" if i < 3 else "b"}
              for i in range(20)}
    (i,) = detect({"fabric": verdicts(labels, ["n0", "n1", "n2"])}, labels, S)
    assert i.component == "rack=z"
    # two switches failing whole, named in order of their values, not of their nodes
    labels = {f"n{i:02d}": {"switch": "leafZ" if i < 3 else "leafA" if i < 6 else "leafM"}
              for i in range(40)}
    failing = [f"n{i:02d}" for i in range(6)]
    found = detect({"fabric": verdicts(labels, failing)}, labels, S)
    assert [i.component for i in found] == ["switch=leafA", "switch=leafZ"]


def test_a_smaller_component_is_still_named_after_one_inside_a_larger():
    # leaf0 (racks r0, r1) fails whole, and rack r2 of leaf1: the racks of leaf0 are
    # passed over, r2 is named
    labels = {f"n{i:02d}": {"switch": f"leaf{i // 8}", "rack": f"r{i // 4}"} for i in range(40)}
    failing = [f"n{i:02d}" for i in range(12)]
    found = detect({"fabric": verdicts(labels, failing)}, labels, S)
    assert [i.component for i in found] == ["switch=leaf0", "rack=r2"]


def test_a_common_component_failing_among_others_does_not_hide_a_rare_one():
    # 3 switches: sA failing whole is rare; pdu p0 failing whole, one pdu of 28, is not
    labels = {f"n{i:02d}": {"switch": "sA" if i < 3 else "sB" if i < 15 else "sC",
                            "pdu": "p0" if 15 <= i < 18 else f"p{i + 1}"} for i in range(30)}
    failing = ["n00", "n01", "n02", "n15", "n16", "n17"]  # 20%: not the fraction rule
    found = detect({"fabric": verdicts(labels, failing)}, labels, S)
    assert [(i.component, i.elsewhere) for i in found] == [("switch=sA", 3)]


def test_two_components_named_keep_their_parts_from_being_named_again():
    labels = {f"n{i:02d}": {"switch": f"leaf{i // 8}", "rack": f"r{i // 4}"} for i in range(80)}
    failing = [f"n{i:02d}" for i in range(16)]  # leaf0 and leaf1 whole, 20% of the fleet
    found = detect({"fabric": verdicts(labels, failing)}, labels, S)
    assert [i.component for i in found] == ["switch=leaf0", "switch=leaf1"]


def test_the_failures_left_outside_a_component_must_be_more_than_the_fraction():
    labels = {f"n{i}": {"switch": "leafA" if i < 5 else "leafB"} for i in range(10)}
    # leafA whole and n5: 1 of the 5 left is 20%, not more: leafA alone is the incident
    found = detect({"fabric": verdicts(labels, ["n0", "n1", "n2", "n3", "n4", "n5"])},
                   labels, S)
    assert [(i.rule, i.component) for i in found] == [(TOPOLOGY, "switch=leafA")]
    found = detect({"fabric": verdicts(labels, ["n0", "n1", "n2", "n3", "n4", "n5", "n6"])},
                   labels, S)
    assert [(i.rule, len(i.nodes)) for i in found] == [(FRACTION, 7)]


def _case(node, check, outcome, message="boom"):
    from burnin.model.outcome import CaseResult, Outcome
    return CaseResult(node, check, Outcome(outcome), message, output="trace")


def _nodes(n, switch=lambda i: "leafA"):
    from burnin.model.nodes import Node
    return [Node(name=f"n{i}", address=f"n{i}", labels={"switch": switch(i)})
            for i in range(n)]


def test_a_run_s_outcomes_become_incidents_over_the_nodes_judged():
    from burnin.gate.incidents import of_cases
    # storage: 3 failed, 1 errored of 6 judged; 4 more skipped or not run count for nothing,
    # and the nodes after them count still
    cases = {(f"n{i}", "storage"): _case(f"n{i}", "storage", o) for i, o in enumerate(
        ["skipped", "failed", "failed", "error", "failed", "", "passed", "passed",
         "skipped", ""])}
    cases[("n0", "health")] = _case("n0", "health", "passed")
    (i,) = of_cases(cases, _nodes(10), S)
    assert (i.check, i.rule, i.nodes, i.judged) == ("storage", FRACTION,
                                                   ("n1", "n2", "n3", "n4"), 6)
    assert i.figures == {"fraction": 0.2, "min_nodes": 3}
    assert of_cases(cases, _nodes(10), SharedCauseSettings(0.7, 3)) == []
    # labels come from the nodes: leafB failing whole, the rest passing
    cases = {(f"n{i}", "fabric"): _case(f"n{i}", "fabric", "failed" if i >= 7 else "passed")
             for i in range(10)}
    (i,) = of_cases(cases, _nodes(10, lambda i: "leafB" if i >= 7 else "leafA"), S)
    assert (i.component, i.judged) == ("switch=leafB", 10)


def test_marking_starts_each_incident_node_s_failure_with_its_incident():
    from burnin.gate.incidents import mark
    nodes = [f"n{i}" for i in range(6)]
    (inc,) = detect({"storage": verdicts(nodes, nodes[:4])}, {}, S)
    cases = {(n, "storage"): _case(n, "storage", "failed" if n in nodes[:4] else "passed")
             for n in nodes}
    cases[("n0", "storage")].message = "x" * 5000
    del cases[("n3", "storage")]  # an incident node with no case of its own: nothing to mark
    mark(cases, [inc])
    assert cases[("n1", "storage")].message == f"{inc.message}; boom"
    # the failure's text is not copied: the message says the incident
    assert cases[("n1", "storage")].output == "trace"
    assert cases[("n0", "storage")].message.startswith(inc.message)
    assert len(cases[("n0", "storage")].message) == 4000
    assert cases[("n4", "storage")].message == "boom"
    assert cases[("n4", "storage")].output == "trace"


def test_paging_fills_the_command_s_placeholders_in_each_argument(monkeypatch):
    import burnin.gate.incidents as incidents
    calls = []

    def run(argv):
        calls.append(argv)
        return ok, "exit status 3"

    monkeypatch.setattr(incidents, "run_argv", run)
    labels = {f"n{i}": {"switch": "leafA" if i < 3 else "leafB"} for i in range(6)}
    (inc,) = detect({"fabric": verdicts(labels, ["n3", "n4", "n5"])}, labels, S)
    ok = True
    res = incidents.page(("/bin/page", "--run={run}", "{check}@{component}", "{nodes}",
                          "{message}", "plain"), inc, "r42")
    assert calls == [["/bin/page", "--run=r42", "fabric@switch=leafB", "n3,n4,n5",
                      inc.message, "plain"]]
    assert (res.action, res.node, res.ok, res.message) == \
        ("incident_command", "switch=leafB", True, "paged")
    ok = False
    res = incidents.page(("/bin/page",), inc, "r42")
    assert (res.action, res.node, res.ok, res.message) == \
        ("incident_command", "switch=leafB", False, "page failed: exit status 3")


def test_the_summary_names_each_incident_and_says_nobody_was_quarantined():
    from burnin.gate.incidents import summary_lines
    assert summary_lines([]) == []
    nodes = [f"n{i}" for i in range(6)]
    (inc,) = detect({"storage": verdicts(nodes, nodes[:4])}, {}, S)
    assert summary_lines([inc]) == [
        f"INCIDENT {inc.message}: n0, n1, n2, n3",
        "  not quarantined, no action taken: a person decides (docs/operator/incidents.md); "
        "burnin quarantine add --run RUN --check CHECK --reason WHY quarantines them by hand"]


@settings(derandomize=True, max_examples=200, deadline=None)
@given(n=st.integers(3, 400), per_label=st.integers(2, 40), seed=st.integers(0, 2**32),
       bad=st.floats(0, 1), own=st.floats(0, 1),
       declared=st.lists(st.sampled_from(["switch", "rack", "batch", "owner"]), max_size=4,
                         unique=True))
def test_own_evidence_is_never_in_an_incident_and_undeclared_labels_never_a_component(
        n, per_label, seed, bad, own, declared):
    """Whatever fails, however much of it is the nodes' own evidence and whichever labels
    the inventory declares as topology: a case with its node's own evidence is in no
    incident, and no component is named of a label not declared."""
    from burnin.gate.incidents import of_cases
    from burnin.model.nodes import Node
    rng = random.Random(seed)
    nodes = [Node(name=f"n{i:04d}", address=f"n{i:04d}",
                  labels={"switch": f"s{i // per_label}", "rack": f"r{i // 2}",
                          "batch": f"b{i // per_label}", "owner": "team"})
             for i in range(n)]
    cases = {}
    for node in nodes:
        for check in ("sdc", "storage"):
            outcome = "failed" if rng.random() < bad else "passed"
            case = _case(node.name, check, outcome)
            if outcome == "failed" and rng.random() < own:
                case.own = "digest"
            cases[(node.name, check)] = case
    s = SharedCauseSettings(labels=tuple(declared))
    for incident in of_cases(cases, nodes, s):
        assert all(not cases[(x, incident.check)].own for x in incident.nodes), incident
        if incident.rule == TOPOLOGY:
            assert incident.component.split("=")[0] in declared, incident


def test_a_label_not_declared_as_topology_names_no_component_even_failing_whole():
    # batch b1's four nodes fail and nothing else does: no incident of the label batch,
    # which the default topology labels do not hold; each node is blamed on its own
    labels = {f"n{i:02d}": {"batch": "b1" if i < 4 else "b2", "rack": f"r{i}"}
              for i in range(40)}
    failing = [f"n{i:02d}" for i in range(4)]
    assert detect({"burn": verdicts(labels, failing)}, labels, S) == []
    declared = SharedCauseSettings(labels=("batch",))
    assert [i.component for i in detect({"burn": verdicts(labels, failing)}, labels,
                                        declared)] == ["batch=b1"]


def test_a_component_failing_whole_alone_is_bounded_by_chance_too():
    # three of 300 racks of three failing whole, nothing elsewhere: 100 x 0.0065 ** 3 is
    # 2.7e-5, above CHANCE: no incident; of two switches it is 5.5e-7: an incident
    labels = {f"n{i:03d}": {"rack": f"r{i // 3}"} for i in range(300)}
    assert detect({"burn": verdicts(labels, ["n000", "n001", "n002"])}, labels, S) == []
    labels = {f"n{i}": {"switch": "a" if i < 3 else "b"} for i in range(6)}
    (i,) = detect({"burn": verdicts(labels, ["n0", "n1", "n2"])}, labels, S)
    assert i.component == "switch=a"


def test_a_case_with_its_node_s_own_evidence_is_judged_but_no_shared_failure():
    from burnin.gate.incidents import of_cases
    # ten nodes: three with their own digest, two failing a floor: no incident (two is
    # under min_nodes), and the own three still count among the judged
    cases = {(f"n{i}", "sdc"): _case(f"n{i}", "sdc", "failed" if i < 5 else "passed")
             for i in range(10)}
    for i in range(3):
        cases[(f"n{i}", "sdc")].own = "digest"
    assert of_cases(cases, _nodes(10, lambda i: f"leaf{i}"), S) == []
    for i in range(3):
        cases[(f"n{i}", "sdc")].own = ""
    (i,) = of_cases(cases, _nodes(10, lambda i: f"leaf{i}"), S)
    assert i.nodes == ("n0", "n1", "n2", "n3", "n4") and i.judged == 10

"""A node's own evidence never becomes a shared-cause incident (burnin/gate/incidents.py):
the real judges' verdicts on three faulty nodes of ten, each fault of a kind its Check
declares the node's own (burnin/checks/base.py), through the gate to the ledger."""

from __future__ import annotations

import pytest
from support.judging import H100, outcome, summary

from burnin.checks import CHECKS, Judging
from burnin.checks.base import DEVICE_COUNT, ECC, XID
from burnin.gate.incidents import of_cases
from burnin.gate.quarantine import settle
from burnin.ledger.api import Ledger
from burnin.model.nodes import Inventory, Node, QuarantineSettings, SharedCauseSettings
from burnin.model.outcome import CaseResult, Outcome
from burnin.model.verdict import FailureKind, Verdict

NAME = "NVIDIA H100 80GB HBM3"
NODES = [Node(f"n{i}", f"n{i}", gpus=8, gpu_model="H100", labels={"rack": "r1"})
         for i in range(10)]


def gpu(i: int, **over) -> dict:
    dev = {"index": i, "name": NAME, "uuid": f"GPU-{i}", "ecc_mode_current": 1,
           "ecc_uncorrected_volatile": 0, "retired_pages_pending": False,
           "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                             "failed": False},
           "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16},
           "pci_bus_id": f"00000000:{0x18 + i:02x}:00.0"}
    dev.update(over)
    return dev


def health(name: str, devices: list, kernel_log: dict | None = None):
    figs = {"torch": {"present": True, "version": "2.13.0", "device_count": len(devices)},
            "gpu": {"nvml": "present", "driver": "550.54", "cuda_driver": "12.4"},
            "host": {"kernel_log": kernel_log} if kernel_log else {}}
    return outcome("health", devices, figs, (), name)


def fleet_of_ten() -> dict:
    """Seven healthy nodes; n0 logged XID 79, n1 holds an uncorrectable ECC error, n2
    shows 7 of its 8 GPUs."""
    out = {n.name: health(n.name, [gpu(i) for i in range(8)]) for n in NODES}
    out["n0"] = health("n0", [gpu(i) for i in range(8)], {
        "readable": True, "source": "/dev/kmsg", "xids": [
            {"pci": "0000:1b:00", "xid": 79, "text": "GPU has fallen off the bus", "t": 5.0}]})
    out["n1"] = health("n1", [gpu(i, ecc_uncorrected_volatile=2 if i == 4 else 0)
                              for i in range(8)])
    out["n2"] = health("n2", [gpu(i) for i in range(7)])
    return out


def verdicts() -> dict[str, Verdict]:
    spec = CHECKS["health"]
    outcomes = fleet_of_ten()
    fleet = summary("health", outcomes)
    return {n.name: spec.judge(n, outcomes[n.name], Judging(
        settings=spec.resolve("quick"), fleet=fleet, model=H100, devices=8, gpus=8))
        for n in NODES}


def as_cases(judged: dict[str, Verdict]) -> dict[tuple[str, str], CaseResult]:
    """The cases the plugin makes of them (burnin/plugin/__init__.py: Verdict.own)."""
    return {(name, "health"): CaseResult(
        name, "health", Outcome.FAILED if v.failures else Outcome.PASSED,
        "; ".join(v.failures), own=", ".join(v.own)) for name, v in judged.items()}


def test_xid_79_ecc_and_a_lost_gpu_on_three_of_ten_are_each_its_node_s_own():
    judged = verdicts()
    assert [n for n, v in judged.items() if v.failures] == ["n0", "n1", "n2"]
    assert judged["n0"].own == ("xid",) and "XID 79" in judged["n0"].failures[0]
    assert judged["n1"].own == ("ecc",)
    assert judged["n2"].own == ("device count",), judged["n2"].failures
    # each kind a failure carries is one its Check declares
    from burnin.model.verdict import kind_of
    assert {kind_of(f) for v in judged.values() for f in v.failures} <= \
        set(CHECKS["health"].failure_kinds)
    assert of_cases(as_cases(judged), NODES, SharedCauseSettings()) == []
    # Without the kinds, three of ten is more than the fraction: the incident that let
    # them escape quarantine.
    bare = as_cases(judged)
    for case in bare.values():
        case.own = ""
    (incident,) = of_cases(bare, NODES, SharedCauseSettings())
    assert incident.nodes == ("n0", "n1", "n2")


def test_the_three_are_quarantined_and_nobody_else(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    inv = Inventory("inv.yaml", "c1", tuple(NODES), {}, QuarantineSettings())
    cases = as_cases(verdicts())
    found = of_cases(cases, NODES, inv.quarantine.shared_cause)
    report = settle(inv, ledger, "r1", cases, revalidate=False, act=True, incidents=found)
    assert sorted(report.quarantined) == ["n0", "n1", "n2"]
    assert ledger.quarantined() == {"n0", "n1", "n2"} and ledger.incidents() == []


@pytest.mark.parametrize("kind", [XID, ECC, DEVICE_COUNT])
def test_a_case_with_own_and_shared_failures_is_the_node_s_own(kind):
    v = Verdict("n1", "burn", ("410.0 TFLOPS, below the floor of 600 TFLOPS",
                               kind("what the node showed")))
    assert v.own == (kind.name,)
    assert Verdict("n1", "burn", ("410.0 TFLOPS, below the floor",)).own == ()


def test_every_check_declares_the_kinds_its_failures_carry_and_own_ones_are_marked():
    # the kinds of the judges' failures are declared on their Check: the gate reads the
    # failure's own kind, the declaration says which exist (docs/operator/quarantine.md)
    for check in CHECKS.values():
        for kind in check.failure_kinds:
            assert isinstance(kind, FailureKind) and kind.name and kind.doc, check.name
    declared = {k.name for c in CHECKS.values() for k in c.failure_kinds if k.own}
    assert {"wrong result", "digest", "xid", "ecc", "device count", "diverged",
            "memory pattern"} <= declared
    assert {k.name for k in CHECKS["sdc"].failure_kinds} >= {"wrong result", "digest"}


def test_a_probe_reporting_fewer_devices_than_the_node_has_is_its_own_evidence():
    from burnin.checks.base import count_problem
    from burnin.model.verdict import kind_of
    (lost,) = count_problem([{}] * 7, Judging(settings={}, devices=8))
    assert kind_of(lost) is DEVICE_COUNT and DEVICE_COUNT.own
    assert count_problem([{}] * 8, Judging(settings={}, devices=8)) == []


def test_a_divergence_the_inter_node_job_named_stays_the_node_s_own_from_its_record():
    # as results.jsonl gives it back (burnin rejudge): plain strings in the figures
    from burnin.checks.train_internode import _outcome
    o = _outcome("n2", replicas=["replicas differ after step 3 across nodes: rank 5"])
    spec = CHECKS["train_internode"]
    v = spec.judge(NODES[2], o, Judging(settings=spec.resolve("quick")))
    assert v.own == ("diverged",) and v.failures[0].startswith("replicas differ")


def test_burn_and_memory_tag_their_node_s_own_evidence():
    from burnin.checks.base import MEMORY_PATTERN
    from burnin.checks.burn import telemetry_rules
    from burnin.checks.memory import device_rules
    from burnin.model.verdict import kind_of
    fail, _ = telemetry_rules({"xid": [{"t": 3.0, "xid": 79}],
                               "before": {"ecc_uncorrected": 0},
                               "after": {"ecc_uncorrected": 1,
                                         "remapped_rows": {"pending": True}}}, {})
    assert [kind_of(f) for f in fail] == [XID, ECC, ECC], fail
    fail, _ = device_rules({"bytes": 1 << 30, "bad_words": 3, "patterns": 4, "bad": [],
                            "nvml": {"before": {"ecc_uncorrected": 0, "retired_pages": 0},
                                     "after": {"ecc_uncorrected": 2, "retired_pages": 1}}},
                           {})
    assert [kind_of(f) for f in fail] == [MEMORY_PATTERN, ECC, ECC], fail

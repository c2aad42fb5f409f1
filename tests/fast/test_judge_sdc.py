"""The sdc judge and its fleet digest (burnin/checks/sdc.py)."""

from __future__ import annotations

import copy

import pytest
from support.judging import H100, failed, judge, outcome, summary

from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory

GOOD = "a" * 64
EVIL = "f" * 64
INPUTS = "i" * 64
KEY = ("bf16", 8192, INPUTS)


def device(i: int = 0, digest: str = GOOD, **over) -> dict:
    dev = {"device": f"cuda:{i}", "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}",
           "selftest": True,
           "known": {"dtype": "bf16", "n": 8192, "products": 100, "verified": 4,
                     "verify_every": 25, "tflops": 700.0, "errors": {"rows": 0, "cols": 0},
                     "bad_products": 0, "events": [], "digest": digest,
                     "inputs_digest": INPUTS},
           "random": {"dtype": "fp32", "n": 1024, "repeats": 8, "differing_repeats": [],
                      "nonfinite": 0, "digest": "r" * 64}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(dev.get(k), dict):
            dev[k] = {**dev[k], **v}
        else:
            dev[k] = v
    return dev


def sdc(*devices, errors=(), node="n1"):
    return outcome("sdc", list(devices), errors=errors, node=node)


AGREED = {KEY: (GOOD, "", 3)}


def test_a_clean_device_passes():
    assert judge("sdc", sdc(device(0), device(1)), fleet=AGREED) == ((), ())


def test_a_probe_that_failed_fails_with_its_reason():
    assert judge("sdc", failed("sdc", "probe sdc killed at its timeout of 30 s"),
                 fleet={}) == (("probe sdc killed at its timeout of 30 s",), ())


def test_random_repeats_that_differ_fail_the_node():
    dev = device(0, random={"differing_repeats": [3, 5]})
    assert judge("sdc", sdc(dev), fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): random fp32 n=1024: repeats [3, 5] of 8 "
        "differ bitwise from the first, expected identical",)


def test_random_products_with_nan_fail_the_node():
    dev = device(0, uuid=None, random={"nonfinite": 12})
    assert judge("sdc", sdc(dev), fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3): random fp32: 12 NaN/Inf elements in the result",)


def test_a_failed_on_device_selftest_fails_the_node():
    dev = device(0, selftest=False)
    assert judge("sdc", sdc(dev), fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer selftest failed: C differs from "
        "integer arithmetic",)
    no_selftest = device(0)
    del no_selftest["selftest"]
    assert judge("sdc", sdc(no_selftest), fleet=AGREED) == ((), ())


def test_probe_errors_and_a_wrong_device_count_fail_the_node():
    assert judge("sdc", sdc(device(0), errors=["cuda:1: CUDA error: out of memory"]),
                 fleet=AGREED, devices=2)[0] == (
        "probe error on cuda:1: CUDA error: out of memory",
        "the probe reported 1 device(s), expected 2 (the inventory's count, or what the "
        "node's health facts showed)")


def test_a_figure_beyond_the_models_peak_is_implausible():
    assert judge("sdc", sdc(device(0, known={"tflops": 1050.0})), fleet=AGREED,
                 model=H100) == ((), ())
    assert judge("sdc", sdc(device(0, known={"tflops": 1051.0})), fleet=AGREED,
                 model=H100)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): implausible: 1051.0 TFLOPS is beyond the "
        "H100's peak of 1000 TFLOPS",)
    assert judge("sdc", sdc(device(0, known={"tflops": 1051.0})), fleet=AGREED) == ((), ())


def test_no_verified_product_fails():
    assert judge("sdc", sdc(device(0, known={"verified": 0})), fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer bf16 n=8192: no product was "
        "verified",)


def test_checksum_mismatches_without_located_events_fail():
    dev = device(0, known={"errors": {"rows": 2, "cols": 0}})
    assert judge("sdc", sdc(dev), fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer bf16 n=8192: checksum "
        "mismatches {'rows': 2, 'cols': 0}, expected none",)


def event(product=7, wrong=3, rows=(1, 2), cols=(5,), examples=None, nonfinite=0):
    ev = {"product": product, "wrong_elements": wrong, "rows": list(rows), "cols": list(cols),
          "nonfinite": nonfinite,
          "examples": examples if examples is not None else [
              {"row": 1, "col": 5, "got": 4.5, "expected": 4.0}]}
    return ev


def test_a_wrong_product_is_named_with_its_first_event_in_full():
    dev = device(0, known={"events": [event(), event(9)], "bad_products": 5,
                           "errors": {"rows": 2, "cols": 1}})
    assert judge("sdc", sdc(dev), fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer bf16 n=8192 product #7: 3 wrong "
        "elements in rows [1, 2] cols [5], e.g. C[1,5] = 4.5, expected 4.0; 4 more of 4 "
        "verified products wrong; expected none",)
    # Without a count of bad products, the events listed are the count.
    del dev["known"]["bad_products"]
    assert judge("sdc", sdc(dev), fleet=AGREED)[0][0].endswith(
        "expected 4.0; 1 more of 4 verified products wrong; expected none")


def test_an_event_without_examples_with_nan_and_many_rows():
    ev = event(wrong=20, rows=range(10), cols=range(9), examples=[], nonfinite=2)
    dev = device(0, known={"events": [ev]})
    assert judge("sdc", sdc(dev), fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer bf16 n=8192 product #7: 20 wrong "
        "elements, 2 NaN/Inf in rows [0, 1, 2, 3, 4, 5, 6, 7, ...] cols [0, 1, 2, 3, 4, 5, 6, "
        "7, ...]; expected none",)
    ev8 = event(rows=range(8), cols=range(8), examples=[
        {"row": 0, "col": 0, "got": "nan", "expected": 2.0}])
    assert judge("sdc", sdc(device(0, known={"events": [ev8], "bad_products": 1})),
                 fleet=AGREED)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer bf16 n=8192 product #7: 3 wrong "
        "elements in rows [0, 1, 2, 3, 4, 5, 6, 7] cols [0, 1, 2, 3, 4, 5, 6, 7], e.g. "
        "C[0,0] = 'nan', expected 2.0; expected none",)


def test_a_digest_other_than_the_fleets_fails_only_with_enough_voters():
    dev = device(0, EVIL)
    assert judge("sdc", sdc(dev), fleet={KEY: (GOOD, "", 3)})[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer bf16 n=8192: result digest "
        "ffffffffffff differs from aaaaaaaaaaaa, the digest of most of the run's 3 nodes",)
    assert judge("sdc", sdc(dev), fleet={KEY: (GOOD, "", 2)})[0] != ()
    assert judge("sdc", sdc(dev), fleet={KEY: (GOOD, "", 1)}) == ((), ()), \
        "a lone voter is no yardstick"
    assert judge("sdc", sdc(dev), fleet={}) == ((), ())
    assert judge("sdc", sdc(device(0, None)), fleet={KEY: (GOOD, "", 3)}) == ((), ())
    other_inputs = device(0, EVIL, known={"inputs_digest": "j" * 64})
    assert judge("sdc", sdc(other_inputs), fleet={KEY: (GOOD, "", 3)}) == ((), ())


def test_no_majority_fails_among_peers_only():
    why = "no majority (a on 1 node(s), f on 1 node(s))"
    assert judge("sdc", sdc(device(0, EVIL)), fleet={KEY: (None, why, 3)})[0] == (
        f"cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): known-answer bf16 n=8192: result digest "
        f"ffffffffffff: {why} among 3 nodes",)
    # Two nodes that disagree: neither is the odd one out, and neither is failed for it.
    assert judge("sdc", sdc(device(0, EVIL)), fleet={KEY: (None, why, 2)}) == ((), ())


def node_doc(name: str, *digests: str, count: int | None = None):
    return sdc(*(device(i, d) for i, d in enumerate(digests)), node=name)


def test_the_fleet_digest_is_one_vote_per_node():
    outcomes = {"n1": node_doc("n1", GOOD, GOOD), "n2": node_doc("n2", GOOD, EVIL),
                "n3": node_doc("n3", EVIL, EVIL, EVIL), "n4": failed("sdc", "down", "n4")}
    # n2 votes with the digest most of its devices produced (a tie: its first device's)
    assert summary("sdc", outcomes) == {KEY: (GOOD, "", 3)}
    outcomes["n2"] = node_doc("n2", GOOD, EVIL, EVIL)
    assert summary("sdc", outcomes) == {KEY: (EVIL, "", 3)}


def test_a_node_reporting_more_devices_than_it_has_does_not_vote():
    """A liar claiming twenty devices with a foreign digest: without the device-count
    filter its one vote would tie the fleet (1 honest against 1 liar), and the honest
    node would fail for a digest that is right."""
    liar = node_doc("liar", *[EVIL] * 20)
    outcomes = {"n1": node_doc("n1", GOOD), "n2": node_doc("n2", GOOD), "liar": liar}
    counts = {"n1": 1, "n2": 1, "liar": 1}
    assert summary("sdc", outcomes, counts) == {KEY: (GOOD, "", 2)}
    assert summary("sdc", outcomes) == {KEY: (GOOD, "", 3)}
    honest_pair = {"n1": node_doc("n1", GOOD), "liar": liar}
    fleet = summary("sdc", honest_pair, {"n1": 1, "liar": 1})
    assert fleet == {KEY: (GOOD, "", 1)}
    assert judge("sdc", honest_pair["n1"], fleet=fleet, devices=1) == ((), ())
    assert judge("sdc", liar, fleet=fleet, devices=1)[0][0] == (
        "the probe reported 20 device(s), expected 1 (the inventory's count, or what the "
        "node's health facts showed)")
    # A node whose count is unknown (None) votes.
    assert summary("sdc", honest_pair, {"n1": 1}) == {
        KEY: (None, f"no majority ({GOOD} on 1 node(s), {EVIL} on 1 node(s))", 2)}


def test_digests_of_different_inputs_are_counted_apart():
    other = device(1, "b" * 64, known={"inputs_digest": "j" * 64, "dtype": "fp16"})
    n1 = sdc(device(0), other, node="n1")
    n2 = sdc(device(0), node="n2")
    missing = device(0)
    missing["known"] = {**missing["known"], "digest": None}
    n3 = sdc(missing, node="n3")
    got = summary("sdc", {"n1": n1, "n2": n2, "n3": n3})
    assert got == {KEY: (GOOD, "", 2), ("fp16", 8192, "j" * 64): ("b" * 64, "", 1)}
    assert summary("sdc", {}) == {}


def test_a_device_without_known_or_random_sections_is_judged_by_what_it_has():
    bare = {"device": "cpu:0", "name": None, "selftest": True}
    assert judge("sdc", sdc(bare), fleet={}) == ((), ())
    assert judge("sdc", sdc({**bare, "selftest": False}), fleet={})[0] == (
        "cpu:0 (None): known-answer selftest failed: C differs from integer arithmetic",)


def test_figures():
    from burnin.checks.sdc import figures
    rec = {"data": {"devices": [device(0), device(1, known={"tflops": None}),
                                {"device": "cpu:0"}, device(2, known={"tflops": 0.0})]}}
    got = [(f.metric, f.labels, f.value, f.help) for f in figures(rec)]
    assert got == [("device_tflops", (("check", "sdc"), ("device", "cuda:0")), 700.0,
                    "Sustained GEMM throughput per device"),
                   ("device_tflops", (("check", "sdc"), ("device", "cuda:2")), 0.0,
                    "Sustained GEMM throughput per device")]


@pytest.mark.parametrize("field", ["differing_repeats", "nonfinite"])
def test_the_judge_does_not_change_the_document(field):
    dev = device(0, random={field: [1] if field == "differing_repeats" else 1})
    o = sdc(dev)
    before = copy.deepcopy(o.data)
    judge("sdc", o, fleet=AGREED)
    assert o.data == before


def test_a_two_node_run_whose_digests_differ_is_judged_not_a_controller_fault(tmp_path):
    """Neither of two nodes that disagree is the odd one out: no node fails for the digest,
    and the judge does not raise (which would end the run as the controller's fault)."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\ndefaults: {transport: local, gpus: 0}\n"
                   f"quarantine: {{ledger: {tmp_path / 'q.db'}}}\nnodes:\n  - name: n[1-2]\n")
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "r1")
    run.store._outcomes["sdc"] = {"n1": node_doc("n1", GOOD), "n2": node_doc("n2", EVIL)}
    for node in inventory.nodes:
        assert run.verdict("sdc", node).failures == ()

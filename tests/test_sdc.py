"""The sdc check: faults planted in real probe runs on the CPU, every one caught exactly,
and no false alarm over 1,000 clean products."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.replay import replay_python
from support.suiterun import junit_cases, run_suite, script

from burnin.checks import Fleet, Judging
from burnin.checks.sdc import fleet_summary as sdc_summary
from burnin.checks.sdc import judge as sdc_judge
from burnin.inventory.schema import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "probes"))
import gemmcore  # noqa: E402


def judge(node: Node, outcome: ProbeOutcome, fleet: dict):
    return sdc_judge(node, outcome, Judging({}, fleet))


def fleet_summary(outcomes: dict[str, ProbeOutcome]) -> dict:
    return sdc_summary(Fleet(outcomes))

N = 64
CPU = Node(name="n1", address="n1", transport="local", gpus=0)


def sdc(inject: list | None = None, **settings) -> dict:
    """Run the real probe on this machine's CPU; return its one device's record. `inject`:
    faults planted in its results, through the payload's test hooks (no inventory can)."""
    base = {"n": N, "verify_every": 1, "duration_s": 60, "random_repeats": 4}
    payload = {"gpus": 0, "settings": {**base, **settings}, "test_hooks": {"inject": inject or []}}
    out = run_probe(LocalTransport(CPU, REPO / "probes"), "sdc", payload, timeout_s=300)
    assert out.ok, out.reason
    (device,) = out.data["devices"]
    assert "error" not in device, device["error"]
    return out, device


def nonzero_elements(count: int) -> list[tuple[int, int]]:
    """Elements whose right value is not zero: -0.0 and +0.0 differ only in their bits."""
    ref = gemmcore.integer_reference(N)
    picks = [(0, 0), (N - 1, N - 1), (7, 40), (33, 2)]
    assert all(ref[i, j] != 0 for i, j in picks)
    return picks[:count]


def test_selftest_exactness_claim():
    import subprocess
    res = subprocess.run([sys.executable, str(REPO / "probes" / "sdc.py"), "--selftest"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # Every device it found, in each dtype (the GPU default is bf16), exact.
    checked = json.loads(res.stdout.strip().splitlines()[-1])["selftest"]
    dtypes = {key.rsplit(":", 1)[1] for key in checked}
    assert dtypes == {"bf16", "fp16", "fp32"} and all(checked.values()), checked


def test_every_one_of_32_bit_flips_is_detected(finding):
    elements = nonzero_elements(2)
    faults = [{"product": 1 + e * 32 + bit, "element": list(el), "bit": bit}
              for e, el in enumerate(elements) for bit in range(32)]
    _, dev = sdc(inject=faults, max_products=len(faults) + 8)
    known = dev["known"]
    detected = known["bad_products"]
    finding(f"sdc: bit flips detected: {detected} of {len(faults)} "
            f"(elements {elements}, each of bits 0-31 of an fp32)")
    assert known["verified"] >= len(faults)
    assert detected == len(faults) == 64


def test_two_opposite_errors_in_one_row_are_caught_by_columns_and_weights(finding):
    _, dev = sdc(inject=[{"product": 3, "element": [5, 4], "add": 64.0},
                         {"product": 3, "element": [5, 9], "add": -64.0}], max_products=8)
    (event,) = dev["known"]["events"]
    assert event["product"] == 3
    assert event["counts"]["rows"] == 0, "a plain row sum cannot see this pair"
    assert event["counts"]["weighted"] == 1 and event["counts"]["cols"] == 2
    assert event["rows"] == [5] and event["cols"] == [4, 9]
    assert event["wrong_elements"] == 2
    finding(f"sdc: opposite-sign pair in one row: detected by {event['counts']}")


def test_nan_inf_and_minus_inf_are_each_caught(finding):
    """One run, each value planted in a product of its own (one probe's start-up, not
    three): each caught in its product, at its place."""
    values = {2: "nan", 4: "inf", 6: "-inf"}
    _, dev = sdc(inject=[{"product": p, "element": [1, 1], "value": v}
                         for p, v in values.items()], max_products=8)
    events = dev["known"]["events"]
    assert [e["product"] for e in events] == list(values), events
    for event in events:
        finding(f"sdc: {values[event['product']]} planted: detected, {event['nonfinite']} "
                "non-finite element")
        assert event["nonfinite"] == 1 and event["wrong_elements"] == 1
        assert event["examples"][0]["row"] == 1 and event["examples"][0]["col"] == 1


def test_input_corrupted_after_its_checksum_was_taken():
    _, dev = sdc(inject=[{"product": 5, "input": "A", "element": [3, 3], "bit": 20}],
                 max_products=12)
    known = dev["known"]
    assert [e["product"] for e in known["events"]] == list(range(5, 13))
    assert all(e["rows"] == [3] for e in known["events"])


def test_random_mode_repeat_that_differs_is_caught():
    _, dev = sdc(inject=[{"mode": "random", "repeat": 2, "element": [0, 3], "bit": 0}],
                 max_products=4)
    assert dev["random"]["differing_repeats"] == [2]


def test_a_thousand_clean_products_raise_no_alarm(finding):
    out, dev = sdc(max_products=1000)
    known = dev["known"]
    finding(f"sdc: clean run: {known['products']} products, {known['verified']} verified, "
            f"{known['bad_products']} alarms")
    assert known["products"] >= 1000 and known["verified"] == known["products"]
    assert known["bad_products"] == 0 and not known["events"]
    assert dev["selftest"] is True and dev["random"]["differing_repeats"] == []
    assert judge(CPU, out, fleet_summary({"n1": out})).passed


def test_judge_names_device_mode_and_place():
    out, _ = sdc(inject=[{"product": 2, "element": [6, 7], "add": 1.0}], max_products=4)
    (failure,) = judge(CPU, out, fleet_summary({"n1": out})).failures
    assert failure.startswith("cpu (")
    assert "known-answer fp32 n=64 product #2: 1 wrong elements in rows [6] cols [7]" in failure
    assert "e.g. C[6,7] =" in failure


def outcome(name: str, digest: str) -> ProbeOutcome:
    dev = {"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{name}",
           "selftest": True,
           "known": {"dtype": "bf16", "n": 8192, "inputs_digest": "in", "digest": digest,
                     "verified": 10, "errors": {}, "events": []},
           "random": {"dtype": "bf16", "n": 4096, "repeats": 8, "differing_repeats": [],
                      "nonfinite": 0}}
    return ProbeOutcome(name, "sdc", True, data={"probe": "sdc", "schema": 1, "node": {},
                                                 "devices": [dev], "figures": {},
                                                 "errors": []})


def test_the_odd_digest_out_fails_alone():
    fleet = {n: outcome(n, "d" * 64) for n in ("a", "b", "c")} | {"x": outcome("x", "e" * 64)}
    summary = fleet_summary(fleet)
    verdicts = {n: judge(Node(name=n, address=n), o, summary) for n, o in fleet.items()}
    assert [n for n, v in verdicts.items() if not v.passed] == ["x"]
    assert "result digest eeeeeeeeeeee differs from dddddddddddd" in verdicts["x"].failures[0]


FAULTY_TORCH = textwrap.dedent("""\
    # A 'device' that computes one element of every large fp32 product wrong: loaded by
    # the interpreter before the probe, below it, like a faulty unit would be.
    import torch
    _mm = torch.mm
    def mm(*args, **kwargs):
        out = _mm(*args, **kwargs)
        if out.dtype == torch.float32 and out.dim() == 2 and out.shape[0] >= 32:
            out[17, 5] += 2.0
        return out
    torch.mm = mm
    """)


def test_node_corrupted_below_the_probe_fails_sdc_alone_verifying_every_or_auto(pytester):
    """Two corrupted nodes in one run, one verifying every product (verify_every 1), one on
    the automatic schedule: each fails on its own wrong products, the good nodes pass."""
    faulty = pytester.path / "faulty"
    faulty.mkdir()
    (faulty / "sitecustomize.py").write_text(FAULTY_TORCH)
    wrapper = script(pytester.path / "python-faulty",
                     f"PYTHONPATH={faulty} exec {sys.executable} \"$@\"\n")
    # The good nodes are the innocent peers: they replay an honest document (no torch);
    # that a real probe on a clean CPU raises no alarm is
    # test_a_thousand_clean_products_raise_no_alarm's. The fault below the probe is found
    # by the real probe.
    replay = replay_python(pytester.path / "replay")
    schedules = {"bad-every": 1, "bad-auto": "auto"}
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        checks:
          sdc: {{n: 128, duration_s: 1, random_repeats: 2}}
        nodes:
          - name: good[1-2]
        """) + "".join(f"  - name: {n}\n    python: {wrapper}\n"
                       f"    checks: {{sdc: {{verify_every: {v}}}}}\n"
                       for n, v in schedules.items()))
    result, reports = run_suite(pytester, inv, "-k", "sdc")
    result.assert_outcomes(passed=2, failed=2)
    cases = junit_cases(reports)
    assert cases["good1"]["sdc"] == ("passed", "") and cases["good2"]["sdc"] == ("passed", "")
    records = {r["node"]: r for r in map(json.loads,
                                         (reports / "latest" / "results.jsonl").open())}
    for node, schedule in schedules.items():
        outcome_, message = cases[node]["sdc"]
        assert outcome_ == "failure", node
        assert "known-answer fp32 n=128 product #1: 1 wrong elements in rows [17] cols [5]" \
            in message, (node, message)
        assert message.count("product #") == 1, "the first wrong product in full, once"
        # Every product is wrong here; how many were verified is the schedule's (auto: as
        # many as keep verifying near 3% of the time, on a loaded machine maybe only the
        # first).
        known = records[node]["data"]["devices"][0]["known"]
        if schedule == 1:  # the node's own setting, not the run's
            assert known["verify_every"] == 1 and known["verified"] == known["products"], known
        verified = known["verified"]
        assert known["bad_products"] == verified
        assert ("more of" in message) == (verified > 1), (node, verified, message)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_gpu_dtypes_known_answer_is_exact_and_a_flip_is_caught(dtype):
    """bf16 is the GPU default. Its known answer runs here through the same code, the dtype
    a parameter (the CPU computes the fp32 product of the same exact inputs): one run, in
    which one flipped bit is caught in the product it hit and every other product is exact
    (its one event and one bad product of six verified: the clean run it was beside)."""
    (element,) = nonzero_elements(1)
    _, dev = sdc(dtype=dtype, max_products=6, random_repeats=2,
                 inject=[{"product": 3, "element": list(element), "bit": 20}])
    assert dev["known"]["dtype"] == dtype and dev["selftest"] is True
    assert dev["known"]["verified"] >= 6
    (event,) = dev["known"]["events"]
    assert event["product"] == 3 and event["wrong_elements"] == 1
    assert dev["known"]["bad_products"] == 1
    assert dev["random"]["dtype"] == dtype and dev["random"]["differing_repeats"] == []


def test_pin_determinism_turns_atens_flag_on_without_importing_the_compiler():
    """gemmcore.pin_determinism sets the flag torch.use_deterministic_algorithms sets for
    ATen, without importing torch._dynamo for the compiler's (1.2 s of CPU a probe). In a
    fresh interpreter: the flag is global to the process."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import torch, gemmcore; "
            "before = torch.are_deterministic_algorithms_enabled(); "
            "gemmcore.pin_determinism(); "
            "print(before, torch.are_deterministic_algorithms_enabled(), "
            "'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "probes")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "False"]

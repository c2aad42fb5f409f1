"""A probe's stdout is untrusted and lands in the controller's memory: each check bounds
what its probe may print by what its honest document can reach, documents are parsed a
few at a time, and lists are as long as an honest probe makes them. A node past a bound
fails alone, with the bound in its reason; honest documents at the largest settings pass.
"""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from burnin.checks import CHECKS
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe import protocol as probe_mod
from burnin.probe.protocol import PARSE_AT_ONCE, judge_output
from burnin.transports import CommandResult
from burnin.transports.fanout import fan_out

BURN = CHECKS["burn"]
TINY = {"duration_s": 1, "sample_s": 0.5}

# A stand-in burn probe: prints, per node, the document the test planted for it.
PROBE = """
import json, sys
payload = json.loads(sys.stdin.readline())
sys.stdout.write(open({docs!r} + "/" + payload["node"] + ".json").read())
"""


def burn_doc(devices: list[dict], figures: dict | None = None) -> dict:
    return {"probe": "burn", "schema": 1, "node": {"hostname": "n"}, "devices": devices,
            "figures": figures or {}, "errors": []}


def device(i: int, samples: int, xids: int = 0, series_keys=("t", "temp_c", "sm_mhz",
           "mem_mhz", "power_w", "reasons")) -> dict:
    """A device record as the burn probe writes it, every figure at its widest."""
    t = [round(7499.999 - k / 1000, 3) for k in range(samples)]
    widest = {"t": t, "temp_c": [100] * samples, "sm_mhz": [1980] * samples,
              "mem_mhz": [12619] * samples, "power_w": [700.123] * samples,
              "reasons": [2**64 - 1] * samples}
    counters = {"ecc_corrected": 2**40, "ecc_uncorrected": 0, "retired_pages": 0,
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                                  "failed": False}, "pcie_replay": 0,
                "nvlink_active_links": 18, "nvlink_crc": 0, "nvlink_recovery": 0}
    return {"device": f"cuda:{i}", "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-12345678-1234-1234-1234-123456789abc", "dtype": "bf16", "n": 8192,
            "buffers": 4, "products": 2**40, "verified": 2**30, "verify_every": 10,
            "wall_s": 7499.999, "tflops": 712.345, "mismatched_products": 0,
            "mismatched_elements": 0,
            "tflops_series": [[7499.999, 1.23457e-05]] * samples,
            "telemetry": {"uuid": "GPU-12345678-1234-1234-1234-123456789abc",
                          "temp_slowdown_c": 90, "power_limit_w": 700.0, "pcie_gen": 5,
                          "pcie_max_gen": 5, "pcie_width": 16, "pcie_max_width": 16,
                          "series": {k: widest.get(k, t) for k in series_keys},
                          "before": counters, "after": counters,
                          "xid": [{"t": 7499.999, "xid": 79}] * xids, "unsupported": [],
                          "errors": [f"sm_clock: Unknown Error {k}" for k in range(20)]}}


def encode(doc: dict) -> bytes:
    return (json.dumps(doc) + "\n").encode()  # as probelib.emit writes it


def fleet(tmp_path: Path, docs: dict[str, bytes]) -> Run:
    """A run of local nodes whose burn probe prints the planted documents."""
    (tmp_path / "docs").mkdir()
    for name, doc in docs.items():
        (tmp_path / "docs" / f"{name}.json").write_bytes(doc)
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "burn.py").write_text(textwrap.dedent(PROBE.format(docs=str(tmp_path / "docs"))))
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({
        "version": 1, "defaults": {"transport": "local", "gpus": 0, "python": sys.executable},
        "checks": {"burn": TINY}, "nodes": [{"name": n} for n in docs]}))
    inventory = load_inventory(inv)
    return Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "bounds",
               probes_dir=probes)


def honest(samples: int = 4) -> bytes:
    return encode(burn_doc([device(0, samples)],
                           {"cpu_telemetry": {"series": {"t": [1.0] * samples}},
                            "duration_s": 1, "sample_s": 0.5}))


def test_a_document_past_its_checks_bound_fails_only_its_node(tmp_path):
    settings = BURN.resolve("quick", TINY)
    bound = BURN.output_limit(settings, 1)
    # Well-shaped and every list within the schema: only its size is wrong.
    big = encode(burn_doc([device(0, bound // 50)]))
    assert len(big) > bound
    run = fleet(tmp_path, {"n1": honest(), "n2": honest(), "n3": big})
    try:
        outcomes = run.outcomes("burn")
    finally:
        run.close()
    assert outcomes["n1"].ok and outcomes["n2"].ok, (outcomes["n1"].reason,
                                                      outcomes["n2"].reason)
    assert not outcomes["n3"].ok
    assert f"printed more than {bound} bytes" in outcomes["n3"].reason


@pytest.mark.parametrize("edit,why", [
    (lambda d: d["telemetry"]["series"].update({f"s{k}": [1] for k in range(11)}),
     "devices[0].telemetry.series: 17 keys, at most 16 expected"),
    (lambda d: d["telemetry"].update(xid=[{"t": 1.0, "xid": 79}] * 1001),
     "devices[0].telemetry.xid: 1001 items, at most 1000 expected"),
    # TINY's burn is killed at 302 s, sampling every 0.5 s: 606 samples at most. 607 short
    # numbers are well inside the byte bound, and would be kept for the whole run.
    (lambda d: d["telemetry"]["series"].update(t=[1] * 607),
     "devices[0].telemetry.series.t: 607 items, at most 606 expected"),
    (lambda d: d.update(tflops_series=[[1, 1]] * 607),
     "devices[0].tflops_series: 607 items, at most 606 expected"),
])
def test_an_over_long_document_fails_only_its_node(tmp_path, edit, why):
    dev = device(0, 4)
    edit(dev)
    run = fleet(tmp_path, {"n1": honest(), "n2": encode(burn_doc([dev]))})
    try:
        outcomes = run.outcomes("burn")
    finally:
        run.close()
    assert outcomes["n1"].ok, outcomes["n1"].reason
    assert outcomes["n2"].reason == f"malformed probe output: {why}"


@pytest.mark.parametrize("overrides,gpus", [({}, 8), ({"sample_s": 0.25}, 8), ({}, 0)])
def test_an_honest_burn_document_at_the_largest_settings_fits(overrides, gpus):
    """Extended profile, 8 GPUs (or a CPU node), as many samples as a probe could take
    before its kill at timeout_s, every figure at its widest and 1000 XIDs per GPU."""
    settings = BURN.resolve("extended", overrides)
    samples = int(settings["timeout_s"] / settings["sample_s"]) + 1
    devices = [device(i, samples, xids=1000) for i in range(gpus or 1)]
    cpu = {"series": {k: [1234.567] * samples for k in ("t", "load1", "mhz", "temp_c")},
           "unsupported": []}
    doc = encode(burn_doc(devices, {"cpu_telemetry": cpu, "duration_s": 3600,
                                    "sample_s": settings["sample_s"]}))
    bound = BURN.output_limit(settings, gpus or 1)
    assert len(doc) <= bound, f"{len(doc)} bytes, bound {bound}"
    out = judge_output("n1", "burn", CommandResult(0, doc, b"", 1.0), 1.0, bound, BURN.schema)
    assert out.ok, out.reason


def test_a_transport_that_reads_past_the_bound_does_not_get_it_parsed():
    doc = honest()
    out = judge_output("n1", "burn", CommandResult(0, doc, b"", 1.0), 1.0, len(doc) - 1,
                       BURN.schema)
    assert out.reason == f"probe burn printed more than {len(doc) - 1} bytes"


def test_at_most_a_few_documents_are_parsed_at_once(monkeypatch):
    read, lock, inside, most = probe_mod._read_document, threading.Lock(), [0], [0]

    def slow_read(*args):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # holds its tree a while, the GIL released: others could start
        try:
            return read(*args)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(probe_mod, "_read_document", slow_read)
    doc = honest()
    outs = fan_out(range(16), lambda i: judge_output(
        f"n{i}", "burn", CommandResult(0, doc, b"", 1.0), 1.0, 1 << 20, BURN.schema), 16)
    assert all(o.ok for o in outs), [o.reason for o in outs if not o.ok]
    assert 1 <= most[0] <= PARSE_AT_ONCE

"""The replace-soon list end to end: real runs of the health check, on nodes whose NVML is
the emulator (tests/nvmlemu), one node's corrected-ECC count growing run after run and
another's flat. The runs are a day apart to the ledger (each run's kept verdicts are moved
a day back before the next): the growing node lands on the list with the day its count
reaches the limit, in replace_soon.json, summary.html, metrics.prom and
`burnin history --watch`; the flat one does not."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import nvmlemu
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.incli import burnin
from support.suiterun import junit_cases, run_suite
from test_metrics import need

from burnin.figures import replace_soon
from burnin.ledger.api import Ledger

DAY = 86400.0
GROWING = (0, 30_000, 60_000)  # corrected ECC errors over the GPU's life, a run a day
FLAT = 5_000


def scenario(path, corrected: int):
    return nvmlemu.write_scenario(path, {"devices": [
        {"uuid": f"GPU-{path.stem}", "pci_bus_id": "0000:18:00.0",
         "ecc_errors": {"corrected_aggregate": corrected}}]})


def wear_fleet(pytester, tmp_path, flat: int, checks=lambda name: {}):
    """Two emulated one-GPU nodes, `worn` (corrected ECC 0) and `flat`, and a ledger:
    (the ledger's path, the inventory's)."""
    ledger = tmp_path / "ledger.db"
    Ledger(ledger)  # created on purpose, as `burnin ledger init` does
    nodes = []
    for name in ("worn", "flat"):
        scen = scenario(tmp_path / f"{name}.json", 0 if name == "worn" else flat)
        nodes.append({"name": name, "python": nvmlemu.python_wrapper(
            tmp_path / f"py-{name}", scen), "checks": checks(name)})
    inv = pytester.path / "inv.yaml"
    inv.write_text(json.dumps({
        "version": 1, "cluster": "wear",
        "defaults": {"transport": "local", "gpus": 1, "gpu_model": "H100-SXM5-80GB"},
        "checks": {"health": {"kernel_log": False}}, "nodes": nodes,
        "quarantine": {"ledger": str(ledger)}}))
    return ledger, inv


def daily_runs(pytester, inv, ledger, before_each):
    """A health run after each of `before_each`, each passing both nodes; the ledger's
    runs moved a day back between them. The last run's reports folder."""
    for i, prepare in enumerate(before_each):
        prepare()
        _, reports = run_suite(pytester, inv, "-k", "health")
        assert junit_cases(reports) == {n: {"health": ("passed", "")} for n in ("worn", "flat")}
        if i != len(before_each) - 1:  # the next run a day later, to the ledger
            with sqlite3.connect(ledger) as db:
                db.execute("UPDATE runs SET time = time - ?", (DAY,))
    return reports


def test_a_growing_corrected_ecc_count_is_listed_with_its_day_and_a_flat_one_is_not(
        pytester, tmp_path):
    ledger, inv = wear_fleet(pytester, tmp_path, FLAT)
    reports = daily_runs(pytester, inv, ledger, [
        lambda count=count: scenario(tmp_path / "worn.json", count) for count in GROWING])
    ended = time.time()
    kept = Ledger(ledger, create=False).runs("worn")
    assert [r.figures["wear"].get("ecc_corrected", {}).get("0") for r in kept] == \
        [None, 30_000.0, 60_000.0]
    assert all("ecc_corrected" in r.figures["wear_read"] for r in kept)

    listed = replace_soon.load(reports / "latest")
    assert listed is not None and [[f.node for f in fs] for fs in listed] == [["worn"]]
    [found] = listed[0]
    limit = replace_soon.rules().limits["ecc_corrected"].limit
    # 30,000 a day from 60,000: the limit in (limit - 60,000) / 30,000 days
    days = (limit - 60_000) / 30_000
    assert (found.counter, found.device, found.value) == ("ecc_corrected", "0", 60_000)
    assert found.per_day == pytest.approx(30_000, rel=0.01)
    assert found.projected == pytest.approx(ended + days * DAY, abs=300)

    page = (reports / "latest" / "summary.html").read_text()
    start = page.index("id='replace-soon'")
    section = page[start:page.index("<h2", start + 1)]
    assert "worn" in section and "corrected ECC errors (lifetime) 60,000" in section
    assert "href='#n-flat'" not in section

    prom = {f.name: f for f in text_string_to_metric_families(
        (reports / "latest" / "metrics.prom").read_text())}
    on = {(s.labels["node"], s.labels["reason"], s.labels["device"]): s.value
          for s in prom["burnin_replace_soon"].samples}
    assert on == {("worn", "ecc_corrected", "0"): 1}
    [when] = prom["burnin_replace_soon_projected_timestamp_seconds"].samples
    assert when.value == pytest.approx(found.projected, abs=1)
    checked = subprocess.run([need("promtool", "prometheus"), "check", "metrics"],
                             stdin=(reports / "latest" / "metrics.prom").open(),
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout

    watched = burnin("history", "--watch", "--ledger", str(ledger))
    assert watched.returncode == 1, watched.stderr
    assert "1. worn" in watched.stdout and "flat" not in watched.stdout
    assert "corrected ECC errors (lifetime) 60,000" in watched.stdout
    as_json = json.loads(burnin("history", "--watch", "--json", "--ledger",
                                str(ledger)).stdout)
    assert [n["node"] for n in as_json] == ["worn"]
    assert as_json[0]["reasons"][0]["counter"] == "ecc_corrected"
    assert burnin("history", "--watch", "flat", "--ledger", str(ledger)).returncode == 0


def aer_file(sysfs, count: int | None) -> None:
    """The kernel's AER statistics of the GPU at 0000:18:00.0 (None: no such file)."""
    path = sysfs / "bus" / "pci" / "devices" / "0000:18:00.0" / "aer_dev_correctable"
    path.parent.mkdir(parents=True, exist_ok=True)
    if count is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(f"RxErr {count}\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\n"
                        f"NonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {count}\n")


def test_a_growing_aer_count_is_read_by_health_and_listed_and_a_missing_file_is_no_zero(
        pytester, tmp_path):
    """The kernel's correctable PCIe errors of the GPU: 0, 3,000, 2,000 after a reboot
    (a reset: its increase summed), then 5,000 on the last run, so some 8,000 since the
    first, about 2,700 a day, the limit in under two days. On the flat node the kernel has
    no AER file: nothing is read, so it is no point of a trend (never a zero)."""
    ledger, inv = wear_fleet(pytester, tmp_path, 0, lambda name: {
        "health": {"sysfs_root": str(tmp_path / f"sys-{name}")}})
    aer_file(tmp_path / "sys-flat", None)
    reports = daily_runs(pytester, inv, ledger, [
        lambda count=count: aer_file(tmp_path / "sys-worn", count)
        for count in (0, 3_000, 2_000, 5_000)])
    worn = Ledger(ledger, create=False).runs("worn")
    assert [r.figures["wear"].get("pcie_aer_correctable", {}).get("0") for r in worn] == \
        [None, 3_000.0, 2_000.0, 5_000.0]
    assert all("pcie_aer_correctable" in r.figures["wear_read"] for r in worn)
    flat = Ledger(ledger, create=False).runs("flat")
    assert not any("pcie_aer_correctable" in r.figures.get("wear_read", ()) for r in flat)

    listed = replace_soon.load(reports / "latest")
    assert listed is not None and [[f.node for f in fs] for fs in listed] == [["worn"]]
    [found] = listed[0]
    assert (found.counter, found.device) == ("pcie_aer_correctable", "0")
    assert found.value == 8_000  # 3,000, then 2,000 after the reset, then 3,000 more
    assert not found.reached
    watched = burnin("history", "--watch", "--ledger", str(ledger))
    assert watched.returncode == 1 and "correctable PCIe errors (AER)" in watched.stdout


# --- the command on a generated ledger ---------------------------------------------------

def generated(path, days: int = 5) -> str:
    """A ledger of two nodes' daily runs ending now: n1's retired pages on GPU 2 climbing
    8 a day, n2's flat at 20."""
    from burnin.gate.quarantine import node_runs
    from burnin.model.outcome import CaseResult, Outcome
    ledger, now = Ledger(path), time.time()
    for day in range(days):
        t = now - (days - 1 - day) * DAY
        cases = {n: [CaseResult(n, "health", Outcome.PASSED, "", "")] for n in ("n1", "n2")}
        worn = {"n1": {"wear": {"retired_pages": {"2": 10.0 + 8 * day}},
                       "wear_read": ["retired_pages"]},
                "n2": {"wear": {"retired_pages": {"2": 20.0}}, "wear_read": ["retired_pages"]}}
        ledger.record_runs("c", node_runs(f"r{day}", cases, {}, t, worn), 90, now=t)
    return str(path)


def test_history_watch_exit_codes_and_what_it_says(tmp_path):
    ledger = generated(tmp_path / "q.db")
    listed = burnin("history", "--watch", "--ledger", ledger)
    assert listed.returncode == 1
    assert "replace soon: 1 node(s)" in listed.stdout
    assert "n1" in listed.stdout and "GPU 2: retired pages 42" in listed.stdout
    assert "n2" not in listed.stdout
    clear = burnin("history", "--watch", "n2", "--ledger", ledger)
    assert clear.returncode == 0 and "replace soon: no node" in clear.stdout
    # without --watch, NODES is the quarantine history as before
    shown = burnin("history", "n1", "--ledger", ledger)
    assert shown.returncode == 0 and "n1: 5 run(s) kept" in shown.stdout
    for argv, said in ((("history", "--ledger", ledger), "NODES expected"),
                       (("history", "--watch", "n[1-", "--ledger", ledger), "not a hostlist"),
                       (("history", "--watch", "--ledger", str(tmp_path / "none.db")),
                        "cannot read the quarantine ledger")):
        bad = burnin(*argv)
        assert bad.returncode == 2 and said in bad.stderr, (argv, bad.stderr)
        assert "Traceback" not in bad.stderr
    assert not (tmp_path / "none.db").exists(), "a missing ledger is said, never created"


def test_the_aer_reader_takes_only_the_kernels_total_and_nothing_else(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "burnin_probe_hostfacts", Path(__file__).resolve().parent.parent / "probes"
        / "hostfacts.py")
    hostfacts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hostfacts)
    aer_file(tmp_path, 17)
    read = hostfacts.aer_correctable
    # NVML's 8-digit domain and upper case; the kernel's 4-digit, lower case
    assert read(str(tmp_path), "00000000:18:00.0") == 17
    assert read(str(tmp_path), "0000:18:00.0") == 17
    for bad_id in (None, "", "18:00.0", "0000:18:00", "../../etc:18:00.0", "0:0:0.9"):
        assert read(str(tmp_path), bad_id) is None, bad_id
    assert read(str(tmp_path / "none"), "00000000:18:00.0") is None
    path = tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0" / "aer_dev_correctable"
    for text in ("RxErr 5\n", "TOTAL_ERR_COR many\n", "",
                 "x" * 10_000 + "\nTOTAL_ERR_COR 3\n"):  # past what the kernel writes
        path.write_text(text)
        assert read(str(tmp_path), "00000000:18:00.0") is None, text[:20]

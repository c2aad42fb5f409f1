"""metrics.prom in Prometheus conventions, checked by Prometheus' own tools: promtool's
linter, a real node_exporter's textfile collector serving it, and the docs' alert rules
under promtool's rule checker and rule tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import docpages
from test_reports import burn_record, sweep_record

from burnin.report.metrics import BASE_UNITS, base_unit
from burnin.report.publish import publish

REPO = Path(__file__).resolve().parent.parent
NODE_EXPORTER = "prometheus-node-exporter"  # Debian's name for node_exporter
RUN_LEVEL = {"burnin_run_info", "burnin_last_run_timestamp_seconds", "burnin_check_passed",
             "burnin_check_outcome", "burnin_node_quarantined"}


def need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is missing in CI: apt-get install {package}")
        pytest.skip(f"needs {tool} (Debian's {package}; CI installs it)")
    return path


def sdc_record(node: str, uuid: str | None) -> dict:
    dev = {"device": "cuda:0" if uuid else "cpu:0", "uuid": uuid,
           "known": {"tflops": 650.5, "digest": "ab"}}
    return {"run_id": "r", "node": node, "check": "sdc", "ok": True, "reason": "",
            "data": {"probe": "sdc", "devices": [dev], "figures": {}, "errors": []}}


def storage_record(node: str) -> dict:
    devs = [{"stream": i, "gpu": i, "read": {"bytes": 1, "seconds": 1, "gbps": 2.5},
             "write": {"bytes": 1, "seconds": 1, "gbps": 1.25}} for i in range(2)]
    return {"run_id": "r", "node": node, "check": "storage", "ok": True, "reason": "",
            "data": {"probe": "storage", "devices": devs, "figures": {}, "errors": []}}


def published(run_dir: Path) -> Path:
    """A run of three nodes: g1 passed everything (GPU UUIDs), g2 failed burn and is in
    quarantine, g3 (a CPU node) had its burn skipped."""
    run_dir.mkdir(parents=True)
    g1 = burn_record("g1", 700.0)
    g1["data"]["devices"][0]["uuid"] = "GPU-1111-aaaa"
    records = [g1, sweep_record("g1", 400.0), sdc_record("g1", "GPU-1111-aaaa"),
               storage_record("g1"), burn_record("g2", 420.0), sdc_record("g3", None)]
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    verdicts = {"g1": {"burn": ("passed", ""), "sdc": ("passed", "")},
                "g2": {"burn": ("failed", "cuda:0: straggler")},
                "g3": {"burn": ("skipped", "in quarantine"), "sdc": ("passed", "")}}
    problems = publish(run_dir, "rack42", "run-7", verdicts, None,
                       {"g1": False, "g2": True, "g3": False})
    assert problems == []
    return run_dir / "metrics.prom"


def samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_base_units_run_info_uuid_outcomes_and_the_ledger(tmp_path):
    text = published(tmp_path / "run").read_text()
    fams = samples(text)
    for name in fams:
        assert name in RUN_LEVEL or name.endswith(tuple(base for _, base, _, _ in BASE_UNITS)), \
            name
        assert not re.search(r"_(gbps|tflops|gb|mb)(_|$)", name), name
    # The run id is one series' label, not every series'.
    assert [s.labels for s in fams["burnin_run_info"]] == [{"cluster": "rack42",
                                                            "run_id": "run-7"}]
    assert text.count("run_id=") == 1
    assert fams["burnin_last_run_timestamp_seconds"][0].value > 1.6e9
    # Values in base units: TFLOPS and GB/s (decimal) converted here, not in the checks.
    flops = {(s.labels["node"], s.labels["check"]): s for s in
             fams["burnin_device_flops_per_second"]}
    assert flops[("g1", "burn")].value == 700e12 and flops[("g1", "sdc")].value == 650.5e12
    storage = {(s.labels["stream"], s.labels["phase"]): s.value
               for s in fams["burnin_storage_bytes_per_second"]}
    assert storage == {("0", "read"): 2.5e9, ("0", "write"): 1.25e9, ("1", "read"): 2.5e9,
                       ("1", "write"): 1.25e9}
    assert fams["burnin_allreduce_busbw_bytes_per_second"][0].value == 400e9
    assert fams["burnin_gpu_temperature_max_celsius"][0].value == 75
    # GPU UUID beside the device index, under dcgm-exporter's label name; none for a CPU.
    assert flops[("g1", "burn")].labels["UUID"] == "GPU-1111-aaaa"
    assert flops[("g1", "burn")].labels["device"] == "cuda:0"
    assert flops[("g1", "sdc")].labels["UUID"] == "GPU-1111-aaaa"
    assert "UUID" not in flops[("g3", "sdc")].labels
    # Skipped is not failed.
    outcome = {(s.labels["node"], s.labels["check"], s.labels["outcome"]): s.value
               for s in fams["burnin_check_outcome"]}
    assert outcome[("g3", "burn", "skipped")] == 1 and outcome[("g3", "burn", "failed")] == 0
    assert outcome[("g2", "burn", "failed")] == 1 and outcome[("g2", "burn", "skipped")] == 0
    assert outcome[("g1", "burn", "passed")] == 1
    assert sum(v for (n, c, _), v in outcome.items() if (n, c) == ("g3", "burn")) == 1
    passed = {(s.labels["node"], s.labels["check"]): s.value for s in fams["burnin_check_passed"]}
    assert passed[("g3", "burn")] == 0 and passed[("g1", "burn")] == 1
    quarantined = {s.labels["node"]: s.value for s in fams["burnin_node_quarantined"]}
    assert quarantined == {"g1": 0, "g2": 1, "g3": 0}


def test_every_figure_a_check_declares_has_a_base_unit():
    declared = set()
    for path in (REPO / "burnin" / "checks").glob("*.py"):
        declared |= set(re.findall(r'Figure\(\s*"(\w+)"', path.read_text()))
    assert declared, "no Figure found: the pattern is stale"
    for metric in declared:
        base_unit(metric)  # raises for a unit metrics.py cannot name
    with pytest.raises(ValueError, match="no known unit"):
        base_unit("storage_gbs")


def test_promtool_accepts_metrics_prom(tmp_path):
    promtool = need("promtool", "prometheus")
    path = published(tmp_path / "run")
    res = subprocess.run([promtool, "check", "metrics"], stdin=path.open(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_node_exporter_textfile_collector_serves_the_series(tmp_path):
    exporter = need(NODE_EXPORTER, "prometheus-node-exporter")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    # As the operator guide does it (docs/operator/revalidation.md): a world-readable
    # copy, moved into place in one step.
    shutil.copy(published(tmp_path / "run"), textfiles / ".burnin.prom.tmp")
    os.replace(textfiles / ".burnin.prom.tmp", textfiles / "burnin.prom")
    port = free_port()
    proc = subprocess.Popen([exporter, "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={textfiles}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline, body = time.monotonic() + 60, None
        while body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "node_exporter did not answer"
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    fams = samples(body)
    assert fams["node_textfile_scrape_error"][0].value == 0
    flops = {(s.labels["node"], s.labels["check"]): s for s in
             fams["burnin_device_flops_per_second"]}
    assert flops[("g1", "burn")].labels["UUID"] == "GPU-1111-aaaa"
    assert flops[("g2", "burn")].value == 420e12
    assert {s.labels["node"]: s.value for s in fams["burnin_node_quarantined"]}["g2"] == 1
    assert fams["burnin_run_info"][0].labels["run_id"] == "run-7"


def readme_yaml(marker: str) -> str:
    """The docs' ```yaml block that contains `marker` (docs/operator/metrics.md holds the
    alert rules today; README.md and every page of docs/ are searched, and it must be
    there exactly once)."""
    __tracebackhide__ = True
    return docpages.the_block("yaml", marker)


RULE_TESTS = """\
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'burnin_node_quarantined{cluster="rack42",node="gpu017"}'
        values: '1x3000'
      - series: 'burnin_node_quarantined{cluster="rack42",node="gpu018"}'
        values: '0x3000'
      - series: 'burnin_last_run_timestamp_seconds{cluster="rack42"}'
        values: '0x3000'
      - series: 'burnin_last_run_timestamp_seconds{cluster="rack43"}'
        values: '0+60x3000'
      - series: 'burnin_gpu_temperature_max_celsius{node="gpu017",UUID="GPU-1"}'
        values: '80x30'
      - series: 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="gpu017"}'
        values: '35x30'
    alert_rule_test:
      - eval_time: 3h
        alertname: BurninNodeQuarantined
        exp_alerts:
          - exp_labels: {severity: warning, cluster: rack42, node: gpu017}
            exp_annotations:
              summary: "gpu017 (rack42) is in burnin's quarantine"
              description: "burnin quarantine show gpu017 says why"
      - eval_time: 47h
        alertname: BurninRunsStale
        exp_alerts: []
      - eval_time: 50h
        alertname: BurninRunsStale
        exp_alerts:
          - exp_labels: {severity: warning, cluster: rack42}
            exp_annotations:
              summary: "no burnin run on rack42 for more than two days"
    promql_expr_test:
      - expr: burnin:gpu_burn_over_now:celsius
        eval_time: 10m
        exp_samples:
          - labels: 'burnin:gpu_burn_over_now:celsius{node="gpu017",UUID="GPU-1"}'
            value: 45
"""


def test_the_documented_alert_rules_pass_promtool(tmp_path):
    promtool = need("promtool", "prometheus")
    (tmp_path / "rules.yml").write_text(readme_yaml("alert: BurninNodeQuarantined"))
    res = subprocess.run([promtool, "check", "rules", "rules.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    (tmp_path / "tests.yml").write_text(RULE_TESTS)
    res = subprocess.run([promtool, "test", "rules", "tests.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr

"""Reports people read: summary.html, metrics.prom, evidence folders, burnin report and
burnin compare; a screenshot in headless Chromium; a 10,000-node fleet."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from burnin.report.publish import publish

REPO = Path(__file__).resolve().parent.parent


class Page(HTMLParser):
    """What a test needs from summary.html: node rows, links, charts."""

    def __init__(self):
        super().__init__()
        self.rows, self.links, self.svgs, self.polylines, self.circles = [], [], 0, 0, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("id", "").startswith("node-"):
            self.rows.append(a["id"][5:])
        elif tag == "a":
            self.links.append(a.get("href"))
        elif tag == "svg":
            self.svgs += 1
        elif tag == "polyline":
            self.polylines += 1
        elif tag == "circle":
            self.circles += 1


def burn_record(node: str, tflops: float, temps=(60, 70, 75)) -> dict:
    dev = {"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "tflops": tflops,
           "tflops_series": [[1, tflops], [2, tflops]],
           "telemetry": {"series": {"t": [0, 1, 2], "temp_c": list(temps),
                                    "sm_mhz": [1980] * 3, "power_w": [650] * 3}}}
    return {"run_id": "r", "node": node, "check": "burn", "ok": True, "reason": "",
            "data": {"probe": "burn", "devices": [dev], "figures": {}, "errors": []}}


def sweep_record(node: str, busbw: float) -> dict:
    sweep = [{"bytes": b, "busbw_gbps": busbw * b / (16 << 20), "wrong_elements": 0}
             for b in (1 << 20, 4 << 20, 16 << 20)]
    return {"run_id": "r", "node": node, "check": "allreduce", "ok": True, "reason": "",
            "data": {"probe": "allreduce", "devices": [], "errors": [],
                     "figures": {"world": 8, "sweep": sweep}}}


def make_run(run_dir: Path, nodes: int, bad: str = "g0003") -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    verdicts, lines = {}, []
    for i in range(nodes):
        name = f"g{i:04d}"
        slow = name == bad
        lines += [json.dumps(burn_record(name, 420.0 if slow else 700.0 + i % 7)),
                  json.dumps(sweep_record(name, 400.0 + i % 5))]
        verdicts[name] = {"burn": ("failed", "cuda:0: straggler: 420.000 TFLOPS") if slow
                          else ("passed", ""), "allreduce": ("passed", "")}
    (run_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
    return verdicts


def test_summary_metrics_and_evidence_for_a_failing_node(tmp_path):
    run_dir = tmp_path / "run"
    verdicts = make_run(run_dir, 12)
    publish(run_dir, "rack42", "run-1", verdicts, {"burn": 550})
    page = Page()
    page.feed((run_dir / "summary.html").read_text())
    assert sorted(page.rows) == sorted(verdicts) and page.rows[0] == "g0003"
    assert "nodes/g0003/verdicts.txt" in page.links and "nodes/g0003/" in page.links
    for link in (x for x in page.links if x.startswith("nodes/")):
        assert (run_dir / link).exists(), link
    assert page.svgs >= 4 and page.circles >= 12 and page.polylines >= 3
    assert "http://" not in (run_dir / "summary.html").read_text().replace(
        "http://www.w3.org/2000/svg", ""), "the page must fetch nothing"
    bundle = run_dir / "nodes" / "g0003"
    assert sorted(p.name for p in bundle.iterdir()) == ["allreduce.json", "burn.json",
                                                        "telemetry.json", "verdicts.txt"]
    assert "straggler" in (bundle / "verdicts.txt").read_text()
    assert json.loads((bundle / "telemetry.json").read_text())["cuda:0"]["series"]["temp_c"]
    families = {f.name: f for f in text_string_to_metric_families(
        (run_dir / "metrics.prom").read_text())}
    passed = {(s.labels["node"], s.labels["check"]): s.value
              for s in families["burnin_check_passed"].samples}
    assert passed[("g0003", "burn")] == 0 and passed[("g0001", "burn")] == 1
    flops = {s.labels["node"]: s.value
             for s in families["burnin_device_flops_per_second"].samples}
    assert flops["g0003"] == 420e12
    assert {s.labels["scope"] for s in families[
        "burnin_allreduce_busbw_bytes_per_second"].samples} == {"intra"}
    assert families["burnin_gpu_temperature_max_celsius"].samples[0].value == 75


def test_report_renders_again_from_a_run_directory_and_compare_shows_moves(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    verdicts = make_run(a, 4, bad="none")
    make_run(b, 4, bad="g0002")
    publish(a, "c", "a", verdicts)
    from burnin.model.outcome import CaseResult
    from burnin.report.junit import write_junit
    cases = {(n, c): CaseResult(n, c, o, m)
             for n, v in verdicts.items() for c, (o, m) in v.items()}
    write_junit(a / "junit.xml", "rack9", "a", [(n, n) for n in verdicts], cases)
    (a / "summary.html").unlink()

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "burnin", *args], capture_output=True,
                              text=True, timeout=60)
    res = cli("report", str(a))
    assert res.returncode == 0, res.stderr
    assert "<h1>burnin run a, cluster rack9</h1>" in (a / "summary.html").read_text()
    res = cli("compare", str(a), str(b))
    assert res.returncode == 1, "a figure regressed: " + res.stderr
    assert ("g0002 device_tflops{check=burn,device=cuda:0}: 702 -> 420 (-40.2%)  REGRESSED"
            in res.stdout)
    assert "1 figure(s) moved by more than 10%, 1 of them the wrong way" in res.stdout
    assert cli("compare", str(a), str(a)).returncode == 0
    assert cli("report", str(tmp_path / "nope")).returncode == 2


def test_ten_thousand_nodes_each_have_a_row_and_the_charts_stay_capped(tmp_path):
    # Behaviour at fleet scale, not speed: how long it takes is
    # benchmarks/summary_render.py's figure, on a machine quiet enough to measure.
    run_dir = tmp_path / "fleet"
    verdicts = make_run(run_dir, 10_000)
    publish(run_dir, "big", "run-10k", verdicts, {"burn": 550})
    page = Page()
    page.feed((run_dir / "summary.html").read_text())
    assert len(page.rows) == 10_000 and page.circles <= 4 * 1500 + 100


@pytest.mark.skipif(not shutil.which("chromium") and not os.environ.get("CI"),
                    reason="needs Debian's chromium (CI installs it)")
def test_screenshot_in_headless_chromium_shows_charts(tmp_path):
    run_dir = tmp_path / "run"
    publish(run_dir, "rack42", "run-1", make_run(run_dir, 12), {"burn": 550})
    shot = tmp_path / "shot.png"
    res = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1600",
         f"--screenshot={shot}", (run_dir / "summary.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert shot.exists(), res.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # A blank page compresses to almost nothing; charts and a table do not.
    assert len(png) > 30_000, f"screenshot is only {len(png)} bytes: nothing rendered?"

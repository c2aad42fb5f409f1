"""summary.html as an operator reads it: the verdict, the grid, every node's section and
failure linked, the trend, sections for checks the page does not know, malformed
records, and the page drawn by headless Chromium at 1, 11 and 1,000 nodes."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import re
import subprocess
import sys
import textwrap

from support.replay import replay_python
from support.suiterun import run_suite
from support.summarypage import (
    REPO,
    Summary,
    count_colour,
    count_ink,
    drawn_dom,
    needs_chromium,
    pixels,
    screenshot,
    synthetic,
)

from burnin.checks import CHECKS
from burnin.report.publish import publish
from burnin.report.summary import NodeView

bench = synthetic()
KINDS = ("thermal", "sdc", "storage", "malformed", "unreachable")


def fleet(tmp_path, nodes=11, earlier=0, samples=60, failing=5, kinds=KINDS):
    """A published synthetic run under tmp_path/reports, with `earlier` runs before it."""
    reports = tmp_path / "reports"
    for k in range(earlier):
        past = reports / f"20261121T{k:02d}0000Z-e{k}"
        v, inv = bench.synthetic_run(past, nodes, samples, failing=0, seed=10 + k)
        publish(past, "synthetic", past.name, v, bench.floors(v), nodes=inv)
    run = reports / "20261122T120000Z-now"
    verdicts, inventory = bench.synthetic_run(run, nodes, samples, failing=failing, kinds=kinds)
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts), nodes=inventory)
    return run, verdicts


def failing(verdicts):
    return sorted(n for n, v in verdicts.items() if any(o != "passed" for o, _ in v.values()))


def sections_of(page: Summary) -> dict[str, dict]:
    """Every node's section: data for the compressed ones, True for those written in."""
    return {**page.lazy(), **dict.fromkeys(page.sections, True)}


def test_every_node_is_on_the_page_and_every_failure_links_to_its_section_and_evidence(
        tmp_path):
    run, verdicts = fleet(tmp_path)
    page = Summary(run / "summary.html")
    bad = failing(verdicts)
    assert len(bad) == 5
    assert sorted(page.rows) == sorted(verdicts) and page.rows[:5] == bad  # failing first
    assert sorted(page.tiles) == sorted(verdicts)
    for node in bad:
        check = next(c for c, (o, _) in verdicts[node].items() if o != "passed")
        assert f"#n-{node}-{check}" in page.row_links[node], page.row_links[node]
        assert f"nodes/{node}/verdicts.txt" in page.row_links[node]
        assert (run / "nodes" / node / "verdicts.txt").exists()
        assert node in page.tiles[node] and check in page.tiles[node]  # hover: who and why
    sections = sections_of(page)
    assert sorted(sections) == sorted(verdicts)
    assert bad[0] in page.sections, "the worst node's section reads without JavaScript"
    for node in bad:
        section = page.text.split(f"<section id='n-{node}'")[1].split("</section>")[0] \
            if node in page.sections else json.dumps(sections[node])
        assert f"nodes/{node}/" in section or sections[node]["e"] == 1  # its evidence
    for node, data in page.lazy().items():
        assert [p[0] for p in data["p"]] == list(bench.CHECKS), node
    banner = page.text[page.text.index("id='verdict'"):page.text.index("id='grid'")]
    assert "NOT ADMITTED: 5 of 11 nodes" in banner and "storage 9/11 (2 failed)" in banner
    assert "rack r001: 11 nodes, <b>5 failing</b>" in page.text
    assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")


def test_a_run_groups_its_grid_by_the_inventorys_racks(pytester):
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent("""\
        version: 1
        cluster: racks
        defaults: {transport: local, gpus: 0, python: REPLAY}
        nodes:
          - name: a[1-2]
            address: 127.0.0.[1-2]
            labels: {rack: r7}
          - name: b1
            labels: {rack: r9}
            python: /nonexistent/python3
        """).replace("REPLAY", replay_python(pytester.path / "replay")))
    result, reports = run_suite(pytester, str(inv), "-k", "health", "--no-quarantine")
    result.assert_outcomes(passed=2, failed=1)
    page = Summary(reports / "latest" / "summary.html")
    grid = page.text.split("id='grid'")[1].split("</section>")[0]
    assert grid.index("rack r9: 1 node, <b>1 failing</b>") < grid.index("rack r7: 2 nodes")
    assert "<th>rack</th>" in page.text and "127.0.0.2" in json.dumps(page.lazy())


def test_burnin_report_without_inventory_groups_by_nothing(tmp_path):
    run, verdicts = fleet(tmp_path, nodes=4, failing=1, kinds=("storage",))
    (run / "summary.html").unlink()
    res = subprocess.run([sys.executable, "-m", "burnin", "report", str(run)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    page = Summary(run / "summary.html")
    assert "rack" not in page.text.split("id='grid'")[1].split("</section>")[0]
    assert sorted(page.rows) == sorted(verdicts)


def test_the_trend_marks_what_burnin_compare_lists(tmp_path):
    run, verdicts = fleet(tmp_path, nodes=6, earlier=2, failing=2, kinds=("storage", "thermal"))
    previous = sorted(p for p in run.parent.iterdir() if p.name < run.name)[-1]
    res = subprocess.run([sys.executable, "-m", "burnin", "compare", str(previous), str(run)],
                         capture_output=True, text=True, timeout=120)
    listed = {line.split()[0] for line in res.stdout.splitlines() if "%)" in line}
    assert listed >= set(failing(verdicts)), res.stdout  # a slow disk, a hot GPU: both moved
    page = Summary(run / "summary.html")
    moved_rows = page.text.split("id='moved'")[1].split("</table>")[0]
    assert {n for n in verdicts if f"#n-{n}'" in moved_rows} == listed
    sections = page.lazy()
    for node in set(verdicts) - set(page.sections):
        sparks = next(b for b in sections[node]["t"] if b[0] == "sparks")[1]
        assert len(sparks) >= 6 and all(len(values) == 3 for _, values, _ in sparks)
    assert "Compared with 2 earlier runs of this cluster" in page.text


def test_a_check_the_page_does_not_know_gets_its_verdict_and_figures(tmp_path):
    run, verdicts = fleet(tmp_path, nodes=3, failing=0)
    memory = {"run_id": "r", "node": "gpu00002", "check": "memory", "ok": True, "reason": "",
              "data": {"probe": "memory", "figures": {"patterns": 4, "bytes": 80 << 30},
                       "devices": [{"device": f"cuda:{g}", "wrong_words": g == 3,
                                    "gbps": 1900.5 + g} for g in range(8)], "errors": []}}
    with open(run / "results.jsonl", "a") as f:
        f.write(json.dumps(memory) + "\n")
    verdicts["gpu00002"]["memory"] = ("failed", "cuda:3: 1 pattern word read back wrong")
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts))
    page = Summary(run / "summary.html")
    assert "#n-gpu00002-memory" in page.row_links["gpu00002"]
    assert "<h4>memory <span class='fail'>failed</span></h4>" in page.text
    part = page.text.split("id='n-gpu00002-memory'")[1].split("</div>")[0]
    assert "<th>wrong_words</th>" in part and "<td>1902</td>" in part and "patterns" in part


def links(view: NodeView, record: dict) -> list:
    """A page part of this module's own, for a check to name (Check.page)."""
    return [["note", f"{view.node}: {len(record['data']['devices'])} links", "pass"]]


def broken(view: NodeView, record: dict) -> list:
    raise KeyError("tflops")


def test_the_part_a_check_names_draws_it(tmp_path, monkeypatch):
    run, verdicts = fleet(tmp_path, nodes=2, failing=0)
    monkeypatch.setitem(CHECKS, "pcie", dataclasses.replace(CHECKS["pcie"],
                                                            page=f"{__name__}:links"))
    with open(run / "results.jsonl", "a") as f:
        f.write(json.dumps({"node": "gpu00001", "check": "pcie", "ok": True, "data": {
            "devices": [{}, {}], "figures": {}, "errors": []}}) + "\n")
    verdicts["gpu00001"]["pcie"] = ("passed", "")
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts))
    data = Summary(run / "summary.html").lazy()["gpu00001"]
    assert ["pcie", "passed", [["note", "gpu00001: 2 links", "pass"]]] in data["p"]


def test_a_part_that_cannot_be_drawn_says_so_and_the_rest_is_drawn(tmp_path, monkeypatch):
    run, verdicts = fleet(tmp_path, nodes=2, failing=0)
    monkeypatch.setitem(CHECKS, "burn", dataclasses.replace(CHECKS["burn"],
                                                            page=f"{__name__}:broken"))
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts))
    data = Summary(run / "summary.html").lazy()["gpu00001"]
    parts = {check: blocks for check, _, blocks in data["p"]}
    assert parts["burn"] == [["note", "gpu00001 burn: could not draw this part: KeyError: "
                                      "'tflops'", "warn"]]
    assert parts["storage"][1][0] == "charts"


def _places(value, path=()):
    """Every place in a document (the first few items of a list), containers too."""
    if path:
        yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _places(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _places(v, (*path, i))


def table_rows(page) -> list[str]:
    """The verdict table's rows of summary.html, sorted, as Summary reads them."""
    return sorted(re.findall(r"<tr id=['\"]node-([^'\"]*)", page.read_text()))


def test_malformed_records_never_stop_the_page(tmp_path):
    """A string where a number belongs, a number where a list belongs, one place at a
    time in every record: the page is written, with every node in it."""
    run, verdicts = fleet(tmp_path, nodes=2, failing=0, samples=4)
    good = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    rng = random.Random(7)
    places = [(i, p) for i, r in enumerate(good) for p in _places(r["data"])]
    page = run / "summary.html"
    # The verdict table's rows, as Summary reads them (checked once below), without
    # parsing the whole page 300 times (10 of this test's 27 s).
    assert table_rows(page) == sorted(Summary(page).rows) == sorted(verdicts)
    for i, path in rng.sample(places, min(60, len(places))):
        for junk in ("fast", 7, None, [], {"x": 1}):
            records = list(good)
            records[i] = copy.deepcopy(good[i])  # the one record this junk goes into
            target = records[i]["data"]
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = junk
            (run / "results.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
            page.unlink()  # the page read below is this publish's, never an earlier one's
            publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts))
            assert table_rows(page) == sorted(verdicts), path


@needs_chromium
def test_one_node_draws_its_section_with_telemetry(tmp_path):
    run, _ = fleet(tmp_path, nodes=1, failing=0, samples=120)
    dom = drawn_dom(run / "summary.html", tmp_path / "profile")
    assert "ADMITTED: all 1 node passed every check" in dom
    burn = dom.split('id="n-gpu00001-burn"')[1].split('id="n-gpu00001-storage"')[0]
    assert burn.count("<polyline") == 32  # 8 GPUs x TFLOPS, temperature, clock, power
    for label in ("TFLOPS", "°C", "MHz", "W", "slowdown 87 °C", "power limit 700 W",
                  "time into the burn (s)", ">fleet median 6", " TFLOPS</text>"):
        assert label in burn, label
    rows = pixels(screenshot(run / "summary.html", tmp_path / "one.png", tmp_path / "profile",
                             "1100,1500", only="gpu00001"))[2]
    assert count_ink(rows) > 3000, "the GPUs' lines are not on the screen"
    assert count_colour(rows, (31, 35, 40), 30) > 5000, "no labels on the screen"


@needs_chromium
def test_eleven_nodes_with_failures_show_charts_with_labels(tmp_path):
    run, verdicts = fleet(tmp_path, nodes=11, earlier=1)
    page = Summary(run / "summary.html")
    assert page.svgs >= 6 and page.circles >= 88 and page.polylines >= 3
    for title in ("burn: sustained TFLOPS per device, NVIDIA H100 80GB HBM3",
                  "storage: read GB/s per stream (one per GPU)", "allreduce: busbw against"):
        chart = page.text.split(f'class="t">{title}')[1].split("</svg>")[0]
        assert "<title>gpu000" in chart, f"{title}: hover names no node"
        assert "median" in chart and "floor" in chart, title
    burn = page.text.split('class="t">burn: sustained TFLOPS per device')[1].split("</svg>")[0]
    assert ">gpu00002 cuda:3</text>" in burn  # the thermal node's slow GPU, named in place
    assert ">600</text>" in burn and ">TFLOPS</text>" in burn  # round ticks, the unit
    dom = drawn_dom(run / "summary.html", tmp_path / "profile")
    assert all(f'id="n-{n}"' in dom for n in verdicts), "not every section was drawn"
    sdc = dom.split('id="n-gpu00004-sdc"')[1].split('class="chk"')[0]
    assert "wrong elements of C (8192 x 8192)" in sdc and "row 1234 wrong" in sdc
    rows = pixels(screenshot(run / "summary.html", tmp_path / "eleven.png",
                             tmp_path / "profile", "1200,1300"))[2]
    assert count_colour(rows, (207, 34, 46)) > 2000, "no failure on the screen"
    assert count_colour(rows, (9, 105, 218)) > 1000, "no chart dots on the screen"


@needs_chromium
def test_a_thousand_nodes_open_a_compressed_section_on_a_click(tmp_path, finding):
    run, verdicts = fleet(tmp_path, nodes=1000, samples=60, failing=None, kinds=bench.KINDS)
    size = (run / "summary.html").stat().st_size
    page = Summary(run / "summary.html")
    assert sorted(page.rows) == sorted(verdicts) and len(page.tiles) == 1000
    lazy = page.lazy()
    assert len(lazy) + len(page.sections) == 1000 and len(lazy) > 900
    dom = drawn_dom(run / "summary.html", tmp_path / "profile", node="gpu00500")
    part = dom.split('id="n-gpu00500-burn"')[1].split('class="chk"')[0]
    assert part.count("<polyline") == 32 and "time into the burn (s)" in part
    rows = pixels(screenshot(run / "summary.html", tmp_path / "thousand.png",
                             tmp_path / "profile", "1000,900", only="gpu00500"))[2]
    assert count_ink(rows) > 3000, "the lazily drawn section's lines are not on the screen"
    top = pixels(screenshot(run / "summary.html", tmp_path / "top.png", tmp_path / "profile",
                            "1100,900"))[2]
    assert count_colour(top, (45, 164, 78), 20) > 20_000, "the grid's tiles are not drawn"
    finding(f"summary.html: 1,000 synthetic nodes (60 samples per GPU): {size / 1e6:.2f} MB")
    assert size < 2_000_000


@needs_chromium
def test_the_benchmark_runs_at_tiny_scale(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "summary_render.py"),
                          "--nodes", "12:30", "--repeat", "1", "--earlier", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("summary.html 12 nodes x 8 GPUs, 30 samples/GPU"), last
    assert " ms, open a lazy section " in last and (tmp_path / "summary_12.png").exists()


def test_a_failing_fabric_node_shows_its_port_and_link_table(tmp_path):
    run, verdicts = fleet(tmp_path, nodes=3, failing=0)
    port = {"port": "1", "state": "ACTIVE", "phys_state": "LinkUp", "rate": "400 Gb/sec",
            "link_layer": "InfiniBand", "before": {"link_downed": 1, "symbol_error": 0},
            "growth": {"link_downed": 1, "symbol_error": 0}}
    down = {**port, "port": "2", "state": "DOWN", "phys_state": "Disabled", "growth": {}}
    record = {"run_id": "r", "node": "gpu00002", "check": "fabric", "ok": True, "reason": "",
              "data": {"probe": "fabric", "errors": [], "figures": {
                  "ib": {"root": "/sys/class/infiniband", "window_s": 1234.5, "since": "baseline",
                         "hcas": [{"name": "mlx5_0", "ports": [port, down]}]},
                  "nvlink": {"read": True}},
                  "devices": [{"device": "0", "index": 0, "uuid": "GPU-0", "nvlink": {
                      "links": 18, "active": 17, "down": [7],
                      "growth": {"3": {"crc_flit": 500}}}}]}}
    with open(run / "results.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    verdicts["gpu00002"]["fabric"] = ("failed", "mlx5_0 port 1: link_downed grew by 1")
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts))
    page = Summary(run / "summary.html")
    part = page.text.split("id='n-gpu00002-fabric'")[1].split("</div>")[0]
    for cell in ("<th>errors grown</th>", "<td>mlx5_0</td>", "link_downed +1",
                 "DOWN / Disabled", "since health, over the run&#x27;s load",
                 "<th>NVLink active</th>", "17 of 18", "link 3: crc_flit +500"):
        assert cell in part, (cell, part[:3000])

"""Figures, not documents: what the run keeps beside results.jsonl (.kept.jsonl) and how
publish draws a big fleet from it, reading results.jsonl only for the failing nodes."""

from __future__ import annotations

import json
import os

import pytest
from support.summarypage import Summary, drawn_dom, needs_chromium, synthetic

from burnin.figures import record_figures as figures
from burnin.figures.record_figures import (
    KEPT,
    kept,
    kept_line,
    key_figures,
    read_for_page,
    read_records,
)
from burnin.report.publish import publish
from burnin.report.summary import page as page_mod
from burnin.report.summary import trend

bench = synthetic()


def failing(verdicts):
    return sorted(n for n, v in verdicts.items() if any(o != "passed" for o, _ in v.values()))


@pytest.fixture
def big(monkeypatch):
    """A fleet of 12 counts as big: passing nodes are drawn from their kept figures."""
    monkeypatch.setattr(page_mod, "WHOLE_SECTIONS", 5)


def run_of(tmp_path, nodes=12, failing_nodes=3):
    run = tmp_path / "reports" / "20261122T120000Z-now"
    verdicts, inventory = bench.synthetic_run(run, nodes, 60, failing=failing_nodes,
                                              kinds=("thermal", "storage", "straggler"))
    return run, verdicts, inventory


def test_a_kept_record_has_the_whole_documents_figures_and_none_of_its_series(tmp_path):
    run, verdicts, _ = run_of(tmp_path)
    records = read_records(run / "results.jsonl")
    burn = next(r for r in records if r["check"] == "burn" and r["node"] == "gpu00001")
    small = json.loads(kept_line(burn))
    assert "series" not in json.dumps(small) and "tflops_series" not in json.dumps(small)
    assert key_figures(small) == key_figures(burn)  # the hottest °C too, from its series
    assert small["data"]["devices"][3] == {"device": "cuda:3", "name": bench.MODEL,
                                           "uuid": "GPU-00000-3"}
    allreduce = next(r for r in records if r["check"] == "allreduce")
    assert kept(allreduce)["data"]["figures"]["sweep"] == allreduce["data"]["figures"]["sweep"]
    # The env a probe ran under is in its node's heading, on a big fleet's page too.
    allreduce["data"]["env"] = {"NCCL_IB_HCA": "mlx5_0", "GLOO_SOCKET_IFNAME": "lo"}
    assert kept(allreduce)["data"]["env"] == allreduce["data"]["env"]
    assert len(kept_line(burn)) < len(json.dumps(burn)) / 5


def test_a_big_fleet_is_published_without_reading_a_passing_nodes_document(tmp_path, big):
    run, verdicts, inventory = run_of(tmp_path)
    bad = failing(verdicts)
    # Every passing node's line of results.jsonl made unreadable (its head kept): a
    # publish that parsed one would lose that node's figures.
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    cut = [ln if json.loads(ln)["node"] in bad else ln[:200] + "\n" for ln in lines]
    (run / "results.jsonl").write_text("".join(cut))
    assert publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts),
                   nodes=inventory) == []
    summary = Summary(run / "summary.html")
    lazy = summary.lazy()
    passing = lazy["gpu00002"]
    burn = next(blocks for check, _, blocks in passing["p"] if check == "burn")
    _, names, values = next(b for b in burn if b[0] == "figs")
    # The figures' names are the page's, stored once for every node that has them.
    names = summary.packed("sections-frames")[names]
    assert len(names) == len(values) == 16 and names[0] == ["burn TFLOPS cuda:0", "TFLOPS"]
    another = next(n for n in lazy if n not in bad and n != "gpu00002")
    other = next(blocks for check, _, blocks in lazy[another]["p"] if check == "burn")
    assert other[0][1] == burn[0][1] and other[0][2] != values
    assert "burnin_device_flops_per_second{" in (run / "metrics.prom").read_text()
    prom = (run / "metrics.prom").read_text()
    assert prom.count('node="gpu00002"') > 40
    # The failing nodes' sections are whole: their burn charts, drawn from the series.
    thermal = bad[0]
    whole = lazy.get(thermal) or {}
    assert thermal in summary.sections or any(b[0] == "charts" for _, _, blocks in whole["p"]
                                              for b in blocks)
    assert f"id='n-{thermal}-burn'" in summary.text and "TFLOPS per device over the burn" \
        in summary.text
    telemetry = json.loads((run / "nodes" / thermal / "telemetry.json").read_text())
    assert len(telemetry["cuda:3"]["series"]["temp_c"]) == 60


def test_without_a_whole_kept_file_publish_reads_results_jsonl_and_keeps_as_it_reads(
        tmp_path, big):
    run, verdicts, _ = run_of(tmp_path)
    kept_lines = (run / KEPT).read_text().splitlines(keepends=True)
    (run / KEPT).write_text("".join(kept_lines[:-1]))  # a run killed between the appends
    records = read_for_page(run, set(failing(verdicts)))
    assert len(records) == len(kept_lines)
    whole = [r for r in records if "kept_figures" not in r]
    assert {r["node"] for r in whole} == set(failing(verdicts))
    passing = [r for r in records if "kept_figures" in r]
    assert passing and all("tflops_series" not in json.dumps(r) for r in passing)
    (run / KEPT).unlink()
    assert len(read_for_page(run, set())) == len(kept_lines)


def test_a_kept_file_is_only_used_whole(tmp_path, monkeypatch):
    run, verdicts, _ = run_of(tmp_path, nodes=4, failing_nodes=1)
    calls = []
    real = figures.kept
    monkeypatch.setattr(figures, "kept", lambda r: calls.append(r) or real(r))
    read_for_page(run, set(failing(verdicts)))
    assert calls == [], "a whole kept file was there: nothing needed keeping again"


def test_the_trend_reads_an_earlier_runs_saved_figures(tmp_path):
    reports = tmp_path / "reports"
    past = reports / "20261121T000000Z-e0"
    v, inv = bench.synthetic_run(past, 4, 30, failing=0, seed=10)
    publish(past, "synthetic", past.name, v, bench.floors(v), nodes=inv)
    saved = trend._figures_of(past)
    assert saved == trend._from_prom(past / "metrics.prom") and len(saved) == 4
    # What the saved figures are read from: metrics.prom and results.jsonl made junk
    # (older than them), the trend is the same.
    for name in ("metrics.prom", "results.jsonl"):
        (past / name).write_text("junk\n")
        os.utime(past / name, (1, 1))
    assert trend._figures_of(past) == saved
    (past / trend.FIGURES).write_text("[1, 2")
    assert trend._figures_of(past) == {}  # junk saved figures: metrics.prom, junk too


def test_a_big_fleets_passing_sections_stay_small(tmp_path, big):
    """A passing node of a big fleet costs the page its figures, not its telemetry: the
    bound that keeps 10,000 nodes' page under 10 MB."""
    run, verdicts, inventory = run_of(tmp_path, nodes=240, failing_nodes=0)
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts), nodes=inventory)
    packed = sum(len(text) for name, text in Summary(run / "summary.html").scripts.items()
                 if name.startswith("sections-"))
    assert packed / 240 < 400, f"{packed / 240:.0f} bytes a passing node's section"


def test_metrics_prom_is_the_same_from_kept_records_as_from_whole_ones(tmp_path):
    from burnin.report import metrics
    run, verdicts, _ = run_of(tmp_path, nodes=8, failing_nodes=2)
    whole = metrics.render("c", "r", 1.0, verdicts, read_records(run / "results.jsonl"))
    assert whole.count("burnin_device_flops_per_second{") == 2 * 8 * 8  # burn, sdc
    for _ in range(2):  # from KEPT, then from results.jsonl kept as it is read
        kept_records = read_for_page(run, set(failing(verdicts)))
        assert metrics.render("c", "r", 1.0, verdicts, kept_records) == whole
        (run / KEPT).unlink(missing_ok=True)


@needs_chromium
def test_the_browser_draws_a_passing_nodes_kept_figures_as_python_would(tmp_path, big):
    from burnin.report.summary.sections import block_html
    run, verdicts, inventory = run_of(tmp_path)
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts), nodes=inventory)
    summary = Summary(run / "summary.html")
    burn = next(blocks for check, _, blocks in summary.lazy()["gpu00002"]["p"]
                if check == "burn")
    figs = ["figs", summary.packed("sections-frames")[burn[0][1]], burn[0][2]]
    dom = drawn_dom(run / "summary.html", tmp_path / "profile", node="gpu00002")
    part = dom.split('id="n-gpu00002-burn"')[1].split('class="chk"')[0]
    assert "<td>burn TFLOPS cuda:0</td><td>TFLOPS</td>" in part
    # Python's twin and the script give the same table, the same figures formatted alike.
    assert block_html(figs).replace("'", '"') in part.replace("'", '"')


def test_kept_lines_parsed_in_batches_read_as_one_at_a_time(tmp_path, monkeypatch):
    run, verdicts, _ = run_of(tmp_path, nodes=6, failing_nodes=1)
    bad = set(failing(verdicts))
    one = [figures._compact(json.loads(ln)) if json.loads(ln)["node"] not in bad else None
           for ln in (run / KEPT).read_text().splitlines()]
    monkeypatch.setattr(figures, "BATCH", 5)  # batches that end inside a node's lines
    got = read_for_page(run, bad)
    assert len(got) == len(one) and all(a == b for a, b in zip(one, got, strict=True) if a)
    # A torn last line (a run killed mid-append) anywhere in a batch: not the kept file then.
    text = (run / KEPT).read_text()
    (run / KEPT).write_text(text[:-40])
    assert figures._read_kept(run / KEPT, run / "results.jsonl", bad) is None
    assert len(read_for_page(run, bad)) == len(one)  # from results.jsonl


def test_kept_lines_out_of_step_with_results_jsonl_are_not_used(tmp_path, monkeypatch):
    """The whole records are found by line number from KEPT: a KEPT whose lines do not
    follow results.jsonl's (here two nodes' swapped) is not trusted, and publish reads
    results.jsonl instead."""
    run, verdicts, _ = run_of(tmp_path, nodes=4, failing_nodes=1)
    bad = set(failing(verdicts))
    lines = (run / KEPT).read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if json.loads(ln)["node"] in bad)
    other = next(i for i, ln in enumerate(lines) if json.loads(ln)["node"] not in bad)
    assert figures._read_kept(run / KEPT, run / "results.jsonl", bad) is not None
    lines[at], lines[other] = lines[other], lines[at]
    (run / KEPT).write_text("".join(lines))
    assert figures._read_kept(run / KEPT, run / "results.jsonl", bad) is None
    calls = []
    real = figures.kept
    monkeypatch.setattr(figures, "kept", lambda r: calls.append(r) or real(r))
    records = read_for_page(run, bad)
    assert calls and {r["node"] for r in records if "kept_figures" not in r} == bad
    whole = [r for r in records if r["node"] in bad]
    assert whole and all("tflops_series" in json.dumps(r) for r in whole
                         if r["check"] == "burn")


def test_a_kept_file_from_before_kept_keys_reads_the_same_figures(tmp_path):
    """A run directory kept by an earlier burnin (kept_figures as [metric, labels, value,
    better] with kept_help) is published from its kept file still."""
    run, verdicts, _ = run_of(tmp_path, nodes=3, failing_nodes=0)
    records = read_records(run / "results.jsonl")
    burn = next(r for r in records if r["check"] == "burn")
    now = json.loads(kept_line(burn))
    assert isinstance(now["kept_keys"], str) and len(now["kept_figures"]) == 16
    old = {k: v for k, v in now.items() if k != "kept_keys"}
    figs = key_figures(burn)
    old["kept_figures"] = [[f.metric, f.labels, f.value, f.better] for f in figs]
    old["kept_help"] = {f.metric: f.help for f in figs}
    doctored = dict(now, kept_keys=now["kept_keys"].replace('"higher"', '"up"'))
    short = dict(now, kept_figures=now["kept_figures"][:-1])
    assert key_figures(json.loads(json.dumps(old))) == figs == key_figures(now)
    assert key_figures(doctored) == []
    assert key_figures(short) == []  # values that do not match their keys: none trusted


def test_a_torn_whole_line_leaves_its_kept_record_in_its_place(tmp_path):
    run, verdicts, _ = run_of(tmp_path, nodes=4, failing_nodes=1)
    bad = set(failing(verdicts))
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if json.loads(ln)["node"] in bad
              and json.loads(ln)["check"] == "burn")
    lines[at] = lines[at][:200] + "\n"
    (run / "results.jsonl").write_text("".join(lines))
    records = read_for_page(run, bad)
    assert len(records) == len(lines) and "kept_figures" in records[at]
    assert key_figures(records[at]) and records[at]["node"] in bad
    assert all("kept_figures" not in r for i, r in enumerate(records)
               if r["node"] in bad and i != at)


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_past_the_whole_sections_a_failing_node_is_drawn_from_figures_its_evidence_whole(
        tmp_path, monkeypatch):
    """A big fleet failing nearly whole (a bad roll-out) holds at most WHOLE_FAILING
    nodes' documents: the others' sections are drawn from their figures, and their evidence
    folders, written as results.jsonl is read, are byte for byte those of a publish that
    held every document."""
    run, verdicts, inventory = run_of(tmp_path / "held", failing_nodes=9)
    bad = failing(verdicts)
    assert len(bad) == 9
    assert publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts),
                   nodes=inventory) == []
    held = _tree(run / "nodes")
    monkeypatch.setattr(page_mod, "WHOLE_SECTIONS", 5)
    monkeypatch.setattr(page_mod, "WHOLE_FAILING", 4)
    seen: list[set] = []
    real = figures.read_for_page
    monkeypatch.setattr(figures, "read_for_page",
                        lambda run_dir, whole: seen.append(set(whole)) or real(run_dir, whole))
    import shutil
    shutil.rmtree(run / "nodes")
    assert publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts),
                   nodes=inventory) == []
    [drawn_whole] = seen
    assert len(drawn_whole) == 4 and drawn_whole < set(bad)
    assert _tree(run / "nodes") == held
    summary = Summary(run / "summary.html")
    streamed = sorted(set(bad) - drawn_whole)
    def charts(node):
        section = summary.lazy().get(node)
        return section is None or any(b[0] == "charts" for check, _, blocks in section["p"]
                                      if check == "burn" for b in blocks)
    assert all(charts(n) for n in drawn_whole)
    for node in streamed:  # linked to its evidence, its section without the burn's charts
        assert f"nodes/{node}/" in summary.text
        assert node in summary.lazy() and not charts(node), node


def test_whole_records_reads_only_the_named_nodes_whatever_their_lines_look_like(tmp_path):
    lines = [{"run_id": "r", "node": 'n"1', "check": "health", "ok": True},
             {"run_id": "r", "node": "n2", "check": "health", "ok": True},
             {"node": "n2", "run_id": "r", "check": "burn"},      # another key order
             {"run_id": 'r"x', "node": "n3", "check": "burn"}]   # a run id it cannot skip
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"run_id": "r", "no')
    assert list(figures.whole_records(path, {'n"1', "n2"})) == lines[:3]
    assert list(figures.whole_records(path, {"n3"})) == lines[3:]
    assert list(figures.whole_records(path, set())) == []

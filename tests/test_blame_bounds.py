"""Bounded by one node, on the controller too: what one node sends grows the controller's
state, the metrics file and its console output by no more than an honest node's would."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from test_reports import burn_record

from burnin.core.safetext import UnsafeDocument, safe_document, safe_text
from burnin.engine.progress import Progress
from burnin.probe.protocol import PROGRESS_MARK, _progress_lines
from burnin.report import metrics


def test_a_node_naming_new_devices_grows_no_progress_state():
    p = Progress(lambda text: None, tty=False, every_s=3600)
    for i in range(10_000):
        p.update("n1", {"device": f"cuda:{i}", "elapsed_s": 1, "tflops": 1.0}, devices=8)
    assert len(p.state["n1"]) == 8
    p.update("n1", {"device": "cuda:3", "elapsed_s": 2, "tflops": 2.0}, devices=8)
    assert p.state["n1"]["cuda:3"]["tflops"] == 2.0, "a known device still updates"


def test_stderr_of_many_lines_in_one_chunk_is_split_in_linear_time():
    """A million lines in one chunk: each line was copied out of the whole remaining buffer
    (some 5 TB moved, many minutes); split once, about a second. The bound tells a hang."""
    seen = []
    feed = _progress_lines(seen.append)
    line = PROGRESS_MARK + b'{"device": "cpu", "elapsed_s": 1}\n'
    chunk = (b"noise\n" * 9 + line) * 100_000
    done = threading.Event()
    worker = threading.Thread(target=lambda: (feed(chunk), done.set()), daemon=True)
    worker.start()
    assert done.wait(120), "splitting a million lines did not finish: quadratic again?"
    assert len(seen) == 100_000


def test_metrics_keep_one_sample_per_series_and_bound_a_node_claiming_thousands():
    liar = burn_record("n3", 700.0)
    dev = liar["data"]["devices"][0]
    liar["data"]["devices"] = [dict(dev, device=f"cuda:{i % 3}") for i in range(30)]
    ports = [{"port": str(p), "state": "ACTIVE", "rate_gbps": 400,
              "growth": {f"counter{c}": 1 for c in range(1000)}} for p in range(64)]
    fabric = {"run_id": "r", "node": "n4", "check": "fabric", "ok": True, "reason": "",
              "data": {"probe": "fabric", "devices": [], "errors": [],
                       "figures": {"ib": {"hcas": [{"name": "mlx5_0", "ports": ports}]},
                                   "nvlink": {"read": False}}}}
    text = metrics.render("c", "r", 0.0, {}, [burn_record("n1", 700.0), liar, fabric])
    series = [ln.rsplit(" ", 1)[0] for ln in text.splitlines() if not ln.startswith("#")]
    assert len(series) == len(set(series)), "a series twice"
    assert sum('node="n3"' in s and "device_flops" in s for s in series) == 3
    assert sum('node="n4"' in s for s in series) <= metrics.MAX_SERIES_PER_RECORD


def test_a_carriage_return_in_a_label_is_escaped():
    record = burn_record("n1", 700.0)
    record["data"]["devices"][0]["device"] = "cuda:0\rburnin_fake 1"
    text = metrics.render("c", "r", 0.0, {}, [record])
    assert "\r" not in text
    assert 'device="cuda:0\\\\x0dburnin_fake 1"' in text


def test_burnin_compare_makes_node_text_safe_for_the_terminal(tmp_path):
    for name, tflops in (("a", 700.0), ("b", 500.0)):
        (tmp_path / name).mkdir()
        record = burn_record("n1\x1b]0;owned\x07\u202e", tflops)
        (tmp_path / name / "results.jsonl").write_text(json.dumps(record) + "\n")
    res = subprocess.run([sys.executable, "-m", "burnin", "compare", str(tmp_path / "a"),
                          str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout and "\u202e" not in res.stdout
    assert "n1\\x1b]0;owned\\x07\\u202e device_tflops" in res.stdout


def test_safe_document_escapes_text_bounds_depth_and_refuses_non_finite_numbers():
    doc = {"a\u202e": ["x\ud800\ny", {"k": 1.5}], "n": None, "b": True}
    assert safe_document(doc) == {"a\\u202e": ["x\ufffd\\x0ay", {"k": 1.5}], "n": None,
                                  "b": True}
    deep: list = []
    for _ in range(40):
        deep = [deep]
    for bad in ({"x": float("nan")}, {"x": [float("inf")]}, deep):
        try:
            safe_document(bad)
        except UnsafeDocument:
            continue
        raise AssertionError(f"accepted {bad!r:.40}")
    assert safe_text("ok\ttab\nline") == "ok\ttab\nline"
    assert safe_text("\x1b[2J\x9b") == "\\x1b[2J\\x9b"


def test_the_probe_side_writes_non_finite_numbers_as_words():
    probes = Path(__file__).resolve().parent.parent / "probes"
    sys.path.insert(0, str(probes))
    try:
        import probelib
    finally:
        sys.path.remove(str(probes))
    assert probelib.finite({"a": [float("nan"), float("inf"), -float("inf"), 1.0]}) == \
        {"a": ["nan", "inf", "-inf", 1.0]}

"""Live progress: in place on a terminal, plain lines in CI logs, a summary for fleets."""

from __future__ import annotations

from pathlib import Path

from burnin.engine.progress import Progress
from burnin.inventory.schema import Node
from burnin.probe.protocol import run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent


def test_terminal_redraws_one_line_per_node_in_place():
    out: list[str] = []
    p = Progress(out.append, tty=True, every_s=3600)
    p.begin("burn")
    p.update("n1", {"device": "cuda:0", "elapsed_s": 5, "tflops": 600.0, "temp_c": 70})
    p.update("n1", {"device": "cuda:1", "elapsed_s": 5, "tflops": 610.0, "temp_c": 74})
    p.update("n2", {"device": "cuda:0", "elapsed_s": 4, "tflops": 300.0})
    p._draw()
    p.update("n2", {"device": "cuda:0", "elapsed_s": 6, "tflops": 301.0})
    p.end()
    first, second = out
    assert "\x1b[2K  burn n1: 5 s, 1210.00 TFLOPS over 2 device(s), hottest 74 C\n" in first
    assert "\x1b[2K  burn n2: 4 s, 300.00 TFLOPS over 1 device(s)\n" in first
    assert second.startswith("\x1b[2F"), "the second frame overwrites the first"
    assert "burn n2: 6 s, 301.00" in second


def test_ci_logs_get_plain_lines_and_a_fleet_gets_a_summary():
    out: list[str] = []
    p = Progress(out.append, tty=False, every_s=3600, max_lines=4)
    p.begin("burn")
    for i in range(10):
        p.update(f"g{i:02d}", {"device": "cuda:0", "elapsed_s": 9, "tflops": 600.0 + i,
                               "temp_c": 60 + i})
    p.end()
    (text,) = out
    assert "\x1b" not in text
    lines = text.strip().splitlines()
    assert lines[0] == "burn: 10 nodes reporting, median 604.50 TFLOPS, hottest g09 69 C"
    assert lines[1].startswith("  burn g00: ") and len(lines) == 6  # the 5 slowest


def test_burn_probe_reports_progress_while_it_runs():
    got: list[dict] = []
    node = Node(name="n1", address="n1", transport="local", gpus=0)
    out = run_probe(LocalTransport(node, REPO / "probes"), "burn",
                    {"gpus": 0, "settings": {"duration_s": 1, "n": 128, "sample_s": 0.1}},
                    timeout_s=120, on_progress=got.append)
    assert out.ok, out.reason
    assert len(got) >= 3 and all(g["device"] == "cpu" and g["tflops"] > 0 for g in got[1:])
    # Reported up to the burn's end: its last line is the document's last sample (the
    # burn's timed wall, which starts after the load's warm-up, so under 1 s on a busy
    # machine: 0.9 s was seen in CI, where a bound of 0.95 s failed).
    (dev,) = out.data["devices"]
    assert got[-1]["elapsed_s"] == round(dev["wall_s"], 1) and dev["wall_s"] > 0.5, (
        got[-1], dev["wall_s"])

"""The verdict calibration (benchmarks/verdict_calibration.py) replays a measured sample
through the real judges: the counts its table in benchmarks/RESULTS.md states for the
sample kept in tests/fixtures are what the judges give now. A change to a peer rule that
moves them changes that table with it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import verdict_calibration as cal  # noqa: E402

SAMPLE = REPO / "tests" / "fixtures" / "calibration-sample.json"
# The sample's replay as RESULTS.md states it (its command is beside the table there).
ARGS = {"node_runs": 300, "trials": 50, "sizes": (3, 10)}


def stated() -> str:
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    block = re.search(r"<!-- calibration-sample -->\n(.*?)\n<!-- /calibration-sample -->",
                      text, re.S)
    assert block, "RESULTS.md has no calibration-sample table"
    return block.group(1).strip()


def test_the_sample_replayed_gives_the_counts_results_md_states():
    import json
    results = cal.replay(json.loads(SAMPLE.read_text()), **ARGS)
    assert cal.table(results) == stated()


def test_a_slower_device_is_caught_at_least_as_often_and_healthy_fleets_fail_no_more():
    """What the replay measures means what it says: planting a slowdown never lowers the
    share caught below a healthy fleet's failure rate, at every size (a replay that judged
    the wrong node, or planted nothing, breaks this)."""
    import json
    results = cal.replay(json.loads(SAMPLE.read_text()), node_runs=300, trials=200,
                         sizes=(10,), slowdowns=(0.8,))
    burn = results["burn TFLOPS per device"]["sizes"][10]
    assert burn["detected"][0.8] == 1.0, "a fifth of the speed is caught every time"
    assert burn["false_per_1000"] < 1000 * burn["detected"][0.8]


def test_a_capture_of_one_gpu_a_node_replays_on_one_device_and_more_than_the_corpus_is_refused():
    """A node's devices in the replay are as many as the capture measured (the corpus's
    documents have two): one GPU a node replays on one device; three are refused with
    what to do, not a traceback."""
    import pytest
    rule = "burn TFLOPS per device"
    one = {"runs": {rule: [[[1.0], [1.02], [0.98], [1.01]]]}}
    results = cal.replay(one, node_runs=30, trials=5, sizes=(3,), slowdowns=(0.8,))
    assert results[rule]["sizes"][3]["detected"][0.8] == 1.0
    three = {"runs": {rule: [[[1.0, 1.0, 1.0], [1.02, 1.0, 0.99]]]}}
    with pytest.raises(SystemExit, match=r"3 devices a node, the corpus's burn document 2: "
                                         r"capture with --gpus 2 or fewer"):
        cal.replay(three, node_runs=30, trials=5, sizes=(3,))

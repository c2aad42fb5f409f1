"""Guards of the probes that hand mutants survived: each test here fails with its mutant
applied (docs/developer/testing.md, "The guards hand mutants found unprotected").

- probes/nvlink5.py reads NVLink 5's failed link recoveries (field 214): a GPU whose only
  NVLink event is one counts it in the burn's NVLink recoveries;
- probes/train.py: a rank that prints its result and then exits non-zero is a failed rank,
  not a result; and the node's tokens/s is over its slowest rank's wall time.
"""

from __future__ import annotations

import sys
from pathlib import Path

from test_train import judged, python_with, train

REPO = Path(__file__).resolve().parent.parent
B200 = "NVIDIA B200"


def probe_module(name: str):
    sys.path.insert(0, str(REPO / "probes"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(REPO / "probes"))


def test_a_failed_nvlink5_link_recovery_counts_in_the_burns_recoveries(nvml_in_process):
    telemetry = probe_module("telemetry")
    nv = nvml_in_process(devices=[
        {"name": B200, "uuid": "GPU-r", "nvlink": {"generation": 5, "links": 18, "errors": {
            "link_recovery_failed_events": {"9": 2}}}}])
    nv.nvmlInit()
    (gpu,) = telemetry.GpuTelemetry(nv, ["GPU-r"]).devices
    assert gpu["errors"] == []
    assert (gpu["before"]["nvlink_crc"], gpu["before"]["nvlink_recovery"]) == (0, 2)


# Below the probe, in rank 1's process only: its result is printed, then it exits 3 (a
# rank whose teardown failed, or whose device fell off the bus after its last step).
EXIT_3 = """\
    _exit = os._exit
    os._exit = lambda code: _exit(3)
"""


def test_a_rank_that_prints_its_result_and_exits_non_zero_fails_the_node(tmp_path):
    out = train(python_with(tmp_path, "exit3", EXIT_3, ranks=("1",), imports=""), ranks=2)
    errors = out.data["errors"]
    assert any("rank 1 (" in e and "status 3" in e for e in errors), errors
    assert not any("rank 0 (" in e for e in errors), errors
    assert "tokens_per_s" not in out.data["figures"]
    assert judged(out, devices=1, ranks=2).failures


def test_tokens_per_s_is_over_the_slowest_ranks_wall_time():
    train_probe = probe_module("train")
    probelib = probe_module("probelib")
    shared = {"shape": {"layers": 1}, "steps": 6, "lr": 0.01, "warmup_steps": 2,
              "dtype": "fp32", "losses": [2.0, 1.0], "diverged": [], "checked_steps": 6,
              "flops_per_token": 1000}
    records = [{"shared": shared, "wall_s": wall, "tokens": 1000, "model_tflops": 0.001,
                "gemm_tflops": 0.002, "threads": 1, "torch": "2", "cuda": None,
                "digest": "d"} for wall in (1.0, 4.0)]
    ranks = [probelib.Device(i, "cpu", "cpu") for i in range(2)]
    fig = train_probe.node_figures(records, ranks, 2)
    assert fig["tokens_per_s"] == 500.0  # 2000 tokens in the 4 s the job took, not in 1 s
    assert fig["wall_s"] == 4.0

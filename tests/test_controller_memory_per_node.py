"""The controller's memory per node, guarded: a failing fleet of 2,000 instant nodes
(benchmarks/instant_transport.py) against one of 200, the health check, serial. What the
larger run's peak RSS holds beyond the smaller's, per extra node, stays under a bound
recorded from this machine (benchmarks/RESULTS.md, "Memory per node"): per node, not
absolute, so that a slower or larger machine does not move it, while a record kept whole
per node (a reason, evidence, an incident) does."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import controller_scale as scale  # noqa: E402

# Measured 58 KiB per node on the development machine (2 cores, Python 3.11): the
# failing fleet's reasons, verdicts, junit and report rows. The bound leaves room for
# allocator noise, not for another record per node.
KIB_PER_NODE = 80
# Every check failing, 500 nodes against 100: measured 178 to 181 KiB per node on the
# same machine (2026-11-28), 212 and 215 with pytest's reports kept whole to the end
# (burnin/plugin/kept_reports.py unregistered). The bound is for the allocator's noise
# at 400 extra nodes (about 3 KiB a node between two runs), not for a report kept whole.
ALL_CHECKS_KIB_PER_NODE = 196


def peak_rss_mib(nodes: int, workdir: Path, docs: Path, checks: str = "health") -> float:
    workdir.mkdir()
    inv = scale.write_inventory(workdir / "fleet.yaml", "scale", f"n[{1:05d}-{nodes:05d}]",
                                workdir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scale.HERE), str(REPO)]),
           "BURNIN_INSTANT_DOCS": str(docs), "BURNIN_INSTANT_MODE": "fail"}
    select = ["-k", "health"] if checks == "health" else []
    argv = scale.pytest_argv(inv, workdir / "reports", ["-p", "instant_transport", *select])
    rc, _, rss, _ = scale.measured(argv, env, workdir)
    assert rc == 1, f"a failing fleet of {nodes} nodes: pytest exited {rc}"
    scale.check_report((workdir / "reports" / "latest" / "junit.xml").read_text(), nodes,
                       "fail", checks)
    return rss


def test_the_controllers_memory_per_node_stays_under_its_bound(tmp_path):
    docs = scale.recorded_documents(REPO / "tests" / "corpus", tmp_path)
    small = peak_rss_mib(200, tmp_path / "small", docs)
    large = peak_rss_mib(2000, tmp_path / "large", docs)
    per_node = (large - small) * 1024 / 1800
    assert per_node <= KIB_PER_NODE, (
        f"the controller holds {per_node:.0f} KiB per node of a failing fleet (peak RSS "
        f"{small:.0f} MiB at 200 nodes, {large:.0f} MiB at 2,000), over its bound of "
        f"{KIB_PER_NODE} KiB")


def test_a_fleet_failing_every_check_stays_under_its_bound_per_node(tmp_path):
    docs = scale.recorded_documents(REPO / "tests" / "corpus", tmp_path)
    small = peak_rss_mib(100, tmp_path / "small", docs, "all")
    large = peak_rss_mib(500, tmp_path / "large", docs, "all")
    per_node = (large - small) * 1024 / 400
    assert per_node <= ALL_CHECKS_KIB_PER_NODE, (
        f"the controller holds {per_node:.0f} KiB per node of a fleet failing every check "
        f"(peak RSS {small:.0f} MiB at 100 nodes, {large:.0f} MiB at 500), over its bound "
        f"of {ALL_CHECKS_KIB_PER_NODE} KiB")

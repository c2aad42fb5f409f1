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


def peak_rss_mib(nodes: int, workdir: Path, docs: Path) -> float:
    workdir.mkdir()
    inv = scale.write_inventory(workdir / "fleet.yaml", "scale", f"n[{1:05d}-{nodes:05d}]",
                                workdir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scale.HERE), str(REPO)]),
           "BURNIN_INSTANT_DOCS": str(docs), "BURNIN_INSTANT_MODE": "fail"}
    argv = scale.pytest_argv(inv, workdir / "reports", ["-p", "instant_transport", "-k",
                                                        "health"])
    rc, _, rss, _ = scale.measured(argv, env, workdir)
    assert rc == 1, f"a failing fleet of {nodes} nodes: pytest exited {rc}"
    scale.check_report((workdir / "reports" / "latest" / "junit.xml").read_text(), nodes,
                       "fail", "health")
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

"""What remembering every run costs the controller at fleet scale (issue 26 on issue 30's
scale): a run's verdicts kept in the ledger (`Ledger.record_runs`, one transaction, the
retention pruned in it) against the anchor, a bare sqlite3 executemany of the same rows in
one transaction; and what the end of a run reads back (`track.of_ledger`: failures per
node-day, every node's speed trend, the repeat offenders) with `--runs` runs kept a node.

    python benchmarks/ledger_history.py [--nodes 10000] [--runs 30] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burnin.figures import track_record as track  # noqa: E402
from burnin.ledger.api import Ledger, NodeRun  # noqa: E402
from burnin.ledger.runs import RUN_COLUMNS  # noqa: E402
from burnin.model.nodes import GoodputSettings, QuarantineSettings  # noqa: E402

DAY = 86400.0
SET_BY = "burn: burn TFLOPS cuda:3 650 against the fleet's median 700"


def node_runs(nodes: int, run: int, t: float) -> list[NodeRun]:
    return [NodeRun(f"n{i}", f"r{run}", t, "passed", speed=1.0 - 0.0001 * (i % 50) * run,
                    figures={"set_by": SET_BY}) for i in range(nodes)]


def bare(path: Path, runs: list[NodeRun]) -> None:
    """The anchor: the same rows into a copy of the same ledger (the same table, indexes
    and journal), one transaction, no burnin: no encoding of reasons, no retention."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.executemany(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES "
                   f"({', '.join('?' * len(RUN_COLUMNS))})",
                   [(r.node, "c", r.run_id, r.time, r.outcome, "[]", "[]", r.speed,
                     json.dumps(r.figures)) for r in runs])
    db.execute("COMMIT")
    db.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=30, help="runs kept a node before the last")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    now = time.time()
    ours, anchor, reads = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="burnin-history-") as d:
            ledger = Ledger(Path(d) / "q.db")
            for run in range(args.runs):
                t = now - (args.runs - run) * DAY
                ledger.record_runs("c", node_runs(args.nodes, run, t), 180, now=t)
            last = node_runs(args.nodes, args.runs, now)
            with sqlite3.connect(Path(d) / "q.db") as src, \
                    sqlite3.connect(Path(d) / "bare.db") as dst:
                src.backup(dst)
            w = time.perf_counter()
            ledger.record_runs("c", last, 180, now=now)
            ours.append(time.perf_counter() - w)
            w = time.perf_counter()
            bare(Path(d) / "bare.db", last)
            anchor.append(time.perf_counter() - w)
            c = time.process_time()
            fleet = track.of_ledger(ledger, [f"n{i}" for i in range(args.nodes)],
                                    {f"n{i}": 0.99 for i in range(args.nodes)}, 64,
                                    GoodputSettings(), QuarantineSettings(), now)
            reads.append(time.process_time() - c)
            fleet.save(Path(d))
            size = (Path(d) / track.KEPT).stat().st_size
    a, b = statistics.median(ours), statistics.median(anchor)
    print(f"{args.nodes} nodes, {args.runs} runs kept a node, medians of {args.repeat}:")
    print(f"  of_ledger {statistics.median(reads):.2f} s CPU, history.json "
          f"{size / 1e6:.1f} MB, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"  record_runs {a:.3f} s wall, bare executemany {b:.3f} s: "
          f"record_runs/bare = {a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

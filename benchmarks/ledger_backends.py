"""Recording a run's failures in the quarantine ledger: SQLite against PostgreSQL.

One run of a fleet-wide bad rollout fails N nodes at once; the gate records them in one
ledger transaction (`Ledger.record_failures`). This times that call for N failures (each
with a reason and key figures as a real run's), into a new SQLite file and into a new
database of a real PostgreSQL (tests/support/pgserver.py: Debian's server, started here with
fsync on, reached over its unix socket), alternating, and checks that each ledger then
holds N entries and N history events.

    python benchmarks/ledger_backends.py [--failures 10000] [--repeat 3]

Prints the medians, and the PostgreSQL/SQLite ratio last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support import pgserver  # noqa: E402

from burnin.ledger.api import Ledger  # noqa: E402


def failures(n: int) -> list[tuple[str, list, list, dict]]:
    return [(f"gpu{i:05d}", ["burn", "sdc"],
             [f"burn: 512.3 TFLOPS on cuda:{i % 8} below the floor of 600 TFLOPS",
              f"sdc: cuda:{i % 8} result digest differs from the fleet's"],
             {"burn": {"tflops": 512.3, "floor": 600}, "sdc": {"mismatches": 3}})
            for i in range(n)]


def timed(where, batch: list) -> float:
    ledger = Ledger(where)
    started = time.perf_counter()
    new = ledger.record_failures("bench", batch, "run-1")
    took = time.perf_counter() - started
    held = ledger._read(lambda db: db.execute(
        "SELECT (SELECT count(*) FROM quarantine), (SELECT count(*) FROM history)"
    ).fetchone())
    if sum(new.values()) != len(batch) or tuple(held) != (len(batch), len(batch)):
        raise SystemExit(f"{where}: {held} rows after recording {len(batch)} failures")
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--failures", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    problem = pgserver.missing_requirements()
    if problem:
        print(f"ledger_backends: {problem}", file=sys.stderr)
        return 2
    batch = failures(args.failures)
    times: dict[str, list[float]] = {"sqlite": [], "postgresql": []}
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="burnin-ledger-bench-") as tmp, \
            pgserver.PgServer(fsync=True) as server:
        for i in range(args.repeat):
            times["sqlite"].append(timed(Path(tmp) / f"q{i}.db", batch))
            times["postgresql"].append(timed(server.url(server.create_database()), batch))
            print(f"repeat {i + 1}: sqlite {times['sqlite'][-1]:.2f} s, postgresql "
                  f"{times['postgresql'][-1]:.2f} s", flush=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print(f"{args.failures} failures in one run: sqlite median {median['sqlite']:.2f} s, "
          f"postgresql median {median['postgresql']:.2f} s (of {args.repeat}); "
          f"postgresql/sqlite = {median['postgresql'] / median['sqlite']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

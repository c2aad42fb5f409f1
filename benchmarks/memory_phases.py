"""Where the controller's memory goes, per node, at each phase of a run: tracemalloc
snapshots of `pytest suites/` over N instant nodes (benchmarks/instant_transport.py, as
benchmarks/controller_scale.py runs them), serial, for a passing and a failing fleet.

Phases: `collected` (inventory read, items made), `judged` (every check run and judged,
before the run's end), `published` (junit.xml, summary.html, metrics.prom, the ledger
written). Each phase's traced memory is compared to the start of pytest_configure (what
was imported before that is pytest's and burnin's code, not the fleet's), and the lines
that hold the most are listed, per node.

    python benchmarks/memory_phases.py [--nodes 2000] [--fleets pass,fail] [--top 10]
        [--documents tests/corpus]

Also a pytest plugin (`-p memory_phases`, with BURNIN_MEMORY_PHASES=<output.json>):
tracemalloc costs the run about twice its CPU, so its walls say nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
OUT = os.environ.get("BURNIN_MEMORY_PHASES")
_snaps: dict[str, tracemalloc.Snapshot] = {}
_peaks: dict[str, int] = {}


def _snap(phase: str) -> None:
    if OUT:
        _snaps[phase] = tracemalloc.take_snapshot()
        _peaks[phase] = tracemalloc.get_traced_memory()[1]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if OUT:
        tracemalloc.start(1)
        _snap("start")


def pytest_collection_finish(session: pytest.Session) -> None:
    _snap("collected")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session: pytest.Session):
    yield
    _snap("judged")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if not OUT:
        return
    _snap("published")
    start = _snaps["start"]
    report: dict = {}
    for phase, snap in _snaps.items():
        if phase == "start":
            continue
        diff = snap.compare_to(start, "lineno")
        report[phase] = {
            "held": sum(d.size_diff for d in diff), "peak": _peaks[phase],
            "top": [(f"{_short(d.traceback[0].filename)}:{d.traceback[0].lineno}",
                     d.size_diff, d.count_diff) for d in diff[:40]],
            "by_file": _by_file(snap.compare_to(start, "filename")),
        }
    tracemalloc.stop()
    Path(OUT).write_text(json.dumps(report))


def _short(path: str) -> str:
    for root in ("/burnin/", "/site-packages/", "/lib/python"):
        if root in path:
            return path[path.index(root) + 1:]
    return path


def _by_file(diff: list) -> list:
    return [(_short(d.traceback[0].filename), d.size_diff) for d in diff[:15]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--fleets", default="pass,fail")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--documents", type=Path, metavar="FOLDER")
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    import controller_scale as cs

    with tempfile.TemporaryDirectory() as d:
        docs = cs.recorded_documents(args.documents, Path(d)) if args.documents else \
            cs.capture_documents(Path(d))
        for fleet in args.fleets.split(","):
            with tempfile.TemporaryDirectory() as w:
                work = Path(w)
                inv = cs.write_inventory(work / "fleet.yaml", "scale",
                                         f"n[{1:05d}-{args.nodes:05d}]", work)
                out = work / "phases.json"
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                    [str(HERE), str(cs.REPO), os.environ.get("PYTHONPATH", "")]),
                    "BURNIN_INSTANT_DOCS": str(docs), "BURNIN_INSTANT_MODE": fleet,
                    "BURNIN_MEMORY_PHASES": str(out)}
                argv = cs.pytest_argv(inv, work / "reports", ["-p", "instant_transport",
                                                              "-p", "memory_phases"])
                res = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
                if res.returncode != (1 if fleet == "fail" else 0) or not out.exists():
                    raise SystemExit(f"pytest exited {res.returncode} for a {fleet}ing "
                                     f"fleet:\n{res.stdout[-3000:]}{res.stderr[-2000:]}")
                show(json.loads(out.read_text()), fleet, args.nodes, args.top)


def show(report: dict, fleet: str, nodes: int, top: int) -> None:
    print(f"\n{nodes} nodes, {fleet}ing fleet, all checks, serial: held since configure "
          f"(traced), per node")
    for phase, r in report.items():
        print(f"  {phase}: {r['held'] / 2**20:.1f} MiB, {r['held'] / nodes / 1024:.1f} KiB "
              f"per node (traced peak so far {r['peak'] / 2**20:.1f} MiB)")
        for where, size in r["by_file"][:top]:
            print(f"      {size / nodes / 1024:8.2f} KiB/node  {where}")
    print("  the lines holding most at the end (published):")
    for where, size, count in report["published"]["top"][:top]:
        print(f"      {size / nodes / 1024:8.2f} KiB/node  {count / nodes:7.1f} blocks/node  "
              f"{where}")


if __name__ == "__main__":
    main()

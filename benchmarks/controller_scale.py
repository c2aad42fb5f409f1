"""The controller's own overhead at fleet scale: `pytest suites/` over N nodes whose
probes answer instantly (benchmarks/instant_transport.py). Measures the whole user-
facing run (inventory, collection, fan-out, judging, the quarantine ledger, junit.xml,
results.jsonl, summary.html, metrics.prom, evidence folders) in wall seconds and the peak
resident memory of its largest process (pytest, or an xdist worker).

The instant documents are captured first from a real run of every probe on this machine
(one node, tiny settings), so they fit each check's schema as today's probes do. Fleets:
`pass` (every node passes), `fail` (every node fails every check it runs: a fleet-wide
bad rollout, the path that quarantines and writes evidence), `max` (every probe prints
the most output its check allows: peak memory). Each run is checked: every node has its
testsuite, and its testcases say what the fleet was made to say (passed, or failed with
the planted error, never "controller error").

    python benchmarks/controller_scale.py [--nodes 10000] [--repeat 3]
        [--checks health,all] [--fleets pass,fail] [--modes serial,-n2]
    python benchmarks/controller_scale.py --nodes 256 --fleets max --checks all
    python benchmarks/controller_scale.py --nodes 20 --documents tests/corpus   # no capture

First, the anchor: bare pytest running as many trivial tests (nodes x checks, shaped as
the suites are), so that each row also says burnin's time as a ratio of pytest's own
(--no-anchor leaves it out). Prints the failing/passing wall-time ratio last (goal: 2 or
less).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from instant_transport import FAILURE  # noqa: E402, F401  (fails here if it cannot load)

from burnin.checks import CHECKS  # noqa: E402

# Settings that make a real probe quick on a CPU, where a check has them.
TINY = {"duration_s": 1, "n": 64, "random_repeats": 2, "max_products": 16, "size_gb": 0.01,
        "streams": 2, "min_bytes": 1 << 16, "max_bytes": 1 << 18, "seconds_per_size": 0.05,
        "ranks": 2, "sample_s": 0.5, "stream_fraction": 0, "host_bytes": 1 << 20,
        "retention_s": 0.2, "passes": 1, "window_s": 0.2}
# The train job of the documents recorded in tests/corpus/ (train.cpu.json's job_spec):
# the controller judges each document against the job it sent, so the fleet sends that one.
JOB = {"train": {"steps": 6, "warmup_steps": 2, "lr": 0.01, "batch": 4, "d_model": 32,
                 "heads": 2, "layers": 1, "seq_len": 16, "vocab": 64},
       "train_internode": {"steps": 6}}
MODES = {"serial": [], "-n2": ["-n", "2"]}


def pytest_argv(inv: Path, reports: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", str(REPO / "suites"), "--inventory", str(inv),
            "--reports", str(reports), "-q", "-p", "no:cacheprovider", *extra]


def write_inventory(path: Path, cluster: str, names: str, storage: Path) -> Path:
    """CPU nodes with the TINY settings: the fleet runs with the settings the documents
    were captured with (its judges expect the streams and ranks those had)."""
    checks = {name: {**{k: v for k, v in TINY.items() if k in spec.settings},
                     **JOB.get(name, {})} for name, spec in CHECKS.items()}
    path.write_text(json.dumps({"version": 1, "cluster": cluster,
                                "defaults": {"transport": "local", "gpus": 0,
                                             "storage": {"path": str(storage)},
                                             # its own claims: not busy for another's
                                             "workdir": str(storage / "claims")},
                                "nodes": [{"name": names}], "checks": checks}))
    return path


def capture_documents(workdir: Path) -> Path:
    """Every probe's document from one real run on this machine, as {probe: document}."""
    inv = write_inventory(workdir / "capture.yaml", "capture", "capture", workdir)
    reports = workdir / "capture-reports"
    res = subprocess.run(pytest_argv(inv, reports, ["--profile", "quick"]),
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    if res.returncode != 0:
        raise SystemExit(f"capturing the probes' documents failed:\n{res.stdout[-3000:]}")
    docs = {}
    for line in (reports / "latest" / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["ok"] and record["data"].get("probe") == record["check"]:
            docs[record["check"]] = record["data"]
    path = workdir / "documents.json"
    path.write_text(json.dumps(docs))
    return path


def recorded_documents(folder: Path, workdir: Path) -> Path:
    """The documents recorded on a CPU node (`<probe>.cpu.json`, as tests/corpus/ keeps
    them, recorded with these TINY settings' shapes) as {probe: document}: no capture."""
    docs = {f.name.split(".")[0]: json.loads(f.read_text())
            for f in sorted(folder.glob("*.cpu.json"))}
    if not docs:
        raise SystemExit(f"--documents {folder}: no <probe>.cpu.json in it")
    path = workdir / "documents.json"
    path.write_text(json.dumps(docs))
    return path


def expected_cases(nodes: int, checks: str) -> dict[str, int]:
    """Testcases per node the run must report: every check that applies to a CPU node."""
    names = ["health"] if checks == "health" else \
        [c.name for c in CHECKS.values() if c.applies(0, nodes)]
    return dict.fromkeys(names, nodes)


def check_report(junit: str, nodes: int, fleet: str, checks: str) -> None:
    """The run measured what it was meant to: every node there, every verdict as planted."""
    assert junit.count("<testsuite ") == nodes, "every node must have its testsuite"
    assert "controller error" not in junit, "a controller error, not a measurement"
    assert "malformed probe output" not in junit, "the instant documents do not fit"
    cases = re.findall(r'<testcase name="(\w+)"[^>]*?(/>|>)', junit)
    got: dict[str, int] = {}
    for name, _ in cases:
        got[name] = got.get(name, 0) + 1
    want = expected_cases(nodes, checks)
    assert {k: v for k, v in got.items() if k in want} == want, (got, want)
    failures = junit.count("<failure ")
    if fleet == "fail":
        single = sum(v for k, v in want.items() if not CHECKS[k].group)
        assert failures == single and junit.count(FAILURE) >= single, (failures, single)
    else:
        assert failures == 0 and "<error" not in junit and "<skipped" not in junit, \
            f"{failures} failures in a passing fleet"


def one_run(nodes: int, workdir: Path, docs: Path, fleet: str, checks: str,
            extra: list[str]) -> tuple[float, float]:
    inv = write_inventory(workdir / "fleet.yaml", "scale", f"n[{1:05d}-{nodes:05d}]", workdir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), os.environ.get(
        "PYTHONPATH", "")]), "BURNIN_INSTANT_DOCS": str(docs),
        "BURNIN_INSTANT_MODE": "fail" if fleet == "fail" else fleet}
    select = ["-k", "health"] if checks == "health" else []
    argv = pytest_argv(inv, workdir / "reports", ["-p", "instant_transport", *select, *extra])
    rc, wall, rss, cpu = measured(argv, env, workdir)
    if rc != (1 if fleet == "fail" else 0):
        raise SystemExit(f"pytest exited {rc} for a {fleet}ing fleet")
    check_report((workdir / "reports" / "latest" / "junit.xml").read_text(), nodes, fleet,
                 checks)
    return wall, rss, cpu


def measured(argv: list[str], env: dict, cwd: Path) -> tuple[int, float, float, float]:
    """(exit status, wall s, peak RSS MiB of its largest process, CPU s of all its
    processes) of one command. Also keeps, in PEAKS, the most open descriptors and threads
    any one of its processes had (sampled every SAMPLE_S from /proc)."""
    # Peak RSS of children is a high-water mark: run each measurement in a fresh helper.
    code = ("import os, resource, subprocess, sys, time; t = time.monotonic(); "
            "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(p.pid, flush=True); r = p.wait(); "
            "w = time.monotonic() - t; "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(r, w, u.ru_maxrss, u.ru_utime + u.ru_stime)")
    helper = subprocess.Popen([sys.executable, "-c", code, *argv], env=env,
                              stdout=subprocess.PIPE, text=True, cwd=cwd)
    assert helper.stdout is not None
    top = int(helper.stdout.readline())
    fds = threads = 0
    while helper.poll() is None:
        for pid in [top, *children(top)]:
            f, t = open_fds_threads(pid)
            fds, threads = max(fds, f), max(threads, t)
        time.sleep(SAMPLE_S)
    out = helper.stdout.read().split()
    if helper.returncode != 0 or len(out) != 4:
        raise SystemExit(f"the measuring helper failed ({helper.returncode}): {out}")
    PEAKS.append((fds, threads))
    return int(out[0]), float(out[1]), int(out[2]) / 1024, float(out[3])


SAMPLE_S = 0.5
PEAKS: list[tuple[int, int]] = []  # (most open descriptors, most threads) of each measure


def children(pid: int) -> list[int]:
    """pid's descendants (pytest-xdist workers), from /proc."""
    try:
        kids = [int(k) for t in os.listdir(f"/proc/{pid}/task")
                for k in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    except OSError:
        return []
    return kids + [g for k in kids for g in children(k)]


def open_fds_threads(pid: int) -> tuple[int, int]:
    """(open descriptors, threads) of pid now; (0, 0) once it is gone."""
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    return fds, int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]


BARE = """import pytest

NODES = [f"n{{i:05d}}" for i in range(1, {nodes} + 1)]


@pytest.fixture(scope="session")
def fleet():
    return object()

"""


def anchor(nodes: int, workdir: Path, extra: list[str]) -> tuple[float, float, float]:
    """pytest's own cost, the anchor: one trivial test per (node, check), as burnin's
    suites are shaped (a session fixture, a parameter with the node's name as its id), and
    nothing else: no plugin of burnin's, no probe, no report."""
    path = workdir / "test_bare.py"
    path.write_text(BARE.format(nodes=nodes) + "".join(
        f"@pytest.mark.parametrize('host', NODES, ids=NODES)\ndef test_{c}(host, fleet):\n"
        f"    pass\n\n\n" for c in CHECKS))
    rc, wall, rss, cpu = measured([sys.executable, "-m", "pytest", str(path), "-q", "-p",
                                   "no:cacheprovider", "-p", "no:burnin", *extra],
                                  dict(os.environ), workdir)
    if rc != 0:
        raise SystemExit(f"bare pytest exited {rc}")
    return wall, rss, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--checks", default="health,all", help="health (-k health) and/or all")
    p.add_argument("--fleets", default="pass,fail", help="pass, fail, max")
    p.add_argument("--modes", default="serial,-n2", help="serial and/or -n2 (xdist)")
    p.add_argument("--no-anchor", action="store_true",
                   help="leave out bare pytest with as many trivial tests (the anchor)")
    p.add_argument("--documents", type=Path, metavar="FOLDER",
                   help="answer with the documents recorded in FOLDER (<probe>.cpu.json, "
                        "as tests/corpus/ keeps them) instead of capturing them first")
    args = p.parse_args()
    walls: dict[tuple, float] = {}
    bare: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        docs = recorded_documents(args.documents, Path(d)) if args.documents else \
            capture_documents(Path(d))
        for mode in [] if args.no_anchor else args.modes.split(","):
            runs = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as w:
                    runs.append(anchor(args.nodes, Path(w), MODES[mode]))
            bare[mode] = (statistics.median(r[0] for r in runs),
                          statistics.median(r[2] for r in runs))
            print(f"{args.nodes} nodes x {len(CHECKS)} checks, bare pytest, {mode}: wall median "
                  f"{bare[mode][0]:.1f} s (runs {', '.join(f'{r[0]:.1f}' for r in runs)}), CPU "
                  f"median {bare[mode][1]:.1f} s, peak RSS max {max(r[1] for r in runs):.0f} "
                  f"MiB, most open descriptors {max(p[0] for p in PEAKS[-args.repeat:])}, most "
                  f"threads {max(p[1] for p in PEAKS[-args.repeat:])}, load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
        for checks in args.checks.split(","):
            for mode in args.modes.split(","):
                for fleet in args.fleets.split(","):
                    runs = []
                    for _ in range(args.repeat):
                        with tempfile.TemporaryDirectory() as w:
                            runs.append(one_run(args.nodes, Path(w), docs, fleet, checks,
                                                MODES[mode]))
                    wall = statistics.median(r[0] for r in runs)
                    cpu = statistics.median(r[2] for r in runs)
                    fds, threads = (max(p[i] for p in PEAKS[-args.repeat:]) for i in (0, 1))
                    walls[(checks, mode, fleet)] = wall
                    # CPU seconds (user + system, every process of the run): on a shared
                    # machine the steadier figure; wall time waits for the others too.
                    print(f"{args.nodes} nodes, {checks}, {mode}, {fleet}ing fleet: wall median "
                          f"{wall:.1f} s (runs {', '.join(f'{r[0]:.1f}' for r in runs)}), CPU "
                          f"median {cpu:.1f} s (runs {', '.join(f'{r[2]:.1f}' for r in runs)}), "
                          f"peak RSS max {max(r[1] for r in runs):.0f} MiB, most open "
                          f"descriptors {fds}, most threads {threads} (one process), load "
                          f"{os.getloadavg()[0]:.1f}" + (  # the anchor has every check
                              f"; burnin / bare pytest: wall {wall / bare[mode][0]:.2f}, CPU "
                              f"{cpu / bare[mode][1]:.2f}" if mode in bare and checks == "all"
                              else ""), flush=True)
    ratios = [walls[(c, m, "fail")] / walls[(c, m, "pass")] for c, m, f in walls
              if f == "pass" and (c, m, "fail") in walls]
    if ratios:
        print(f"failing / passing fleet wall time: worst {max(ratios):.2f} "
              f"(over {len(ratios)} pairs)")


if __name__ == "__main__":
    t = time.monotonic()
    main()
    print(f"benchmark took {time.monotonic() - t:.0f} s", file=sys.stderr)

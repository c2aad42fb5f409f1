"""summary.html at fleet scale: how big the page is, how long burnin takes to write it,
and how long headless Chromium takes to render it and to open a lazy node section.

Synthetic runs: N nodes of 8 GPUs in racks of 32, every probe record in the shape the
probes write (burn telemetry at one sample a second per GPU, 600 samples for the
standard profile), a few nodes per hundred failing in one of eight ways (thermal
slowdown, straggler, SDC, slow storage stream, slow all-reduce, driver drift,
unreachable, a malformed record), and earlier runs of the same cluster beside it for the
trend. Published with burnin.report.publish.publish, then opened in Chromium:

- render: performance.now() at the first frame after the load event, measured inside
  a copy of the page that has a timing script appended (median of --repeat);
- screenshot: wall time of `chromium --headless --screenshot` on the page, minus the
  same on an empty page (Chromium's own start-up), median of --repeat;
- open: ms from asking for a passing node's section (its #n-NODE link, what a click on
  its tile does) to the section in the DOM, the page loaded (on a big fleet it travels
  compressed and is drawn then);
- publish: wall and CPU seconds of burnin.report.publish.publish (results.jsonl read, evidence,
  summary.html, metrics.prom), median of --repeat, each in a forked process whose peak
  RSS is the publish's memory (it includes what the benchmark held at the fork, printed
  beside it): the dev VM is shared, so CPU is the steadier figure;
- kept: CPU seconds the run spends keeping each record's figures (.kept.jsonl, written
  by the run as each check's records arrive, burnin/engine/outcome_store.py), which publish reads
  instead of the documents' series: the synthetic run makes it the same way.

    python benchmarks/summary_render.py --nodes 1000 --nodes 10000:60

(10000:60 = 10,000 nodes with 60 telemetry samples per GPU, the quick profile: at 600
the synthetic results.jsonl would not fit the dev VM's memory). Figures print last.
`--keep DIR` keeps the synthetic runs in DIR, and a later call with the same DIR and
sizes publishes and renders them again without making them (minutes at 25,000 nodes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burnin.figures.record_figures import KEPT, kept_line  # noqa: E402
from burnin.inventory.schema import Node  # noqa: E402
from burnin.model.outcome import CaseResult  # noqa: E402
from burnin.report.junit import write_junit  # noqa: E402
from burnin.report.publish import publish  # noqa: E402

MODEL, DRIVER = "NVIDIA H100 80GB HBM3", "550.90.07"
KINDS = ("thermal", "straggler", "sdc", "storage", "allreduce", "health", "unreachable",
         "malformed")
SIZES = [1 << k for k in range(20, 31)]            # 1 MiB to 1 GiB, doubling
FLOOR = {"burn": 550, "storage read": 2.0, "storage write": 1.0,  # by figure family
         "allreduce": 400.0}  # the H100 model's, which the judge uses for its 8 ranks
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars"]


def floors(verdicts: dict) -> dict[str, dict[str, float]]:
    """The floors every node's judges used (Verdict.floors), as publish takes them."""
    return {node: dict(FLOOR) for node in verdicts}


class Telemetry:
    """Per-GPU series with their own noise, as real GPUs have (a page's compressed size
    depends on it): a warm-up curve shared by all, noise from a pool at a random offset,
    clocks at boost with the odd dip, a power-cap episode or two."""

    def __init__(self, rng: random.Random, samples: int):
        self.rng, self.samples = rng, samples
        self.pool = [rng.gauss(0, 1) for _ in range(1 << 16)]
        self.warm = [34 + 34 * (1 - 2.718 ** (-i / 60)) for i in range(samples)]
        self.t = [float(i) for i in range(samples)]

    def noise(self) -> list[float]:
        off = self.rng.randrange(len(self.pool) - self.samples)
        return self.pool[off:off + self.samples]

    def gpu(self) -> dict:
        n, rng = self.samples, self.rng
        base = rng.gauss(702, 6)
        tflops = [[t + 1.0, round(base + 4 * z, 3)]
                  for t, z in zip(self.t, self.noise(), strict=True)]
        reasons = [0] * n
        for _ in range(rng.randrange(3)):
            start, length = rng.randrange(n), rng.randrange(5, 30)
            reasons[start:start + length] = [4] * len(reasons[start:start + length])
        return {"tflops": round(statistics.fmean(p[1] for p in tflops), 3),
                "tflops_series": tflops, "series": {
                    "t": self.t,
                    "temp_c": [round(w + 0.6 * z)
                               for w, z in zip(self.warm, self.noise(), strict=True)],
                    "sm_mhz": [1980 if z > -2.33 else 1965 for z in self.noise()],
                    "mem_mhz": [2619] * n,
                    "power_w": [round(668 + 12 * z, 1) for z in self.noise()],
                    "reasons": reasons}}


def _burn(node: str, i: int, tel: Telemetry, kind: str, samples: int) -> dict:
    devices = []
    for g in range(8):
        t = tel.gpu()
        series, tfs, tflops = t["series"], t["tflops_series"], t["tflops"]
        if kind == "thermal" and g == 3:  # hot from half-way: throttled, clocks down
            half = samples // 2
            series = dict(series, temp_c=series["temp_c"][:half] + [88] * (samples - half),
                          sm_mhz=series["sm_mhz"][:half] + [1410] * (samples - half),
                          reasons=series["reasons"][:half] + [0x60] * (samples - half))
            tfs = tfs[:half] + [[p[0], round(p[1] * 0.7, 3)] for p in tfs[half:]]
            tflops = round(statistics.fmean(p[1] for p in tfs), 3)
        if kind == "straggler" and g == 5:
            tfs = [[p[0], round(p[1] * 0.8, 3)] for p in tfs]
            tflops = round(tflops * 0.8, 3)
        devices.append({"device": f"cuda:{g}", "name": MODEL, "uuid": f"GPU-{i:05d}-{g}",
                        "dtype": "bf16", "n": 8192, "tflops": tflops, "tflops_series": tfs,
                        "telemetry": {"uuid": f"GPU-{i:05d}-{g}", "temp_slowdown_c": 87,
                                      "power_limit_w": 700.0, "series": series, "xid": [],
                                      "unsupported": [], "errors": []}})
    if kind == "malformed":  # a string where a number belongs: the page must still draw
        devices[0]["tflops"] = "fast"
        devices[1]["telemetry"]["series"] = dict(devices[1]["telemetry"]["series"],
                                                 temp_c="hot")
    return _record(node, "burn", {"devices": devices,
                                  "figures": {"duration_s": samples, "sample_s": 1.0}})


def _record(node: str, check: str, data: dict, ok: bool = True) -> dict:
    return {"run_id": "synthetic", "node": node, "check": check, "ok": ok, "reason": "",
            "duration_s": 1.0, "exit_code": 0, "stderr_tail": "",
            "data": {"probe": check, "schema": 1, "node": {}, "errors": [], **data}}


def _node_records(node: str, i: int, kind: str, tel: Telemetry, samples: int,
                  group: list[str], rng: random.Random) -> list[dict]:
    health_devs = [{"index": g, "name": MODEL, "uuid": f"GPU-{i:05d}-{g}",
                    "pci_bus_id": f"00000000:{0x18 + g * 0x10:02X}:00.0", "ecc_mode_current": 1,
                    "ecc_uncorrected_volatile": 0, "pcie": {"gen": 5, "max_gen": 5, "width": 16,
                                                            "max_width": 16},
                    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                                      "failed": False}} for g in range(8)]
    health = _record(node, "health", {"node": {"hostname": node, "os": "Ubuntu 22.04.4 LTS",
                                               "kernel": "5.15.0-105-generic", "cpu_count": 224,
                                               "memory_bytes": 2 << 40},
                                      "devices": health_devs, "figures": {
                                          "gpu": {"nvml": "present", "cuda_driver": "12.4",
                                                  "driver": "535.129.03" if kind == "health"
                                                  else DRIVER},
                                          "torch": {"version": "2.13.0", "cuda": "12.4"}}})
    sdc_devs = []
    for g in range(8):
        events = [{"product": 1873, "counts": {"rows": 2, "cols": 1}, "rows": [1234, 1235],
                   "cols": [4097], "wrong_elements": 2, "nonfinite": 0,
                   "examples": [{"row": 1234, "col": 4097, "got": 24.5, "expected": 24.0},
                                {"row": 1235, "col": 4097, "got": -3.0, "expected": -2.0}]}] \
            if kind == "sdc" and g == 2 else []
        sdc_devs.append({"device": f"cuda:{g}", "name": MODEL, "known": {
            "dtype": "bf16", "n": 8192, "products": 4100, "verified": 410,
            "tflops": round(rng.gauss(655, 5), 3), "bad_products": len(events), "events": events,
            "digest": "5f1c0e" * 10}, "random": {"differing_repeats": []}})
    streams = [{"stream": s, "gpu": s, "write": {"gbps": round(rng.gauss(2.1, 0.05), 3)},
                "read": {"gbps": 0.9 if kind == "storage" and s == 6 else
                         round(rng.gauss(3.2, 0.08), 3)}, "integrity_errors": 0,
                "bad_blocks": []} for s in range(8)]
    scale = 0.6 if kind == "allreduce" else rng.gauss(1, 0.01)
    sweep = [{"bytes": b, "busbw_gbps": round(470 * scale * b / (b + (24 << 20)) + 2, 3),
              "algbw_gbps": 0.0, "time_us": 0.0, "iters": 20, "wrong_elements": 0}
             for b in SIZES]
    inter = {"group": {"nodes": group, "sweep": sweep[-4:], "bytes": SIZES[-1],
                       "busbw_gbps": 381.0}, "pairs": [], "wrong_elements": 0}
    return [health, _record(node, "sdc", {"devices": sdc_devs}),
            _burn(node, i, tel, kind, samples),
            _record(node, "storage", {"devices": streams, "figures": {"path": "/mnt/data",
                                                                      "direct": True}}),
            _record(node, "allreduce", {"devices": [], "figures": {"world": 8, "sweep": sweep}}),
            _record(node, "allreduce_internode", {"devices": [], "figures": inter})]


MESSAGES = {
    "thermal": ("burn", "cuda:3 (NVIDIA H100 80GB HBM3): clock event hw_thermal_slowdown in "
                        "300 of 600 samples; temperature reached 88 C, at or above 87 C"),
    "straggler": ("burn", "cuda:5 (NVIDIA H100 80GB HBM3): straggler: 561.6 TFLOPS, below "
                          "0.9 x 702.0 TFLOPS, the median of the run's devices of this model"),
    "sdc": ("sdc", "cuda:2: 2 wrong elements in product 1873 (rows 1234, 1235; column 4097)"),
    "storage": ("storage", "stream 6: read 0.900 GB/s, below the floor of 2 GB/s per GPU"),
    "allreduce": ("allreduce", "intra-node busbw 276.3 GB/s at 1024 MiB (8 ranks), below "
                               "the floor of 460 GB/s"),
    "health": ("health", "driver 535.129.03 differs from the fleet's 550.90.07"),
    "malformed": ("burn", "probe burn output has the wrong shape: cuda:0 tflops is not a "
                          "number"),
}
CHECKS = ("health", "sdc", "burn", "storage", "allreduce", "allreduce_internode")


def synthetic_run(run_dir: Path, nodes: int, samples: int = 600, failing: int | None = None,
                  kinds=KINDS, seed: int = 1, run_id: str | None = None,
                  group_names: int | None = None) -> tuple[dict, list[Node]]:
    """Write results.jsonl and junit.xml of a synthetic run; return (verdicts, nodes).
    `group_names` caps the inter-node group's member list in every record (see main)."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    names = [f"gpu{i + 1:05d}" for i in range(nodes)]
    inventory = [Node(n, f"10.42.{i // 250}.{i % 250 + 1}", labels={"rack": f"r{i // 32 + 1:03d}"})
                 for i, n in enumerate(names)]
    count = max(1, round(nodes * 0.03)) if failing is None else failing
    plan = {round((k + 0.5) * nodes / count): kinds[k % len(kinds)] for k in range(count)}
    tel = Telemetry(rng, samples)
    group = names[:group_names] if group_names else names
    verdicts = {}
    keeping = 0.0
    with open(run_dir / "results.jsonl", "w", encoding="utf-8") as f, \
            open(run_dir / KEPT, "w", encoding="utf-8") as k:
        for i, node in enumerate(names):
            kind = plan.get(i, "")
            v = {c: ("passed", "") for c in CHECKS}
            if kind == "unreachable":
                v = {c: ("failed", f"connection refused by {inventory[i].address}:22")
                     for c in CHECKS}
            else:
                for r in _node_records(node, i, kind, tel, samples, group, rng):
                    r["run_id"] = run_id or run_dir.name
                    f.write(json.dumps(r) + "\n")
                    began = time.process_time()
                    k.write(kept_line(r))
                    keeping += time.process_time() - began
            if kind in MESSAGES:
                check, message = MESSAGES[kind]
                v[check] = ("error" if kind == "malformed" else "failed", message)
            verdicts[node] = v
    cases = {(n, c): CaseResult(n, c, o, m)
             for n, v in verdicts.items() for c, (o, m) in v.items()}
    write_junit(run_dir / "junit.xml", "synthetic", run_id or run_dir.name,
                [(n.name, n.address) for n in inventory], cases)
    KEEPING[run_dir.name] = keeping
    return verdicts, inventory


KEEPING: dict[str, float] = {}   # run directory name -> CPU s spent on its kept lines


def forked_publish(run: Path, verdicts: dict, inventory: list[Node]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS in KiB) of one publish, in a forked process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: publish, say how long, and leave without cleanup
        os.close(read)
        began, cpu = time.monotonic(), time.process_time()
        publish(run, "synthetic", run.name, verdicts, floors(verdicts), nodes=inventory)
        os.write(write, f"{time.monotonic() - began} {time.process_time() - cpu}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        wall, cpu = map(float, f.read().split())
    _, _, usage = os.wait4(pid, 0)
    return wall, cpu, usage.ru_maxrss


def chromium_times(page: Path, work: Path, open_node: str) -> dict:
    """render: ms from navigation to the first frame after the load event; open: ms from
    asking for a node's section (its #n-NODE link, as a click on its tile does) to the
    section in the page. Both taken inside the page, by a script appended to a copy."""
    probe = work / "timed.html"
    shutil.copy(page, probe)
    with open(probe, "a", encoding="utf-8") as f:
        f.write("<script>addEventListener('load',()=>requestAnimationFrame(()=>setTimeout(()=>{"
                "const r=performance.now();document.title='render='+r.toFixed(0);"
                f"location.hash='n-{open_node}';const w=setInterval(()=>{{if(document."
                f"getElementById('n-{open_node}')){{clearInterval(w);document.title+=' open='+"
                "(performance.now()-r).toFixed(0)}},2)},0)))</script>")
    res = subprocess.run(CHROMIUM + [f"--user-data-dir={work / 'profile'}",
                                     "--virtual-time-budget=20000", "--dump-dom",
                                     probe.as_uri()],
                         capture_output=True, text=True, timeout=300)
    title = re.search(r"<title>([^<]*)</title>", res.stdout)
    figures = dict(kv.split("=") for kv in (title.group(1).split() if title else [])
                   if "=" in kv)
    return {k: float(v) for k, v in figures.items()}


def _median_of(timings: list[dict], name: str) -> float:
    """The median of the loads that measured `name`. Now and then --virtual-time-budget
    runs out before the page's first frame after load and Chromium dumps the page with no
    figure (seen on the page before and after 2026-11-28's changes): a NaN among the
    samples would make statistics.median's answer depend on where it fell."""
    got = [t[name] for t in timings if name in t]
    return statistics.median(got) if got else float("nan")


def screenshot_s(url: str, work: Path, shot: Path) -> float:
    began = time.monotonic()
    subprocess.run(CHROMIUM + [f"--user-data-dir={work / 'profile'}", "--window-size=1400,1800",
                               f"--screenshot={shot}", url], capture_output=True, timeout=300)
    return time.monotonic() - began


def built(work: Path, nodes: int, samples: int, earlier: int) -> tuple[dict, list[Node], float]:
    """The synthetic runs under work/reports, earlier ones published: (verdicts,
    inventory, seconds the run took to make). Kept in `work` (synthetic.json) and read
    back when there: 25,000 nodes take minutes to make, which a page's change never needs."""
    reports, saved = work / "reports", work / "synthetic.json"
    run = reports / "20261122T120000Z-now"
    if saved.exists():
        kept = json.loads(saved.read_text())
        KEEPING[run.name] = kept["keeping"]
        return ({n: {c: tuple(v) for c, v in checks.items()}
                 for n, checks in kept["verdicts"].items()},
                [Node(n, a, labels=labels) for n, a, labels in kept["inventory"]], kept["made"])
    cap = 64 if nodes > 2000 else None
    for k in range(earlier):  # earlier runs of the cluster, published, for the trend
        past = reports / f"20261121T{k:02d}0000Z-e{k}"
        verdicts, inventory = synthetic_run(past, nodes, samples, seed=10 + k, group_names=cap)
        forked_publish(past, verdicts, inventory)  # what it held never counts in ours
    began = time.monotonic()
    verdicts, inventory = synthetic_run(run, nodes, samples, group_names=cap)
    made = time.monotonic() - began
    saved.write_text(json.dumps({
        "verdicts": verdicts, "made": made, "keeping": KEEPING.get(run.name, 0.0),
        "inventory": [[n.name, n.address, dict(n.labels)] for n in inventory]}))
    return verdicts, inventory, made


def measure(nodes: int, samples: int, repeat: int, earlier: int, out: Path,
            keep: Path | None = None) -> dict:
    if keep is None:
        work = Path(tempfile.mkdtemp(prefix=f"summary{nodes}-", dir=out))
    else:
        work = keep / f"summary{nodes}-{samples}-e{earlier}"
        work.mkdir(parents=True, exist_ok=True)
    reports = work / "reports"
    run = reports / "20261122T120000Z-now"
    verdicts, inventory, made = built(work, nodes, samples, earlier)
    held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    runs = [forked_publish(run, verdicts, inventory) for _ in range(repeat)]
    wrote, wrote_cpu, peak = (statistics.median(r[i] for r in runs) for i in range(3))
    page = run / "summary.html"
    # A kept folder's Chromium profile remembers the last call's screenshots' window
    # (1400 x 1800), which render would then be measured in: each call starts a new one.
    shutil.rmtree(work / "profile", ignore_errors=True)
    passing = next(n for n, v in verdicts.items()
                   if all(o == "passed" for o, _ in v.values()))
    inside = [chromium_times(page, work, passing) for _ in range(repeat)]
    blank = work / "blank.html"
    blank.write_text("<!doctype html><title>blank</title>")
    shots = [screenshot_s(page.as_uri(), work, out / f"summary_{nodes}.png")
             - screenshot_s(blank.as_uri(), work, work / "blank.png") for _ in range(repeat)]
    result = {"nodes": nodes, "samples": samples, "earlier_runs": earlier,
              "results_jsonl_mb": (run / "results.jsonl").stat().st_size / 1e6,
              "page_mb": page.stat().st_size / 1e6, "generate_s": made, "publish_s": wrote,
              "publish_cpu_s": wrote_cpu, "publish_peak_mib": peak / 1024,
              "benchmark_mib": held / 1024, "kept_cpu_s": KEEPING.get(run.name, 0.0),
              "load": os.getloadavg()[0],
              "render_ms": _median_of(inside, "render"), "open_ms": _median_of(inside, "open"),
              "unmeasured": sum("render" not in t for t in inside),
              "screenshot_s": statistics.median(shots),
              "screenshot": str(out / f"summary_{nodes}.png")}
    if keep is None:
        shutil.rmtree(reports)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", action="append", default=[],
                   help="N or N:SAMPLES (telemetry samples per GPU, default 600); repeatable")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--earlier", type=int, default=2, help="earlier runs for the trend")
    p.add_argument("--out", default=tempfile.gettempdir(), help="where screenshots go")
    p.add_argument("--keep", metavar="DIR", help="make the synthetic runs in DIR and keep "
                   "them; a later call with the same DIR and sizes publishes and renders "
                   "them again without making them")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in args.nodes or ["1000", "10000:60"]:
        n, _, s = spec.partition(":")
        results.append(measure(int(n), int(s or 600), args.repeat, args.earlier, out,
                               Path(args.keep) if args.keep else None))
        print(f"done {spec}", file=sys.stderr, flush=True)
    for r in results:
        print(f"summary.html {r['nodes']} nodes x 8 GPUs, {r['samples']} samples/GPU, "
              f"{r['earlier_runs']} earlier runs: results.jsonl {r['results_jsonl_mb']:.0f} MB, "
              f"page {r['page_mb']:.2f} MB, publish {r['publish_s']:.1f} s ("
              f"{r['publish_cpu_s']:.1f} s CPU, load {r['load']:.1f}, peak RSS "
              f"{r['publish_peak_mib']:.0f} MiB of which {r['benchmark_mib']:.0f} the "
              f"benchmark's), kept during the run {r['kept_cpu_s']:.1f} s CPU, render "
              f"{r['render_ms']:.0f} ms, open a lazy section {r['open_ms']:.0f} ms, screenshot "
              f"{r['screenshot_s']:.2f} s over a blank page; {r['screenshot']}"
              + (f"; {r['unmeasured']} load(s) unmeasured" if r["unmeasured"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

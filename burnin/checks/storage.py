"""The storage check's judge: every GPU can be fed, and every block read back is the
block written. An integrity error fails the node whatever the speed."""

from __future__ import annotations

import statistics
from dataclasses import replace

from burnin.checks.base import (
    DEVICE_COUNT,
    Check,
    Figure,
    Judging,
    Kind,
    Measure,
    Setting,
    count_problem,
    timeout,
)
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, Int, List, Num, Obj, Scalar, Str, document


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    settings = j.settings
    if not outcome.ok:
        return Verdict(node.name, "storage", (outcome.reason,))
    data = outcome.data
    fig = data["figures"]
    failures = list(data["errors"])
    if j.devices is not None:  # one stream per GPU; per CPU device, or `streams`, else
        want = j.devices if j.gpus or j.devices > 1 else settings.get("streams", 4)
        failures += count_problem(data["devices"], replace(j, devices=want))
    warnings = []
    bad = fig.get("integrity_errors", 0)
    if bad:
        examples = [b for d in data["devices"] for b in d.get("bad_blocks", [])]
        ex = examples[0] if examples else {}
        failures.append(f"{bad} blocks read back wrong, e.g. stream {ex.get('stream')} at "
                        f"offset {ex.get('offset')} of {ex.get('file')}: {ex.get('problem')}; "
                        "expected every block as written")
    if fig.get("direct") is False:
        warnings.append(f"storage at {fig.get('path')}: {fig.get('direct_reason')}")
    unit = "GPU" if fig.get("gpus") else "stream"
    fraction = settings.get("stream_fraction", 0.5)
    floors = {}
    for phase in ("read", "write"):
        floor = settings.get(f"min_{phase}_gbps_per_gpu")
        if floor is not None:
            floors[f"storage {phase}"] = floor
        rates = [(d["stream"], d[phase]["gbps"]) for d in data["devices"] if d.get(phase)]
        if not rates:
            continue
        median = statistics.median(r for _, r in rates)
        for stream, rate in rates:
            where = f"stream {stream} ({unit} {stream})" if unit == "GPU" else f"stream {stream}"
            if floor is not None and rate < floor:
                failures.append(f"{where}: {phase} {rate:.3f} GB/s, below the floor of "
                                f"{floor:g} GB/s per GPU")
            elif len(rates) > 1 and rate < fraction * median:
                failures.append(f"{where}: {phase} {rate:.3f} GB/s, below {fraction:g} x "
                                f"{median:.3f} GB/s, the node's median stream")
    return Verdict(node.name, "storage", tuple(failures), tuple(warnings), floors=floors)


def figures(record: dict) -> list[Figure]:
    out = []
    for dev in record["data"]["devices"]:
        for phase in ("read", "write"):
            if dev.get(phase):
                out.append(Figure("storage_gbps", (("stream", str(dev.get("stream"))),
                                                   ("phase", phase)),
                                  dev[phase]["gbps"],
                                  "Storage throughput per stream (one per GPU)"))
    return out


PHASE = Obj(bytes=COUNT, seconds=Num(0), gbps=Num(0, 1e4), null=True)
SUMMARY = Obj(bytes=COUNT, seconds=Num(0), gbps=Num(0, 1e5), per_gpu_min=Num(0, 1e4),
              per_gpu_median=Num(0, 1e4), per_gpu_aggregate=Num(0, 1e4))
DEVICE = Obj(stream=Int(0, 1023), gpu=Int(0, 1023, null=True), file=Str(4096),
             write=PHASE, read=PHASE, integrity_errors=COUNT,
             bad_blocks=List(Obj(stream=COUNT, file=Str(4096), offset=COUNT,
                                 problem=Str(4096)), max=64))
SCHEMA = document(DEVICE, Obj(path=Str(4096), gpus=Int(0, 1024), streams=Int(0, 1024),
                              direct=Bool(), direct_reason=Str(4096), write=SUMMARY,
                              read=SUMMARY, integrity_errors=COUNT, filesystem=Obj(
                                  values=Scalar())))

STORAGE_GBPS = Measure("storage_gbps", "GB/s", "storage {phase} GB/s, slowest stream",
                       "storage {phase} stream {stream}", key="storage {phase}",
                       chart="storage: {phase} GB/s per stream (one per GPU)", speed=True)
CHECK = Check(
    name="storage", page="burnin.report.summary.checks:storage", page_order=50,
    measures=(STORAGE_GBPS,),
    doc="every GPU can be fed", judge=judge, schema=SCHEMA, figures=figures,
    failure_kinds=(DEVICE_COUNT,),
    settings={
        "timeout_s": timeout(300, 900, 1800),
        "size_gb": Setting("positive", {"quick": 1, "standard": 4, "extended": 16},
                           "per stream; large enough to defeat caches"),
        "duration_s": Setting("positive", None, "time-based writes instead of size_gb"),
        "block_mb": Setting("int", 4),
        "iodepth": Setting("int", 4, "requests in flight per stream"),
        "streams": Setting("int", 4, "streams on a CPU-only node (one per GPU otherwise)"),
        "verify": Setting(Kind(lambda v: v in ("inline", "after"), "inline or after"), "inline",
                          "inline (timed) or after (untimed)"),
        "min_read_gbps_per_gpu": Setting("number", None, "floor for the slowest stream"),
        "min_write_gbps_per_gpu": Setting("number", None),
        "stream_fraction": Setting("fraction", 0.5,
                                   "fail a stream below this share of the node's median"),
    })

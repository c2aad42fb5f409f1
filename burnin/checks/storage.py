"""The storage check's judge: every GPU can be fed, and every block read back is the
block written. An integrity error fails the node whatever the speed."""

from __future__ import annotations

import statistics

from burnin.inventory import Node
from burnin.probe import ProbeOutcome
from burnin.verdict import Verdict


def judge(node: Node, outcome: ProbeOutcome, settings: dict) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "storage", (outcome.reason,))
    data = outcome.data
    fig = data["figures"]
    failures = list(data["errors"])
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
    for phase in ("read", "write"):
        floor = settings.get(f"min_{phase}_gbps_per_gpu")
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
    return Verdict(node.name, "storage", tuple(failures), tuple(warnings))

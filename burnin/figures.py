"""The key figures of a probe record (a results.jsonl line), in one place: metrics.prom,
summary.html and `burnin compare` all read them from here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Figure:
    metric: str            # Prometheus name, without the burnin_ prefix
    labels: tuple          # ((name, value), ...) besides cluster and node
    value: float
    help: str


def read_records(path: Path) -> list[dict]:
    """results.jsonl, skipping a torn last line (a run killed mid-write)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def key_figures(record: dict) -> list[Figure]:
    if not record.get("ok"):
        return []
    data, check = record.get("data") or {}, record["check"]
    fig = data.get("figures") or {}
    out: list[Figure] = []
    for dev in data.get("devices") or []:
        device = str(dev.get("device", dev.get("stream", "?")))
        if check == "burn" and dev.get("tflops") is not None:
            out.append(Figure("device_tflops", (("check", "burn"), ("device", device)),
                              dev["tflops"], "Sustained GEMM TFLOPS per device"))
            temps = [t for t in ((dev.get("telemetry") or {}).get("series") or {})
                     .get("temp_c", []) if t is not None]
            if temps:
                out.append(Figure("gpu_temperature_max_celsius", (("device", device),),
                                  max(temps), "Hottest GPU temperature during the burn"))
        if check == "sdc" and (dev.get("known") or {}).get("tflops") is not None:
            out.append(Figure("device_tflops", (("check", "sdc"), ("device", device)),
                              dev["known"]["tflops"], "Sustained GEMM TFLOPS per device"))
        if check == "storage":
            for phase in ("read", "write"):
                if dev.get(phase):
                    out.append(Figure("storage_gbps", (("stream", device), ("phase", phase)),
                                      dev[phase]["gbps"], "Storage GB/s per stream (per GPU)"))
    if check == "allreduce" and fig.get("sweep"):
        top = fig["sweep"][-1]
        out.append(Figure("allreduce_busbw_gbps",
                          (("scope", "intra"), ("bytes", str(top["bytes"]))),
                          top["busbw_gbps"], "All-reduce busbw at the judged size, GB/s"))
    if check == "allreduce_internode" and fig.get("group"):
        g = fig["group"]
        out.append(Figure("allreduce_busbw_gbps",
                          (("scope", "inter"), ("bytes", str(g["bytes"]))),
                          g["busbw_gbps"], "All-reduce busbw at the judged size, GB/s"))
    return out

"""The train job the controller sent, and what a node's document says it ran.

A node's document is its word: a node that changed `figures.job` or `shape`, or left its
digest out, would find itself alone in a job of its own and escape every comparison
with its peers (tokens/s, the fleet's digest). So the job a node is judged on is the one
the controller sent it (its settings: steps, warm-up, learning rate, dtype, world, every
model dimension the inventory gives), and its document must say it ran exactly that:
its job id the SHA-256 of its job spec (as probes/train.py computes it), the spec's sent
fields the ones sent, its figures those of its spec, its digest its ranks'. What the
controller cannot know (a model dimension sized from the device, threads, torch, CUDA)
comes from the document, and a node alone in its job while at least PEERS nodes were
sent the same one fails: its figures have no peers and its digest no consensus.

MFU is over the GPU model's dense peak in the dtype the job ran (gpu_models.yaml's
`peak_tflops` is the dense BF16 tensor-core peak, and the table holds no other): where
the table has no peak for that dtype, MFU is not judged, and the verdict says so.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from burnin.checks.base import Judging
from burnin.model.gpu_reference import GpuModel

SHAPE_KEYS = ("d_model", "layers", "heads", "seq_len", "vocab", "batch")
# The job spec's fields the controller decides (probes/train.py: node_figures), besides
# the shape's dimensions the settings give.
SENT = ("steps", "warmup_steps", "lr", "dtype", "world")
# Each dtype's dense peak in the GPU model table (burnin/data/gpu_models.yaml): its
# `peak_tflops` is the BF16 tensor-core peak without sparsity; it has no FP32 peak.
PEAK_FIELD = {"bf16": "peak_tflops"}


def job_id(spec: dict) -> str:
    """A job spec's id, as probes/train.py computes it."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def sent_job(settings: dict, gpus: int | None, devices: int | None) -> dict[str, Any]:
    """What the controller decided of the job it sent a node with these settings: the
    probe's own defaults applied (probes/train.py, traincore.train), a field left out
    where what the node runs decides it (a shape dimension sized from the device; the
    dtype or world of a node whose GPUs or devices are unknown)."""
    out: dict[str, Any] = {}
    for key in ("steps", "warmup_steps"):
        if settings.get(key) is not None:
            out[key] = int(settings[key])
    if settings.get("lr") is not None:
        out["lr"] = float(settings["lr"])
    if settings.get("dtype"):
        out["dtype"] = settings["dtype"]
    elif gpus is not None:
        out["dtype"] = "bf16" if gpus else "fp32"
    if devices is not None:
        out["world"] = devices if gpus or devices > 1 else int(settings.get("ranks") or 2)
    shape = {k: int(settings[k]) for k in SHAPE_KEYS if settings.get(k)}
    if shape:
        out["shape"] = shape
    return out


def peer_class(settings: dict, model: GpuModel | None, devices: int | None,
               cpu: str | None = None) -> str:
    """Nodes the controller sent the same job: the same settings of the job, GPU model
    and device count; on a CPU-only node, of the same CPU (`cpu`, its ranks' device name:
    the inventory names no CPU model, and CPUs of two kinds round differently, so an
    honest fleet of two kinds runs two jobs). A node alone in its job among PEERS or more
    of these fails."""
    mine = {k: settings.get(k) for k in (*SENT, *SHAPE_KEYS, "ranks")}
    return json.dumps([mine, model.key if model else None, devices, cpu], sort_keys=True,
                      default=str)


def job_problems(fig: dict, devices: list[dict], sent: dict) -> list[str]:
    """Why the document's job is not the one the controller sent (empty: it is)."""
    spec, job, digest = fig.get("job_spec"), fig.get("job"), fig.get("digest")
    missing = [k for k, v in (("job", job), ("job_spec", spec), ("digest", digest)) if not v]
    if missing:
        return [f"its document names no {' or '.join(missing)}: the job it ran and its "
                "final parameters cannot be judged against the one the controller sent"]
    assert isinstance(spec, dict)  # the schema's Obj
    out = []
    if job != job_id(spec):
        out.append(f"its job id {str(job)[:12]} is not its job spec's ({job_id(spec)[:12]})")
    for key, want in sent.items():
        if key == "shape":
            ran = {k: (spec.get("shape") or {}).get(k) for k in want}
            if ran != want:
                out.append(f"its model shape {ran} differs from the {want} the controller sent")
        elif spec.get(key) != want:
            out.append(f"its job's {key} {spec.get(key)!r} differs from the {want!r} the "
                       "controller sent")
    for key in ("shape", "steps", "warmup_steps", "dtype", "world"):
        if key in fig and fig[key] != spec.get(key):
            out.append(f"its figures' {key} {fig[key]!r} differs from its job's "
                       f"{spec.get(key)!r}")
    name = devices[0].get("name") if devices else None
    if spec.get("device") != name:
        out.append(f"its job's device {spec.get('device')!r} is not its ranks' {name!r}")
    ranks = {d.get("digest") for d in devices}
    if len(ranks) == 1 and digest not in ranks:
        out.append(f"its digest {str(digest)[:12]} is not its ranks' "
                   f"{str(next(iter(ranks)))[:12]}")
    return ["its document's job differs from the one the controller sent: " + "; ".join(out)] \
        if out else []


def peak(j_settings: dict, model: GpuModel | None, dtype: str | None) -> tuple[float | None, str]:
    """The dense peak per device of the job's dtype (the inventory's `peak_tflops`, else
    the GPU model table's), with the words for it; (None, why) where there is none."""
    field = PEAK_FIELD.get(str(dtype))
    value = j_settings.get("peak_tflops") or \
        (getattr(model, field, None) if model is not None and field else None)
    if value:
        return float(value), f"the {value:g} TFLOPS dense {str(dtype).upper()} peak per device"
    if model is None and j_settings.get("min_mfu") is None:
        return None, ""  # no model, no floor: nothing to say
    what = model.key if model is not None else "a GPU of no known model"
    return None, (f"MFU not judged: the GPU model table has no dense {str(dtype).upper()} "
                  f"peak for {what} (checks.train.peak_tflops sets one)")


def mfu(fig: dict, devices: list[dict], j: Judging) -> tuple[float | None, str]:
    """The node's MFU and what it is over: on a GPU node, the GPU model's datasheet peak
    per device in the job's dtype ((None, why) where the table has none: not judged); on
    a CPU node, the GEMM rate the probe measured in the training's compute type."""
    if j.gpus != 0:
        value, words = peak(j.settings, j.model, fig.get("dtype"))
        if value is None or not devices:
            return None, words
        return fig.get("model_tflops", 0.0) / len(devices) / value, f"of {words}"
    if isinstance(fig.get("mfu"), (int, float)):
        return fig["mfu"], (f"of the node's own measured GEMM rate, "
                            f"{fig.get('gemm_tflops', 0):.4g} TFLOPS")
    return None, ""

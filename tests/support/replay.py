"""A node whose probes answer with recorded documents: the controller's tests without the
cost of the probes.

`replay_python(path)` writes an executable to use as a node's `python:`. Given a probe
(`probes/<check>.py`), it reads the controller's settings as the probe would, keeps the
real lifeline (probes/probelib.py: it stops when the controller goes), and prints the
honest document recorded for that check (tests/corpus/, on a CPU node or two emulated
GPUs), shaped to what the controller asked: the node's device count, the storage streams,
an all-reduce group's ranks. It imports no torch, so a run of the whole suite on three
nodes takes a second or two instead of a minute of `import torch`.

An inter-node group goes through the real rendezvous (probes/allreduce.py hello), but no
data moves: a fault in the network between nodes (a rate limit, a host that cannot open
connections back out) needs the real probes (tests/test_allreduce.py).

What a probe itself does (its measurements, faults planted below it) is tested where the
real probes run (tests/test_sdc.py, test_burn.py, test_storage.py, ...); what the
controller makes of documents (verdicts, reports, the ledger, admission, blame) is
tested here, on the documents the real probes print.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
SITE = Path(__file__).resolve().parent.parent / "replay_site"


def replay_python(path: Path, delay_s: float = 0.0, real: tuple[str, ...] = (),
                  python: str = sys.executable, real_in_groups: tuple[str, ...] = ()) -> str:
    """Write, at `path`, an executable to use as a node's `python:` whose probes replay
    (tests/replay_site): directly, over SSH, and under srun's bootstrap. `delay_s`: seconds
    each probe waits, lifeline held, before it answers (a probe that takes a while);
    `real`: the probes that run for real; `real_in_groups`: those that run for real as
    members of an inter-node group and replay on their own (a real group moves real data
    between real members); `python`: the interpreter it runs (another wrapper, such as
    the NVML emulator's)."""
    site = shlex.quote(str(SITE))
    path.write_text("#!/bin/sh\n"
                    f"PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                    f"BURNIN_REPLAY=1 BURNIN_REPLAY_DELAY_S={delay_s!r} "
                    f"BURNIN_REPLAY_REAL={shlex.quote(','.join(real))} "
                    f"BURNIN_REPLAY_REAL_IN_GROUPS={shlex.quote(','.join(real_in_groups))}\n"
                    "export PYTHONPATH BURNIN_REPLAY BURNIN_REPLAY_DELAY_S BURNIN_REPLAY_REAL "
                    "BURNIN_REPLAY_REAL_IN_GROUPS\n"
                    f"exec {shlex.quote(python)} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def _resize(devices: list[dict], n: int, gpu: bool) -> list[dict]:
    if not devices:
        return []
    out = []
    for i in range(n):
        d = copy.deepcopy(devices[i % len(devices)])
        if "device" in d and d["device"] is not None:
            if gpu:
                d["device"] = str(i) if str(d["device"]).isdigit() else f"cuda:{i}"
            else:
                d["device"] = "cpu" if n == 1 else f"cpu:{i}"
        if "index" in d:
            d["index"] = i
        if d.get("uuid"):
            d["uuid"] = f"GPU-replay-{i}"
        out.append(d)
    return out


def document(probe: str, payload: dict) -> dict:
    """The recorded document of `probe`, shaped to the controller's `payload`."""
    gpus = payload.get("gpus") or 0
    settings = payload.get("settings") or {}
    doc = json.loads((CORPUS / f"{probe}.{'gpu' if gpus else 'cpu'}.json").read_text())
    devices = gpus or payload.get("cpu_devices") or 1
    if probe == "storage":
        streams = devices if gpus or devices > 1 else settings.get("streams", 4)
        doc["devices"] = [dict(copy.deepcopy(doc["devices"][i % len(doc["devices"])]),
                               stream=i) for i in range(streams)]
        doc["figures"]["gpus"] = gpus
    elif probe in ("allreduce", "collectives"):
        group = payload.get("group")
        # As probes/allreduce.py: one rank per GPU or CPU device, `ranks` (2) on a node of
        # one CPU device; in a group, what the controller gives the node, or with one task
        # per rank (a Slurm step) this task's rank alone.
        alone = devices if gpus or devices > 1 else int(settings.get("ranks", 2))
        here = group["ranks_here"] if group else alone
        first = group["rank_offset"] if group else 0
        if group and group.get("per_task"):
            first, here = first + int(os.environ.get("SLURM_LOCALID", "0")), 1
        doc["devices"] = [dict(copy.deepcopy(doc["devices"][0]), rank=first + i)
                          for i in range(here)]
        doc["figures"].update(world=group["world"] if group else here, first_rank=first,
                              ranks_here=here, mode="inter-node" if group else "intra-node")
    elif probe == "train":
        # As probes/train.py: one rank per GPU or CPU device, `ranks` (2) on a node of one;
        # in a group (train_internode), what the controller gives the node, from its
        # first rank on.
        group = payload.get("group")
        ranks = group["ranks_here"] if group else \
            devices if gpus or devices > 1 else int(settings.get("ranks", 2))
        first = group["rank_offset"] if group else 0
        label = (lambda i: f"cuda:{i}") if gpus else (
            (lambda i: "cpu") if devices == 1 else (lambda i: f"cpu:{i}"))
        # Every rank as the first: a recording's rank times on this loaded machine may
        # differ enough to make one a straggler.
        doc["devices"] = [dict(copy.deepcopy(doc["devices"][0]), rank=first + i,
                               device=label(i)) for i in range(ranks)]
        for d in doc["devices"]:
            if gpus:
                d["uuid"] = f"GPU-replay-{d['rank']}"
        world = group["world"] if group else ranks
        doc["figures"].update(world=world, ranks_here=ranks)
        # The job it was sent, its id its spec's SHA-256 (probes/train.py: node_figures):
        # the controller judges a document on the job it sent (burnin/checks/train_job.py).
        spec = doc["figures"]["job_spec"]
        spec.update(world=world, steps=int(settings.get("steps", 20)),
                    warmup_steps=int(settings.get("warmup_steps", 3)),
                    lr=float(settings.get("lr", 3e-3)),
                    dtype=settings.get("dtype") or ("bf16" if gpus else "fp32"),
                    shape={k: int(settings.get(k) or v) for k, v in spec["shape"].items()})
        doc["figures"].update({k: copy.deepcopy(spec[k]) for k in ("steps", "warmup_steps",
                                                                  "dtype", "shape")})
        doc["figures"]["job"] = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()
                                               ).hexdigest()
        if group:
            doc["figures"].update(first_rank=first, mode="inter-node")
    elif probe == "gpupairs" and gpus:
        # As probes/gpupairs.py: every ordered pair of the node's GPUs, at one speed.
        doc["devices"] = _resize(doc["devices"], devices, True)
        first = doc["figures"]["pairs"][0]
        doc["figures"]["pairs"] = [dict(first, src=f"cuda:{i}", dst=f"cuda:{j}")
                                   for i in range(gpus) for j in range(gpus) if i != j]
    elif probe in ("health", "fabric", "pcie") and not gpus:
        pass  # a CPU node's facts, ports and PCIe say no GPU: as recorded
    else:
        doc["devices"] = _resize(doc["devices"], devices, bool(gpus))
    if probe == "health" and gpus:
        torch = doc["figures"]["torch"]
        torch["device_count"] = gpus
        torch["devices"] = [dict(torch["devices"][i % len(torch["devices"])], ordinal=i,
                                 uuid=f"GPU-replay-{i}") for i in range(gpus)]
    if probe == "health":  # as probes/health.py: the commands the controller asked about
        doc["figures"]["tools"] = {check: {"command": str(cmd), "path": shutil.which(str(cmd))}
                                   for check, cmd in (payload.get("tools") or {}).items()}
    doc["node"]["hostname"] = socket.gethostname()  # as the real probes: where it ran
    return doc


def main(argv: list[str], delay_s: float = 0.0) -> int:
    probe_path = Path(argv[0])
    sys.path.insert(0, str(probe_path.parent))
    import probelib  # the real payload reading and lifeline; torch is never imported

    payload = probelib.start(__doc__, probe_path.stem)
    if payload is None:
        return 0
    if delay_s:
        time.sleep(delay_s)
    doc = document(probe_path.stem, payload)
    group = payload.get("group")
    if group:  # the real rendezvous (stdlib only): a node that cannot meet the others fails
        import allreduce
        timeout_s = float((payload.get("settings") or {}).get("rendezvous_timeout_s", 60))
        problems = allreduce.hello(group, payload.get("node", ""), timeout_s,
                                   master=doc["figures"]["first_rank"] == 0
                                   if group.get("per_task") else None)
        if problems:
            doc.update(devices=[], errors=problems)
            doc["figures"].pop("sweep", None)
            doc["figures"]["joined"] = False
    probelib.emit(doc["probe"], doc["node"], doc["devices"], doc["figures"], doc["errors"])
    return 0

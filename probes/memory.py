#!/usr/bin/env python3
"""burnin memory probe: every byte of device memory holds what was written.

Runs ON a node, one worker per device. On a GPU it takes `memory_fraction` of the free
memory in chunks (memcore.py); on a CPU-only node it tests `host_bytes` of host memory
per device. Patterns as memtests write them: walking ones and zeros over the 64 bits of
a word, the checkerboard and its inverse, address-in-address (each word holds its own
index, so an address-line fault shows), seeded random data; each written, read back and
compared on the device. The random data is read once more after a pause of
`retention_s` (retention faults). Reports bad words (count, the first offsets and
addresses, expected and found bits), verified GB/s (bytes x patterns over the time
spent writing and comparing), and on a GPU the NVML ECC, retired-page and row-remap
counters before and after (paired with the device by UUID; read before torch starts,
so the delta covers the whole probe).

    echo '{"settings": {"host_bytes": 67108864, "retention_s": 2}}' | python3 probes/memory.py

Settings (optional): memory_fraction (0.9), chunk_mb (1024), slice_mb (256 on a GPU, 64
on a CPU: the compare's unit), host_bytes, retention_s, passes (1), seed (default: from
the run id).

FOR THE PROJECT'S TESTS ONLY, in the payload's test_hooks (probelib.test_hooks: never sent
by the controller): backing_dir makes device i's region a
shared mapping of the file backing_dir/device-i, which a test corrupts from another
process; alias_pages [{"device": i, "page": p, "onto": q}] maps page p of that region
onto the file's page q too (two addresses, one memory); handshake_dir: at the retention
pause the probe writes paused-<i> there and waits for 'resume' before reading again.
"""

from __future__ import annotations

import os
import threading
import time
import zlib

import probelib
import telemetry

PROBE = "memory"
MIB = 1 << 20


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def nvml_before(payload: dict, errors: list[str]):
    """NVML's counters of every GPU, by UUID, before anything else runs (None on a CPU
    node, or where NVML is absent: then the devices' records say so)."""
    if payload.get("gpus") == 0:
        return None
    try:
        import pynvml
        pynvml.nvmlInit()
        uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as e:
        if payload.get("gpus"):
            errors.append(f"NVML unavailable, no ECC counters: {e}")
        return None
    return telemetry.GpuTelemetry(pynvml, [u.decode() if isinstance(u, bytes) else u
                                           for u in uuids])


def nvml_after(tel, record: dict) -> None:
    if tel is None or not record.get("uuid"):
        return
    d = next((d for d in tel.devices if d["uuid"] == record["uuid"]), None)
    if d is None:
        record["nvml"] = {"errors": [f"NVML does not know {record['uuid']}"]}
        return
    after = tel.counters(d) if d["handle"] is not None else {}
    record["nvml"] = {"before": d["before"], "after": after,
                      "unsupported": sorted(d["unsupported"]), "errors": d["errors"]}


def region_for(d, dev, settings: dict, hooks: dict):
    import memcore
    if hooks.get("backing_dir"):
        aliases = [(a["page"], a["onto"]) for a in hooks.get("alias_pages", [])
                   if a.get("device", 0) == d.index]
        return memcore.backed_region(os.path.join(hooks["backing_dir"], f"device-{d.index}"),
                                     int(settings["host_bytes"]), aliases)
    if dev.type == "cuda":
        slice_bytes = int(settings.get("slice_mb", 256)) * MIB
        return memcore.gpu_region(dev, float(settings.get("memory_fraction", 0.9)),
                                  int(settings.get("chunk_mb", 1024)) * MIB,
                                  reserve=2 * slice_bytes)
    return memcore.host_region(int(settings.get("host_bytes", 256 * MIB)), dev)


def handshake(hooks: dict, d) -> None:
    """Tests only: say the pause began, and wait for the test to let the probe go on."""
    where = hooks.get("handshake_dir")
    if not where:
        return
    open(os.path.join(where, f"paused-{d.index}"), "w").close()
    while not os.path.exists(os.path.join(where, "resume")):
        time.sleep(0.02)


def test_device(d, settings: dict, seed: int, hooks: dict) -> dict:
    """The whole test on one device, in its own thread."""
    import gemmcore as core
    import memcore
    import torch
    dev = core.bind(d)  # first, before anything touches the device
    record = d.describe()
    if dev.type == "cuda":
        record["memory_bytes"] = torch.cuda.get_device_properties(dev).total_memory
        record["free_bytes"] = torch.cuda.mem_get_info(dev)[0]
    region = region_for(d, dev, settings, hooks)
    if region.note:
        record["region"] = region.note
    slice_mb = settings.get("slice_mb") or (256 if dev.type == "cuda" else 64)
    tester = memcore.Tester(region, int(slice_mb) * MIB)
    record.update(bytes=region.bytes, chunks=len(region.chunks), seed=seed)
    families: dict[str, dict] = {}
    bad: list[dict] = []
    timed = 0.0
    verified = 0

    def check(p, family: str, label: str, write: bool = True) -> None:
        nonlocal timed, verified
        began = time.perf_counter()
        if write:
            tester.write(p)
        counts = tester.verify(p)
        took = time.perf_counter() - began
        timed += took
        verified += 1
        fam = families.setdefault(family, {"patterns": 0, "bad_words": 0, "seconds": 0.0})
        fam["patterns"] += 1
        fam["seconds"] += took
        if sum(counts):
            fam["bad_words"] += sum(counts)
            for ex in tester.localise(p, counts, memcore.MAX_EXAMPLES - len(bad)):
                bad.append({**ex, "pattern": label})

    last = None
    for _ in range(int(settings.get("passes", 1))):
        for p in memcore.patterns(region, seed):
            check(p, p.family, p.name)
            last = p
    retention = float(settings.get("retention_s", 0))
    if last is not None and retention > 0:
        paused = time.perf_counter()
        handshake(hooks, d)
        time.sleep(max(0.0, retention - (time.perf_counter() - paused)))
        check(last, "retention", f"{last.name}, re-read after {retention:g} s", write=False)
    tested = region.bytes
    region.close()
    for fam in families.values():
        fam["seconds"] = round(fam["seconds"], 4)
    record.update(patterns=verified, families=families, retention_s=retention,
                  bad_words=sum(f["bad_words"] for f in families.values()), bad=bad,
                  seconds=round(timed, 4),
                  verified_gbps=round(tested * verified / timed / 1e9, 4) if timed else 0.0)
    return record


def main() -> int:
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings, hooks = payload.get("settings", {}), probelib.test_hooks(payload)
    errors: list[str] = []
    tel = nvml_before(payload, errors)  # before torch and CUDA start
    import gemmcore as core
    import torch
    devs, problem = probelib.node_devices(payload)
    if problem:
        log(problem)
        probelib.emit(PROBE, {"torch": torch.__version__}, [], {}, errors + [problem])
        return 0
    core.share_cpu(devs)
    seed = int(settings.get("seed") or zlib.crc32(str(payload.get("run_id", "")).encode()))
    log(f"{len(devs)} device(s): {', '.join(d.label for d in devs)}; settings {settings}")
    started = time.time()
    out: list = [d.describe() for d in devs]

    def work(d) -> None:
        try:
            out[d.index] = test_device(d, settings, seed, hooks)
        except Exception as e:  # one device's failure is that device's result
            out[d.index]["error"] = f"{type(e).__name__}: {e}"
            log(f"{d.label}: {out[d.index]['error']}")

    threads = [threading.Thread(target=work, args=(d,)) for d in devs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for record in out:
        nvml_after(tel, record)
    errors += [f"{r['device']}: {r['error']}" for r in out if "error" in r]
    probelib.emit(PROBE, {"torch": torch.__version__}, out,
                  {"elapsed_s": round(time.time() - started, 3), "seed": seed}, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())

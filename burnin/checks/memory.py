"""The memory check's judge: every word of device memory read back as written, through
every pattern and after the retention pause, and NVML saw no ECC error, no new retired
page and no new pending row remap while the check ran."""

from __future__ import annotations

from burnin.checks.base import (
    DEVICE_COUNT,
    ECC,
    MEMORY_PATTERN,
    Check,
    Figure,
    Judging,
    Setting,
    count_problem,
    timeout,
)
from burnin.checks.base import device_name as where
from burnin.checks.burn import COUNTERS  # the same NVML counters (probes/telemetry.py)
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict, like
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, MESSAGES, List, Num, Obj, Str, document

MIB = 1 << 20
# probes/telemetry.py names each reading at the start of its error: these are not memory's.
NOT_MEMORY = ("nvlink:", "nvlink counters:", "pcie_replay:")


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "memory", (outcome.reason,))
    failures = [f"probe error on {e}" for e in outcome.data["errors"]]
    failures += count_problem(outcome.data["devices"], j)
    if not outcome.data["devices"] and not failures:
        failures.append("no device was tested")
    warnings: list[str] = []
    for dev in outcome.data["devices"]:
        if "error" in dev:
            continue  # reported with the probe's errors
        f, w = device_rules(dev, j.settings)
        failures += [like(f"{where(dev)}: {x}", x) for x in f]
        warnings += [f"{where(dev)}: {x}" for x in w]
    return Verdict(node.name, "memory", tuple(failures), tuple(warnings))


def device_rules(dev: dict, settings: dict) -> tuple[list[str], list[str]]:
    fail: list[str] = []
    warn: list[str] = []
    gib = dev.get("bytes", 0) / 2**30
    if not dev.get("bytes"):
        fail.append("no memory was tested (nothing could be allocated)")
    if dev.get("bad_words"):
        fail.append(MEMORY_PATTERN(
            f"{dev['bad_words']} words read back wrong over {dev.get('patterns')} patterns "
            f"of {gib:.3f} GiB, expected 0; {_examples(dev.get('bad', []))}"))
    nvml = dev.get("nvml") or {}
    # The memory check judges ECC, retired pages and row remaps: an NVML error reading
    # anything else the shared telemetry reads (NVLink counters, which Blackwell gives
    # only as NVLink 5 fields) says nothing about memory, and only warns.
    for e in nvml.get("errors", []):
        (warn if e.startswith(NOT_MEMORY) else fail).append(f"NVML: {e}")
    before, after = nvml.get("before") or {}, nvml.get("after") or {}

    def delta(key: str):
        if before.get(key) is None or after.get(key) is None:
            return None
        return after[key] - before[key]

    unc, corr = delta("ecc_uncorrected"), delta("ecc_corrected")
    if unc:
        fail.append(ECC(f"{unc} uncorrectable ECC errors during the memory check, expected 0"))
    limit = settings.get("max_correctable_ecc", 0)
    if corr and corr > limit:
        fail.append(f"{corr} correctable ECC errors during the memory check, above the limit "
                    f"of {limit}")
    elif corr:
        warn.append(f"{corr} correctable ECC errors during the memory check (limit {limit})")
    pages = delta("retired_pages")
    if pages:
        fail.append(ECC(f"{pages} pages retired during the memory check, expected 0"))
    rows_before, rows_after = before.get("remapped_rows") or {}, after.get("remapped_rows") or {}
    if rows_after.get("pending") and not rows_before.get("pending"):
        fail.append(ECC("a row remap became pending during the memory check, expected none"))
    if rows_after.get("failed") and not rows_before.get("failed"):
        fail.append(ECC("a row remap failed during the memory check"))
    return fail, warn


def _examples(bad: list[dict]) -> str:
    if not bad:
        return "none could be located again (transient)"
    shown = []
    for ex in bad[:3]:
        alias = (f", which holds the index of the word at offset {ex['holds_index_of_offset']:#x}"
                 " (an address alias)" if "holds_index_of_offset" in ex else "")
        shown.append(f"{ex['pattern']} at offset {ex['offset']:#x} (address {ex['address']}): "
                     f"expected {ex['expected']}, found {ex['found']} (bits "
                     f"{','.join(map(str, ex['bits']))}){alias}")
    more = f"; {len(bad) - 3} more located" if len(bad) > 3 else ""
    return "e.g. " + "; ".join(shown) + more


def _labels(dev: dict) -> tuple:
    return (("device", str(dev.get("device"))),)  # metrics.prom adds the GPU's UUID


def figures(record: dict) -> list[Figure]:
    out = []
    for dev in record["data"]["devices"]:
        if "error" in dev or "bytes" not in dev:
            continue
        labels = _labels(dev)
        out += [Figure("memory_bad_words", labels, dev["bad_words"],
                       "Words of device memory read back wrong in the memory check"),
                Figure("memory_tested_bytes", labels, dev["bytes"],
                       "Bytes of device memory the memory check tested"),
                Figure("memory_verified_gbps", labels, dev["verified_gbps"],
                       "Device memory written, read back and compared per second")]
        nvml = dev.get("nvml") or {}
        before, after = nvml.get("before") or {}, nvml.get("after") or {}
        for kind in ("corrected", "uncorrected"):
            key = f"ecc_{kind}"
            if before.get(key) is not None and after.get(key) is not None:
                out.append(Figure("memory_ecc_errors", (*labels, ("type", kind)),
                                  after[key] - before[key],
                                  "ECC errors NVML counted during the memory check"))
    return out


def evidence(record: dict) -> dict[str, object]:
    return {"memory_errors.json": {
        str(d.get("device")): {"uuid": d.get("uuid"), "bad_words": d.get("bad_words"),
                               "bad": d.get("bad"), "families": d.get("families"),
                               "nvml": d.get("nvml"), "error": d.get("error")}
        for d in record["data"]["devices"]}}


BAD = Obj(required=("pattern", "offset", "address", "expected", "found", "bits"),
          pattern=Str(256), offset=COUNT, address=Str(32), expected=Str(32), found=Str(32),
          bits=List(Num(0, 63, integer=True), max=64), holds_index_of_offset=COUNT)
FAMILY = Obj(patterns=COUNT, bad_words=COUNT, seconds=Num(0))
DEVICE = Obj(device=Str(64), name=Str(256, null=True), uuid=Str(256, null=True),
             bytes=COUNT, chunks=COUNT, patterns=COUNT, bad_words=COUNT,
             bad=List(BAD, max=64), families=Obj(values=FAMILY), retention_s=Num(0),
             seconds=Num(0), verified_gbps=Num(0, 1e5), region=Str(4096),
             nvml=Obj(before=COUNTERS, after=COUNTERS, unsupported=MESSAGES,
                      errors=MESSAGES), error=Str(4096))
SCHEMA = document(DEVICE, Obj(elapsed_s=Num(0), seed=COUNT))

CHECK = Check(
    name="memory", page_order=30,
    doc="every byte of GPU memory holds what was written", judge=judge,
    schema=SCHEMA, figures=figures, evidence=evidence,
    failure_kinds=(MEMORY_PATTERN, ECC, DEVICE_COUNT), settings={
        "timeout_s": timeout(600, 900, 2400),
        "memory_fraction": Setting("fraction", 0.9, "share of each GPU's free memory tested"),
        "chunk_mb": Setting("int", 1024, "GPU allocation unit, halved when refused"),
        "slice_mb": Setting("int", None, "compare unit; default 256 on a GPU, 64 on a CPU"),
        "host_bytes": Setting("positive", {"quick": 64 * MIB, "standard": 256 * MIB,
                                      "extended": 1024 * MIB},
                              "host memory tested per device of a CPU-only node"),
        "retention_s": Setting("number", {"quick": 5, "standard": 30, "extended": 120},
                               "pause before the random data is read again"),
        "passes": Setting("int", {"quick": 1, "standard": 1, "extended": 3},
                          "times the whole pattern set is written and compared"),
        "seed": Setting("int", None, "random data seed; default: from the run id"),
        "max_correctable_ecc": Setting("int", 0, "fail above this many new correctable ECC "
                                       "errors during the check (uncorrectable: any)"),
    })

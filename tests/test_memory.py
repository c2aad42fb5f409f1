"""The memory check: faults planted below the probe, in the very memory it tests (a
file-backed shared mapping this process corrupts from outside), each caught on the right
device with its address; no false alarm over repeated clean runs; NVML's counters paired
by UUID; the judge's messages; the benchmark's smoke run."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from burnin.checks import Judging, resolve_settings
from burnin.checks.memory import figures
from burnin.checks.memory import judge as memory_judge
from burnin.inventory.schema import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.report import metrics
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
CPU = Node(name="n1", address="n1", transport="local", gpus=0, cpu_devices=2)
REGION = 1 << 20  # bytes per device: 256 pages, two 512 KiB rows
PAGE = mmap.PAGESIZE
SETTINGS = resolve_settings("memory", "quick", {})


HOOKS = ("backing_dir", "alias_pages", "handshake_dir")  # the probe's test hooks


def memory(node: Node = CPU, gpus: int | None = 0, **settings) -> ProbeOutcome:
    """The real probe on this machine, as the controller runs it; HOOKS go in the payload's
    test hooks (no inventory can set them)."""
    hooks = {k: settings.pop(k) for k in HOOKS if k in settings}
    payload = {"gpus": gpus, "cpu_devices": node.cpu_devices, "run_id": "t",
               "settings": {"host_bytes": REGION, "retention_s": 0.2, **settings},
               "test_hooks": hooks}
    out = run_probe(LocalTransport(node, REPO / "probes"), "memory", payload, timeout_s=600)
    assert out.ok, out.reason
    for dev in out.data["devices"]:
        assert "error" not in dev, dev["error"]
    return out


def judge(out: ProbeOutcome, node: Node = CPU, devices: int | None = 2, **settings):
    return memory_judge(node, out, Judging({**SETTINGS, **settings}, devices=devices,
                                           gpus=node.gpus))


@pytest.fixture
def shm():
    """A directory under /dev/shm for the file-backed regions: RAM, as the probe's own."""
    base = Path("/dev/shm") if os.path.isdir("/dev/shm") else None
    path = Path(os.path.realpath(os.path.join(base or "/tmp", f"burnin-memtest-{os.getpid()}-"
                                              f"{time.monotonic_ns()}")))
    path.mkdir()
    yield path
    for f in path.iterdir():
        f.unlink()
    path.rmdir()


def mapped(path: Path, size: int = REGION, timeout: float = 120) -> mmap.mmap:
    """The probe's region file, mapped here once the probe has created and sized it."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_size == size):
        assert time.monotonic() < deadline, f"the probe never made {path}"
        time.sleep(0.01)
    with open(path, "r+b") as f:
        return mmap.mmap(f.fileno(), size)


class Harness(threading.Thread):
    """Corrupts a device's region from this process while the probe tests it."""

    def __init__(self, path: Path, fault):
        super().__init__(daemon=True)
        self.path, self.fault, self.stop = path, fault, threading.Event()

    def run(self) -> None:
        mem = mapped(self.path)
        try:
            self.fault(mem, self.stop)
        finally:
            mem.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join(timeout=30)


def stuck_at_zero(offset: int, bit: int, pauses: Path):
    """Keep one bit of one word at 0: rewrite its byte whenever the bit reads 1, as fast as
    this process can. (Only then: a read-modify-write racing the probe's own write would
    put back a stale byte, a fault of another kind.) However little CPU this thread gets
    on a loaded machine, the bit is also 0 when the probe leaves its retention pause
    (`pauses`: its handshake folder), where the random pattern holds it at 1."""
    at, one = offset + bit // 8, 1 << (bit % 8)

    def fault(mem: mmap.mmap, stop: threading.Event) -> None:
        while not stop.is_set():
            for _ in range(1000):
                b = mem[at]
                if b & one:
                    mem[at] = b & ~one
            if (pauses / "paused-1").exists() and not (pauses / "resume").exists():
                mem[at] = mem[at] & ~one
                (pauses / "resume").touch()
    return fault


def test_a_stuck_bit_is_caught_on_its_device_at_its_address(shm):
    # Bit 14 of that word is 1 in the random pattern of this seed (run id "t").
    offset, bit = 37 * PAGE + 8 * 100, 14
    with Harness(shm / "device-1", stuck_at_zero(offset, bit, shm)):
        out = memory(backing_dir=str(shm), handshake_dir=str(shm))
    clean, faulty = out.data["devices"]
    assert clean["bad_words"] == 0 and faulty["bad_words"] > 0
    assert {ex["offset"] for ex in faulty["bad"]} == {offset}
    # Caught where a pattern wrote the bit as 1: it reads 0, and only that bit differs.
    assert all(int(ex["found"], 16) >> bit & 1 == 0 for ex in faulty["bad"])
    caught = [ex for ex in faulty["bad"] if ex["bits"] == [bit]]
    assert caught and all(int(ex["expected"], 16) >> bit & 1 for ex in caught)
    assert faulty["region"].startswith("file-backed (tests only)")
    (failure,) = judge(out).failures
    assert failure.startswith("cpu:1 (") and "words read back wrong" in failure
    assert f"at offset {offset:#x}" in failure and f"(bits {bit})" in failure


def test_an_address_line_fault_is_caught_by_address_in_address(shm):
    # Page 3 of device 1's region is mapped onto the memory of its page 7: one memory at
    # two addresses, a real alias. Constant patterns cannot see it; a word's own index can.
    out = memory(backing_dir=str(shm), alias_pages=[{"device": 1, "page": 3, "onto": 7}])
    clean, faulty = out.data["devices"]
    assert clean["bad_words"] == 0
    fams = faulty["families"]
    assert fams["walking_ones"]["bad_words"] == fams["walking_zeros"]["bad_words"] == 0
    assert fams["address"]["bad_words"] == PAGE // 8  # one page of words holds the other's
    assert fams["random"]["bad_words"] == PAGE // 8
    assert {ex["offset"] // PAGE for ex in faulty["bad"]} <= {3, 7}
    aliased = [ex for ex in faulty["bad"] if ex["pattern"] == "address in address"]
    assert aliased and all(abs(ex["holds_index_of_offset"] - ex["offset"]) == 4 * PAGE
                           for ex in aliased)
    (failure,) = judge(out).failures
    assert failure.startswith("cpu:1 (") and "(an address alias)" in failure


def test_a_flip_after_the_pause_is_caught_as_a_retention_fault(shm):
    offset, bit = 200 * PAGE + 8 * 7, 42

    def flip_in_the_pause(mem: mmap.mmap, stop: threading.Event) -> None:
        while not (shm / "paused-1").exists() and not stop.is_set():
            time.sleep(0.01)
        (word,) = struct.unpack_from("<Q", mem, offset)
        struct.pack_into("<Q", mem, offset, word ^ (1 << bit))
        (shm / "resume").touch()

    with Harness(shm / "device-1", flip_in_the_pause):
        out = memory(backing_dir=str(shm), handshake_dir=str(shm))
    clean, faulty = out.data["devices"]
    assert clean["bad_words"] == 0 and faulty["bad_words"] == 1
    assert {k: f["bad_words"] for k, f in faulty["families"].items() if f["bad_words"]} == {
        "retention": 1}
    (ex,) = faulty["bad"]
    assert ex["offset"] == offset and ex["bits"] == [bit]
    assert ex["pattern"].startswith("random (seed ") and "re-read after 0.2 s" in ex["pattern"]
    (failure,) = judge(out).failures
    assert failure.startswith("cpu:1 (") and f"at offset {offset:#x}" in failure


def test_no_false_alarm_over_repeated_clean_runs(shm, finding):
    runs = [memory(passes=3), memory(passes=3, backing_dir=str(shm)), memory(passes=3)]
    devices = [d for out in runs for d in out.data["devices"]]
    verified = sum(d["patterns"] for d in devices)
    finding(f"memory: clean runs: {len(devices)} device runs, {verified} patterns verified "
            f"over {REGION >> 20} MiB each, {sum(d['bad_words'] for d in devices)} bad words")
    assert verified == len(devices) * (3 * 132 + 1)  # 132 patterns a pass, a re-read
    assert all(d["bad_words"] == 0 and d["bad"] == [] for d in devices)
    assert all(judge(out).passed for out in runs)


def test_ecc_counters_are_paired_with_the_device_by_uuid(nvml):
    # torch's cuda:0 is NVML's device 1: the counters must follow the UUID, not the index.
    nvml(cuda="1,0", devices=[
        {"uuid": "GPU-a", "ecc_errors": {"corrected_volatile": 5}},
        {"uuid": "GPU-b", "ecc_errors": {"uncorrected_volatile": [0, 0, 0, 0, 2]},
         "remapped_rows": {"pending": [0, 0, 0, 0, 1], "uncorrectable": [0, 0, 0, 0, 1]}}])
    node = Node(name="g1", address="g1", transport="local", gpus=2)
    out = memory(node, gpus=2, retention_s=4)
    first, second = out.data["devices"]
    assert first["uuid"] == "GPU-b" and second["uuid"] == "GPU-a"
    assert (first["nvml"]["before"]["ecc_uncorrected"],
            first["nvml"]["after"]["ecc_uncorrected"]) == (0, 2)
    assert second["nvml"]["before"]["ecc_corrected"] == 5 == \
        second["nvml"]["after"]["ecc_corrected"]
    verdict = judge(out, node)
    assert verdict.failures == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-b): 2 uncorrectable ECC errors during the memory "
        "check, expected 0",
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-b): a row remap became pending during the memory "
        "check, expected none")
    ecc = {(dict(f.labels)["device"], dict(f.labels)["type"]): f.value
           for f in figures({"data": out.data}) if f.metric == "memory_ecc_errors"}
    assert ecc == {("cuda:0", "corrected"): 0, ("cuda:0", "uncorrected"): 2,
                   ("cuda:1", "corrected"): 0, ("cuda:1", "uncorrected"): 0}
    # metrics.prom pairs each series with the GPU's UUID, as dcgm-exporter labels it
    text = metrics.render("c", "r1", 0.0, {"g1": {"memory": ("failure", "")}},
                          [{"node": "g1", "check": "memory", "ok": True, "data": out.data}])
    assert ('burnin_memory_ecc_errors{cluster="c",node="g1",device="cuda:0",type="uncorrected",'
            'UUID="GPU-b"} 2') in text


def recorded(**nvml) -> ProbeOutcome:
    dev = {"device": "cuda:3", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-x", "bytes": 1 << 36,
           "patterns": 133, "bad_words": 0, "bad": [], "verified_gbps": 2000.0,
           "nvml": {"before": {"ecc_corrected": 1, "ecc_uncorrected": 0, "retired_pages": 0,
                               "remapped_rows": {"pending": False, "failed": False}},
                    "after": {"ecc_corrected": 1, "ecc_uncorrected": 0, "retired_pages": 0,
                              "remapped_rows": {"pending": False, "failed": False}},
                    "errors": []}}
    for key, value in nvml.items():
        dev["nvml"]["after"][key] = value
    return ProbeOutcome("g1", "memory", True, data={"probe": "memory", "schema": 1, "node": {},
                                                    "devices": [dev], "figures": {},
                                                    "errors": []})


GPU = Node(name="g1", address="g1", gpus=1)


@pytest.mark.parametrize("after,failure", [
    ({}, None),
    ({"ecc_corrected": 4}, "3 correctable ECC errors during the memory check, above the "
     "limit of 0"),
    ({"retired_pages": 2}, "2 pages retired during the memory check, expected 0"),
    ({"remapped_rows": {"pending": False, "failed": True}}, "a row remap failed"),
], ids=["clean", "correctable", "retired", "remap-failed"])
def test_judge_reads_nvml_counters_over_the_check(after, failure):
    verdict = judge(recorded(**after), GPU, devices=1)
    if failure is None:
        assert verdict.passed, verdict.failures
    else:
        (message,) = verdict.failures
        assert message.startswith(f"cuda:3 (NVIDIA H100 80GB HBM3, GPU-x): {failure}")


def test_correctable_errors_under_the_limit_warn():
    verdict = judge(recorded(ecc_corrected=3), GPU, devices=1, max_correctable_ecc=10)
    assert verdict.passed and verdict.warnings == (
        "cuda:3 (NVIDIA H100 80GB HBM3, GPU-x): 2 correctable ECC errors during the memory "
        "check (limit 10)",)


def test_a_node_reporting_fewer_devices_fails():
    verdict = judge(recorded(), GPU, devices=2)
    assert any("reported 1 device(s), expected 2" in f for f in verdict.failures)


def test_the_benchmark_runs_and_prints_its_ratio_last():
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "memory_vs_bare.py"),
                          "--mib", "2", "--repeat", "1"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("ratio probe/bare: ") and float(last.split(": ")[1]) > 0

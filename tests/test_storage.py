"""The storage check on real file systems: a block overwritten on disk, a full file system,
a slow disk on a test host, and the judge's rules."""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import pytest
from support import testdisks
from support.suiterun import junit_cases, run_suite

from burnin.checks import Judging, resolve_settings
from burnin.checks.storage import judge as storage_judge
from burnin.inventory.schema import Node
from burnin.probe.protocol import run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
NODE = Node(name="n1", address="n1", transport="local", gpus=0)


def judge(out, **settings):
    return storage_judge(NODE, out, Judging(resolve_settings("storage", "quick", settings)))


@pytest.fixture
def root_disks():
    problem = testdisks.missing_requirements()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"test disks cannot be built in CI: {problem}")
        pytest.skip(problem)


def storage(path: Path, mount: str | None = None, handshake_dir: str | None = None,
            **settings):
    payload = {"gpus": 0, "storage": {"path": str(path), "mount": mount},
               "settings": {"size_gb": 0.05, "streams": 2, **settings},
               "test_hooks": {"handshake_dir": handshake_dir} if handshake_dir else {}}
    out = run_probe(LocalTransport(NODE, REPO / "probes"), "storage", payload, timeout_s=300)
    assert out.ok, out.reason
    return out


def test_clean_run_verifies_every_block_and_removes_its_files(tmp_path):
    out = storage(tmp_path)
    fig = out.data["figures"]
    assert fig["integrity_errors"] == 0 and fig["verify"] == "inline, every block"
    blocks = fig["read"]["bytes"] // fig["block_bytes"]
    assert blocks == 2 * (50_000_000 // (4 << 20)) and fig["read"]["bytes"] == fig["write"]["bytes"]
    # The per-GPU figures are what they say: of the streams, as fio reports its jobs.
    rates = sorted(d["read"]["gbps"] for d in out.data["devices"])
    assert fig["read"]["per_gpu_min"] == rates[0]
    assert fig["read"]["per_gpu_median"] == pytest.approx(statistics.median(rates), abs=1e-4)
    longest = max(d["read"]["seconds"] for d in out.data["devices"])
    assert fig["read"]["per_gpu_aggregate"] == pytest.approx(
        fig["read"]["bytes"] / longest / 1e9 / len(rates), rel=1e-3)
    assert list(tmp_path.iterdir()) == []
    assert judge(out).passed


def test_a_block_overwritten_on_disk_between_write_and_read_is_caught(tmp_path):
    data, handshake = tmp_path / "data", tmp_path / "handshake"
    data.mkdir()
    handshake.mkdir()

    def corrupt():
        while not (handshake / "written").exists():
            time.sleep(0.02)
        victim = sorted(data.glob("*-1.dat"))[0]  # stream 1, third block, inside the payload
        with open(victim, "r+b") as f:
            f.seek(2 * (4 << 20) + 12345)
            f.write(b"bit rot!")
            f.flush()
            os.fsync(f.fileno())
        (handshake / "go").touch()

    t = threading.Thread(target=corrupt)
    t.start()
    out = storage(data, handshake_dir=str(handshake))
    t.join()
    assert out.data["figures"]["integrity_errors"] == 1
    (bad,) = out.data["devices"][1]["bad_blocks"]
    assert bad["offset"] == 2 * (4 << 20) and bad["problem"] == "payload checksum mismatch"
    (failure,) = judge(out).failures
    assert failure.startswith("1 blocks read back wrong, e.g. stream 1 at offset 8388608")


@pytest.mark.parametrize("size_mb,streams", [(24, 2), (6, 1)], ids=["enospc", "short-write"])
def test_a_full_file_system_is_a_clear_failure_and_leaves_nothing(root_disks, tmp_path,
                                                                  size_mb, streams):
    # A filling disk answers ENOSPC, or first a short write (6 MB: the second 4 MiB block
    # only half fits); both are a full disk to the operator.
    with testdisks.Tmpfs(tmp_path / "small", size_mb) as fs:
        out = storage(fs.mountpoint, size_gb=0.03, streams=streams, iodepth=1)
        failures = judge(out).failures
        assert any("write failed" in f and "disk full" in f for f in failures), failures
        assert list(fs.mountpoint.iterdir()) == []


def test_a_missing_leaf_is_created_and_removed_but_a_missing_parent_fails(tmp_path):
    leaf = tmp_path / "burnin"
    out = storage(leaf)
    assert judge(out).passed, judge(out).failures
    assert out.data["figures"]["filesystem"]["mount"], "the file system measured is recorded"
    assert not leaf.exists(), "a directory the check made is removed again"
    out = storage(tmp_path / "nope" / "burnin")
    (failure,) = judge(out).failures
    assert failure == (f"storage path {tmp_path / 'nope' / 'burnin'} does not exist and its "
                       f"parent {tmp_path / 'nope'} is not a directory")


def test_a_path_not_on_the_pinned_mount_fails_naming_what_it_is_on(tmp_path):
    # An unmounted data disk: the path exists, but on the root file system.
    out = storage(tmp_path, mount=str(tmp_path / "data"))
    (failure,) = judge(out).failures
    assert f"storage path {tmp_path} is on /" in failure, failure
    assert f"not on the mount {tmp_path / 'data'} the inventory names" in failure


def test_a_slow_disk_on_a_test_host_fails_while_a_normal_host_passes(root_disks, pytester,
                                                                       make_hosts, tmp_path):
    # Mount first, then start the hosts: a host keeps the mount table it started with.
    with testdisks.LoopDisk(tmp_path, "fast", 256) as fast, \
            testdisks.LoopDisk(tmp_path, "slow", 256) as slow, \
            testdisks.Throttle(slow.major_minor, 10 * 1000 * 1000) as throttle:
        hosts = make_hosts(2)
        throttle.add(hosts[1].sshd.pid)  # h2's sessions, and so its probes, are throttled
        inv = hosts.write_inventory(
            pytester.path / "inv.yaml",
            nodes={"h1": {"storage": {"path": str(fast.mountpoint)}},
                   "h2": {"storage": {"path": str(slow.mountpoint)}}},
            checks={"storage": {"size_gb": 0.04, "streams": 1, "min_read_gbps_per_gpu": 0.05,
                                "min_write_gbps_per_gpu": 0.05}})
        result, reports = run_suite(pytester, inv, "-k", "storage")
        hosts.teardown()  # before the throttle goes: its cgroup must be empty
    cases = junit_cases(reports)
    assert cases["h1"]["storage"] == ("passed", "")
    outcome, message = cases["h2"]["storage"]
    assert outcome == "failure"
    assert "stream 0: write 0.0" in message and "below the floor of 0.05 GB/s per GPU" in message


def test_a_stream_far_below_its_peers_fails():
    from burnin.probe.protocol import ProbeOutcome
    devices = [{"stream": i, "write": {"gbps": g}, "read": {"gbps": g}} for i, g in
               enumerate([2.0, 2.1, 0.6, 2.05])]
    out = ProbeOutcome("n1", "storage", True, data={
        "probe": "storage", "schema": 1, "node": {}, "devices": devices, "errors": [],
        "figures": {"gpus": 4, "integrity_errors": 0, "direct": True}})
    failures = judge(out).failures
    assert failures == ("stream 2 (GPU 2): read 0.600 GB/s, below 0.5 x 2.025 GB/s, the node's "
                        "median stream",
                        "stream 2 (GPU 2): write 0.600 GB/s, below 0.5 x 2.025 GB/s, the node's "
                        "median stream")

"""The storage and intra-node allreduce judges (burnin/checks/storage.py, allreduce.py)."""

from __future__ import annotations

import pytest
from support.judging import H100, failed, judge, outcome, summary

from burnin.checks.allreduce import figures as allreduce_figures
from burnin.checks.allreduce import judged, saturation
from burnin.checks.storage import figures as storage_figures


def stream(i, read=2.0, write=2.0, **extra):
    d = {"stream": i, "file": f"/data/burnin-{i}.dat",
         "read": None if read is None else {"bytes": 1, "seconds": 1, "gbps": read},
         "write": None if write is None else {"bytes": 1, "seconds": 1, "gbps": write}}
    d.update(extra)
    return d


def storage(*devices, errors=(), **fig):
    figs = {"path": "/data", "gpus": 0, "direct": True, "integrity_errors": 0, **fig}
    return outcome("storage", list(devices), figs, errors)


def test_storage_passes_fast_even_streams():
    assert judge("storage", storage(stream(0), stream(1)), devices=1, gpus=0,
                 settings={"streams": 2}) == ((), ())


def test_storage_failed_probe():
    assert judge("storage", failed("storage", "no space")) == (("no space",), ())


def test_a_block_read_back_wrong_fails_storage_whatever_the_speed():
    bad = {"stream": 1, "file": "/data/burnin-1.dat", "offset": 8388608,
           "problem": "misplaced: block of stream 1 offset 4194304"}
    o = storage(stream(0), stream(1, bad_blocks=[bad]), integrity_errors=3,
                errors=["stream 1: read failed at offset 0"])
    assert judge("storage", o) == ((
        "stream 1: read failed at offset 0",
        "3 blocks read back wrong, e.g. stream 1 at offset 8388608 of /data/burnin-1.dat: "
        "misplaced: block of stream 1 offset 4194304; expected every block as written"), ())
    anonymous = storage(stream(0), integrity_errors=1)
    assert judge("storage", anonymous)[0] == (
        "1 blocks read back wrong, e.g. stream None at offset None of None: None; expected "
        "every block as written",)


def test_storage_streams_one_per_gpu_or_per_cpu_device_or_as_configured():
    two = storage(stream(0), stream(1))
    assert judge("storage", two, devices=2, gpus=2) == ((), ())
    assert judge("storage", two, devices=3, gpus=3)[0] == (
        "the probe reported 2 device(s), expected 3 (the inventory's count, or what the "
        "node's health facts showed)",)
    assert judge("storage", two, devices=2, gpus=0) == ((), ()), "two CPU devices, two streams"
    assert judge("storage", two, devices=1, gpus=0, settings={"streams": 2}) == ((), ())
    assert judge("storage", two, devices=1, gpus=0, settings={"streams": 4})[0][0].startswith(
        "the probe reported 2 device(s), expected 4")
    assert judge("storage", two, devices=1, gpus=0, settings={"streams": None})[0] == ()
    assert judge("storage", two, devices=None) == ((), ())
    four = storage(*(stream(i) for i in range(4)))
    assert judge("storage", four, devices=1, gpus=0, drop=("streams",)) == ((), ())
    assert judge("storage", two, devices=1, gpus=0, drop=("streams",))[0][0].startswith(
        "the probe reported 2 device(s), expected 4"), "4 streams by default"
    assert judge("storage", storage(stream(0), errors=["stream 1: cannot open"]), devices=2,
                 gpus=2)[0] == (
        "stream 1: cannot open",
        "the probe reported 1 device(s), expected 2 (the inventory's count, or what the "
        "node's health facts showed)")


def test_storage_floors_per_gpu_and_the_nodes_median():
    o = storage(stream(0, read=1.5, write=3.0), stream(1, read=3.0, write=1.0),
                stream(2, read=3.1, write=3.0), gpus=3)
    assert judge("storage", o, settings={"min_read_gbps_per_gpu": 2.0}) == ((
        "stream 0 (GPU 0): read 1.500 GB/s, below the floor of 2 GB/s per GPU",
        "stream 1 (GPU 1): write 1.000 GB/s, below 0.5 x 3.000 GB/s, the node's median "
        "stream"), ())
    assert judge("storage", o, settings={"min_write_gbps_per_gpu": 0.5,
                                         "stream_fraction": 0.2}) == ((), ())
    cpu = storage(stream(0, read=1.0), stream(1, read=3.0), stream(2, read=3.0))
    assert judge("storage", cpu, settings={"stream_fraction": 0.4}) == ((
        "stream 0: read 1.000 GB/s, below 0.4 x 3.000 GB/s, the node's median stream",), ())
    assert judge("storage", cpu, settings={"stream_fraction": 0.33}) == ((), ())
    lone = storage(stream(0, read=0.01, write=None))
    assert judge("storage", lone) == ((), ()), "one stream has no median to fall below"
    unset = ("stream_fraction",)
    above = storage(stream(0, read=1.6), stream(1, read=3.0), stream(2, read=3.0))
    assert judge("storage", above, drop=unset)[0] == (), "0.5 by default"
    half = storage(stream(0, read=1.4), stream(1, read=3.0), stream(2, read=3.0))
    assert judge("storage", half, drop=unset)[0] == (
        "stream 0: read 1.400 GB/s, below 0.5 x 3.000 GB/s, the node's median stream",)
    at_floor = storage(stream(0, read=2.0), stream(1, read=2.0))
    assert judge("storage", at_floor, settings={"min_read_gbps_per_gpu": 2.0}) == ((), ())
    at_half = storage(stream(0, read=1.5), stream(1, read=3.0), stream(2, read=3.0))
    assert judge("storage", at_half) == ((), ()), "half the median is not below it"
    pair = storage(stream(0, read=0.1), stream(1, read=3.0))
    assert judge("storage", pair)[0] == (
        "stream 0: read 0.100 GB/s, below 0.5 x 1.550 GB/s, the node's median stream",)
    writes_only = storage(stream(0, read=None, write=0.1), stream(1, read=None, write=3.0))
    assert judge("storage", writes_only)[0] == (
        "stream 0: write 0.100 GB/s, below 0.5 x 1.550 GB/s, the node's median stream",)
    unsaid = outcome("storage", [stream(0)], {"path": "/data", "gpus": 0})
    assert judge("storage", unsaid) == ((), ()), "no integrity_errors figure: none counted"


def test_buffered_io_warns():
    o = storage(stream(0), direct=False, direct_reason="the file system refuses O_DIRECT")
    assert judge("storage", o) == ((), ("storage at /data: the file system refuses O_DIRECT",))


def test_storage_figures():
    rec = {"data": {"devices": [stream(0, read=1.5, write=None), stream(1, read=2.0,
                                                                         write=2.5)]}}
    got = [(f.metric, f.labels, f.value, f.help) for f in storage_figures(rec)]
    h = "Storage throughput per stream (one per GPU)"
    assert got == [("storage_gbps", (("stream", "0"), ("phase", "read")), 1.5, h),
                   ("storage_gbps", (("stream", "1"), ("phase", "read")), 2.0, h),
                   ("storage_gbps", (("stream", "1"), ("phase", "write")), 2.5, h)]


# --- allreduce ------------------------------------------------------------------------

def size(nbytes, busbw, wrong=0):
    return {"bytes": nbytes, "busbw_gbps": busbw, "wrong_elements": wrong}


def allreduce(sweep, world=8, ranks=8, errors=(), node="n1"):
    return outcome("allreduce", [{"rank": i} for i in range(ranks)],
                   {"world": world, "sweep": sweep}, errors, node)


def test_allreduce_is_judged_at_the_best_size_of_the_sweep():
    assert judged([]) is None and judged([size(1, 1), size(2, 2)]) == size(2, 2)
    # Past saturation a larger size may measure less (a clock change, a neighbour's burst):
    # the best size decides, and of two equal ones the larger.
    assert judged([size(1 << 29, 460.0), size(1 << 30, 450.0)]) == size(1 << 29, 460.0)
    assert judged([size(1 << 30, 450.0), size(1 << 29, 450.0)]) == size(1 << 30, 450.0)
    o = allreduce([size(1 << 20, 10.0), size(1 << 30, 450.0)])
    assert judge("allreduce", o, fleet={}, model=H100, devices=8, gpus=8) == ((), ())


def test_allreduce_below_the_models_floor_for_a_full_node():
    o = allreduce([size(1 << 20, 10.0), size(1 << 30, 350.0)])
    assert judge("allreduce", o, fleet={}, model=H100, devices=8, gpus=8)[0] == (
        "intra-node busbw 350.000 GB/s at 1024 MiB, the best of the sweep (8 ranks), below "
        "the floor of 400 GB/s",)
    assert judge("allreduce", o, fleet={}, model=H100, devices=8, gpus=8,
                 settings={"min_busbw_gbps": 300}) == ((), ())
    at = allreduce([size(1 << 30, 400.0)])
    assert judge("allreduce", at, fleet={}, model=H100, devices=8, gpus=8) == ((), ())
    four = allreduce([size(1 << 30, 100.0)], world=4, ranks=4)
    assert judge("allreduce", four, fleet={}, model=H100, devices=4, gpus=4) == ((), ()), \
        "the model's floor is for a full node of its ranks"


def test_allreduce_without_a_floor_against_the_runs_median():
    o = allreduce([size(65536, 1.9)], world=2, ranks=2)
    fleet = {("", 2): {"median": 4.0, "nodes": 3}}  # CPU nodes (no model) of 2 ranks
    assert judge("allreduce", o, fleet=fleet, devices=1, gpus=0)[0] == (
        "intra-node busbw 1.900 GB/s at 0.0625 MiB, the best of the sweep (2 ranks), below "
        "0.5 x 4.000 GB/s, the median of the run's 3 nodes of this model and rank count",)
    assert judge("allreduce", o, fleet=fleet, devices=1, gpus=0,
                 settings={"peer_fraction": 0.4}) == ((), ())
    assert judge("allreduce", o, fleet={("", 2): {"median": 4.0, "nodes": 2}}, devices=1,
                 gpus=0) == ((), ())
    assert judge("allreduce", o, fleet={("", 4): {"median": 4.0, "nodes": 3}}, devices=1,
                 gpus=0) == ((), ()), "nodes of another rank count are no yardstick"
    assert judge("allreduce", o, fleet={}, devices=1, gpus=0) == ((), ())
    unset = ("peer_fraction",)
    assert judge("allreduce", o, fleet=fleet, devices=1, gpus=0, drop=unset)[0] != ()
    fine = allreduce([size(65536, 3.0)], world=2, ranks=2)
    assert judge("allreduce", fine, fleet=fleet, devices=1, gpus=0, drop=unset) == ((), ()), \
        "0.5 by default"
    at = allreduce([size(65536, 2.0)], world=2, ranks=2)
    assert judge("allreduce", at, fleet=fleet, devices=1, gpus=0) == ((), ())


def test_allreduce_wrong_sums_and_missing_sweep_and_one_rank():
    o = allreduce([size(1 << 20, 500.0, wrong=3), size(1 << 30, 500.0)],
                  errors=["rank 3: NCCL timeout"])
    assert judge("allreduce", o, fleet={}, model=H100, devices=8, gpus=8)[0] == (
        "rank 3: NCCL timeout",
        "3 wrong elements in the all-reduce result at 1 MiB, expected exact sums")
    assert judge("allreduce", allreduce([]), fleet={}, devices=8, gpus=8)[0] == (
        "no bandwidth sweep was reported",)
    no_sweep = outcome("allreduce", [{"rank": 0}], {"world": 1})
    assert judge("allreduce", no_sweep, fleet={}, devices=1, gpus=1)[0] == (
        "no bandwidth sweep was reported",)
    one = allreduce([size(1 << 20, 0.0, wrong=1)], world=1, ranks=1)
    assert judge("allreduce", one, fleet={}, devices=1, gpus=1) == (
        ("1 wrong elements in the all-reduce result at 1 MiB, expected exact sums",),
        ("one rank: busbw is 0 by definition; nothing to judge",))
    no_world = outcome("allreduce", [{"rank": 0}], {"sweep": [size(1, 0.0)]})
    assert judge("allreduce", no_world, fleet={}, devices=1, gpus=1)[1] == (
        "one rank: busbw is 0 by definition; nothing to judge",)
    assert judge("allreduce", failed("allreduce", "rendezvous timed out"), fleet={}) == (
        ("rendezvous timed out",), ())


def test_allreduce_ranks_one_per_gpu_or_cpu_device_or_as_configured():
    two = allreduce([size(65536, 5.0)], world=2, ranks=2)
    assert judge("allreduce", two, fleet={}, devices=1, gpus=0) == ((), ()), "ranks: 2"
    assert judge("allreduce", two, fleet={}, devices=1, gpus=0,
                 settings={"ranks": 3})[0] == (
        "the probe reported 2 device(s), expected 3 (the inventory's count, or what the "
        "node's health facts showed)",)
    assert judge("allreduce", two, fleet={}, devices=2, gpus=0) == ((), ())
    assert judge("allreduce", two, fleet={}, devices=4, gpus=4)[0][0].startswith(
        "the probe reported 2 device(s), expected 4")
    assert judge("allreduce", two, fleet={}, devices=None) == ((), ())
    unset = ("ranks",)
    assert judge("allreduce", two, fleet={}, devices=1, gpus=0, drop=unset) == ((), ())
    three = allreduce([size(65536, 5.0)], world=3, ranks=3)
    assert judge("allreduce", three, fleet={}, devices=1, gpus=0, drop=unset)[0][0].startswith(
        "the probe reported 3 device(s), expected 2"), "2 ranks by default"
    assert judge("allreduce", two, fleet={}, devices=2, gpus=0,
                 settings={"ranks": 5}) == ((), ()), "two CPU devices: a rank each"


def test_allreduce_fleet_median_of_voters():
    outcomes = {"n1": allreduce([size(1, 1.0), size(2, 10.0)], node="n1"),
                "n2": allreduce([size(2, 30.0)], node="n2"),
                "n3": allreduce([size(2, 20.0)], node="n3", ranks=20),
                "n4": outcome("allreduce", [], {"world": 1}, node="n4"),
                "n5": failed("allreduce", "x", "n5")}
    # spread: each node's deviation from the median is a vote (n1 10 and n2 30: 1/2 each)
    assert summary("allreduce", outcomes, {"n1": 8, "n2": 8, "n3": 8}) == {
        ("", 8): {"median": 20.0, "nodes": 2, "spread": 1.4826 * 0.5}}
    assert summary("allreduce", outcomes) == {("", 8): {"median": 20.0, "nodes": 3,
                                                         "spread": 1.4826 * 0.5}}
    assert summary("allreduce", {}) == {}
    dead = {f"n{i}": allreduce([size(2, 0.0)], node=f"n{i}") for i in range(3)}
    assert summary("allreduce", dead) == {("", 8): {"median": 0.0, "nodes": 3,
                                                     "spread": None}}, "no spread about 0"
    by_model = summary("allreduce", outcomes, models={"n1": H100, "n2": H100})
    assert by_model == {("H100", 8): {"median": 20.0, "nodes": 2, "spread": 1.4826 * 0.5},
                        ("", 8): {"median": 20.0, "nodes": 1, "spread": 0.0}}


def test_allreduce_figures():
    rec = {"data": {"figures": {"sweep": [size(1, 1.0), size(1 << 29, 460.0),
                                          size(1 << 30, 450.0)]}}}
    got = [(f.metric, f.labels, f.value, f.help) for f in allreduce_figures(rec)]
    # The best figure, labelled with the sweep's largest size (fixed by the settings).
    assert got == [("allreduce_busbw_gbps", (("scope", "intra"), ("bytes", str(1 << 30))), 460.0,
                    "All-reduce bus bandwidth, the best of the sweep up to `bytes`")]
    assert allreduce_figures({"data": {"figures": {}}}) == []
    assert allreduce_figures({"data": {"figures": {"sweep": []}}}) == []


def test_allreduce_gpu_nodes_are_held_to_085_of_their_peers_by_default():
    fleet = {("H100", 8): {"median": 400.0, "nodes": 3}}
    low = allreduce([size(1 << 30, 339.0)])
    ok = allreduce([size(1 << 30, 341.0)])
    below = dict(fleet=fleet, model=H100, devices=8, gpus=8, settings={"min_busbw_gbps": 100},
                 drop=("peer_fraction",))
    assert judge("allreduce", low, **below)[0] == (
        "intra-node busbw 339.000 GB/s at 1024 MiB, the best of the sweep (8 ranks), below "
        "0.85 x 400.000 GB/s, the median of the run's 3 nodes of this model and rank count",)
    assert judge("allreduce", ok, **below) == ((), ())


def test_allreduce_saturation_is_the_smallest_size_within_the_share_of_the_best():
    assert saturation([]) is None
    sweep = [size(1 << 20, 50.0), size(1 << 28, 95.0), size(1 << 29, 100.0),
             size(1 << 30, 99.0)]
    assert saturation(sweep) == size(1 << 28, 95.0), "95 is 0.95 of 100: saturated"
    assert saturation(sweep, share=0.96) == size(1 << 29, 100.0)
    assert saturation(sweep, share=0.5) == size(1 << 20, 50.0)
    assert saturation([size(1 << 29, 100.0), size(1 << 28, 96.0)]) == size(1 << 28, 96.0), \
        "the smallest size, whatever the sweep's order"


def test_allreduce_peer_bound_widens_with_the_runs_spread_up_to_half_the_median():
    """Ten nodes whose busbw strays +-10% about 400 GB/s (a robust spread of 14.8%): 6
    spreads would be a margin of 89%, held at half the median."""
    fleet = {f"n{i}": allreduce([size(1, 400 * (1.1 if i % 2 else 0.9))], node=f"n{i}")
             for i in range(1, 11)}
    peers = summary("allreduce", fleet)
    assert peers[("", 8)]["spread"] == pytest.approx(0.14826)
    assert judge("allreduce", allreduce([size(1, 250.0)]), fleet=peers, gpus=8)[0] == ()
    (failure,), _ = judge("allreduce", allreduce([size(1, 190.0)]), fleet=peers, gpus=8)
    assert failure.endswith("below 0.5 x 400.000 GB/s (6 x the robust spread of 14.8% below "
                            "it), the median of the run's 10 nodes of this model and rank count")
    # a quiet fleet: the fraction is the margin, as before
    quiet = summary("allreduce", {f"n{i}": allreduce([size(1, 400.0)], node=f"n{i}")
                                  for i in range(1, 4)})
    (failure,), _ = judge("allreduce", allreduce([size(1, 330.0)]), fleet=quiet, gpus=8)
    assert "below 0.85 x 400.000 GB/s, the median of the run's 3 nodes" in failure
    # the setting: 1 spread is a margin of 14.8%, under the fraction's 15%
    assert judge("allreduce", allreduce([size(1, 250.0)]), fleet=peers, gpus=8,
                 settings={"peer_spreads": 1})[0] == (
        "intra-node busbw 250.000 GB/s at 9.53674e-07 MiB, the best of the sweep (8 ranks), "
        "below 0.85 x 400.000 GB/s, the median of the run's 10 nodes of this model and rank "
        "count",)
    assert judge("allreduce", allreduce([size(1, 250.0)]), fleet=peers, gpus=8,
                 drop=("peer_spreads",))[0] == (), "6 by default"

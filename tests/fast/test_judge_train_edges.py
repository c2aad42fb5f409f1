"""The train judge at its edges (burnin/checks/train.py): each verdict's exact message, the
bound a figure may sit on and still pass, the settings that move a bound, who votes on the
fleet's speed and digest, and the figures the report shows. Documents are built by hand
here, small enough that every figure in a message can be worked out on paper."""

from __future__ import annotations

import pytest
from support.judging import H100, failed, judge, outcome, summary

from burnin.checks import CHECKS, Figure, Judging
from burnin.checks.train import EVENT, figures
from burnin.checks.train_job import job_id
from burnin.model.nodes import Node

NAME = "NVIDIA H100 80GB HBM3"
D, E, F = "d" * 64, "e" * 64, "f" * 64


def rank(r: int, name: str | None = NAME, digest: str = D, compute_s: float = 0.01,
         **extra) -> dict:
    dev = {"rank": r, "device": f"cuda:{r}", "name": name, "uuid": f"GPU-{r}" if name else None,
           "step_s": 0.02, "compute_s": compute_s, "tokens_per_s": 500.0, "digest": digest}
    return {**dev, **extra}


def train(ranks: int = 2, node: str = "n1", errors=(), devices=None, **fig):
    """A node's train outcome: `ranks` GPUs that agree, a loss that falls, one job: the
    one the quick profile's settings send (its spec, and its id as the probe makes it)."""
    figs = {"world": ranks, "shape": {"d_model": 32, "layers": 1}, "dtype": "bf16",
            "losses": [4.0, 3.0, 2.5, 2.0], "tokens_per_s": 1000.0, "digest": D,
            "diverged": []}
    figs.update(fig)
    figs = {k: v for k, v in figs.items() if v is not None}
    devs = [rank(r) for r in range(ranks)] if devices is None else devices
    if "job_spec" not in fig:
        figs["job_spec"] = {"shape": figs.get("shape"), "steps": 20, "warmup_steps": 3,
                            "lr": 0.003, "dtype": figs.get("dtype"), "world": figs.get("world"),
                            "device": devs[0].get("name") if devs else None, "threads": 1,
                            "torch": "2.13.0", "cuda": "12.8"}
    if "job" not in fig:
        figs["job"] = job_id(figs["job_spec"])
    figs = {k: v for k, v in figs.items() if v is not None}
    return outcome("train", devs, figs, errors, node=node)


def verdict(o, fleet: dict | None = None, gpus: int = 2, devices: int | None = 2, **judging):
    """(failures, warnings) of `o` judged among `fleet` (by default alone)."""
    fleet = {o.node: o} if fleet is None else fleet
    return judge("train", o, fleet=summary("train", fleet), gpus=gpus, devices=devices,
                 **judging)


def peers(rates: dict, **fig) -> dict:
    return {n: train(node=n, tokens_per_s=t, **fig) for n, t in rates.items()}


# --- what the node reported -------------------------------------------------------------

def test_a_node_whose_probe_did_not_run_fails_with_the_reason_alone():
    assert judge("train", failed("train", "ssh: timed out"), gpus=2, devices=2) == \
        (("ssh: timed out",), ())


def test_a_node_judged_without_a_fleet_summary_is_judged_alone():
    assert judge("train", train(), fleet=None, gpus=2, devices=2) == ((), ())


def test_the_probes_own_errors_fail_the_node_when_its_rank_count_is_right():
    assert verdict(train(errors=["rank 1: NCCL timeout"])) == (("rank 1: NCCL timeout",), ())


def test_a_gpu_node_must_report_one_rank_per_gpu_and_a_cpu_node_the_ranks_setting():
    failure, job = verdict(train(), gpus=4, devices=4)[0]
    assert "reported 2 device(s), expected 4" in failure
    assert "its job's world 2 differs from the 4 the controller sent" in job
    assert verdict(train(ranks=1), gpus=1, devices=1) == ((), ()), "one GPU, one rank"
    cpu = train(devices=[rank(r, device="cpu") for r in range(2)], dtype="fp32")
    failure, _ = verdict(cpu, gpus=0, devices=1, settings={"ranks": 3})[0]
    assert "reported 2 device(s), expected 3" in failure
    assert verdict(cpu, gpus=0, devices=1, settings={"ranks": 2}) == ((), ())
    assert verdict(cpu, gpus=0, devices=2, settings={"ranks": 3}) == ((), ()), \
        "a CPU node of two devices runs a rank on each, whatever `ranks` says"


def test_devices_without_a_throughput_or_a_throughput_without_devices_is_no_result():
    assert verdict(train(tokens_per_s=None)) == (("no training result was reported",), ())
    assert verdict(train(devices=[]), devices=None) == \
        (("no training result was reported",), ())


# --- the loss ---------------------------------------------------------------------------

@pytest.mark.parametrize("losses, tail", [
    ([4.0, 3.9], 3.9),                           # the last step
    ([4.0, 3.9, 3.85], 3.875),                   # the two after the first
    ([4.0, 3.99, 3.98, 3.97, 3.96], 3.97),       # the last three
])
def test_a_loss_that_does_not_fall_is_shown_over_its_last_steps(losses, tail):
    assert verdict(train(losses=losses))[0] == (
        f"loss does not fall: 4.0000 at step 1, {tail:.4f} over the last steps, expected "
        "below 0.95 x the first",)


def test_two_losses_are_a_curve_and_one_is_not():
    assert verdict(train(losses=[4.0, 3.0])) == ((), ())
    assert verdict(train(losses=[4.0]))[0] == ("no loss curve was reported",)


def test_the_loss_drop_setting_is_the_bound_and_a_loss_on_it_passes():
    (failure,) = verdict(train(losses=[4.0, 3.0]), settings={"min_loss_drop": 0.5})[0]
    assert failure.endswith("3.0000 over the last steps, expected below 0.5 x the first")
    assert verdict(train(losses=[4.0, 2.0]), settings={"min_loss_drop": 0.5}) == ((), ())


# --- the replicas -----------------------------------------------------------------------

def test_the_one_replica_that_differs_is_named_alone():
    o = train(ranks=3, diverged=[{"step": 5, "fingerprints": [7, 7, 9]}])
    assert verdict(o, devices=3)[0] == (
        f"replicas differ after step 5: rank 2 (cuda:2, {NAME}, GPU-2) holds parameters "
        "other than the other ranks (fingerprints [7, 7, 9]); expected bitwise identical "
        "after every step",)


def test_two_replicas_that_differ_hold_parameters_other_than_each_other_and_more_steps_count():
    o = train(diverged=[{"step": 5, "fingerprints": [7, 9]}, {"step": 6, "fingerprints": [8, 1]}])
    assert verdict(o)[0] == (
        f"replicas differ after step 5: rank 0 (cuda:0, {NAME}, GPU-0), rank 1 (cuda:1, "
        f"{NAME}, GPU-1) hold parameters other than each other (fingerprints [7, 9]); "
        "expected bitwise identical after every step; 1 more step(s) differed",)


def test_where_the_replica_differs_is_said_for_the_ranks_named_and_no_other():
    where = {"tensor": "blocks.0.mlp.fc1.weight", "numel": 4096, "reference_rank": 0,
             "tensors": {"2": ["blocks.0.mlp.fc1.weight", "head.weight"]},
             "elements": {"2": {"count": 3, "first": 17, "last": 40},
                          "1": {"count": 1, "first": 5, "last": 5}}}
    o = train(ranks=3, diverged=[{"step": 5, "fingerprints": [7, 7, 9], "where": where}])
    (failure,) = verdict(o, devices=3)[0]
    assert failure.endswith(
        "expected bitwise identical after every step; 3 of blocks.0.mlp.fc1.weight's 4096 "
        "elements differ from rank 0's (elements 17 to 40); other tensors that differ: "
        "head.weight"), failure
    assert "element 5" not in failure  # rank 1 is not named: its elements are not said
    one = {**where, "elements": {"2": {"count": 1, "first": 11, "last": 11}}, "tensors": {}}
    o = train(ranks=3, diverged=[{"step": 5, "fingerprints": [7, 7, 9], "where": one}])
    assert verdict(o, devices=3)[0][0].endswith(
        "1 of blocks.0.mlp.fc1.weight's 4096 elements differs from rank 0's (element 11)")
    # rank 2 differs only in a tensor after the one compared element by element (rank 1's)
    apart = {**where, "tensors": {"1": ["blocks.0.mlp.fc1.weight"], "2": ["head.weight"]},
             "elements": {"1": {"count": 1, "first": 5, "last": 5}}}
    o = train(ranks=3, diverged=[{"step": 5, "fingerprints": [7, 7, 9], "where": apart}])
    assert verdict(o, devices=3)[0][0].endswith(
        "expected bitwise identical after every step; its head.weight differs from rank 0's")


def test_where_is_held_to_the_probes_shape_before_it_is_read():
    where = {"tensor": "tok.weight", "numel": 2048, "reference_rank": 0,
             "elements": {"1": {"count": 1, "first": 11, "last": 11}}}
    assert EVENT.problem({"step": 3, "fingerprints": [1, 2], "where": where}, "") == ""
    for bad in ({**where, "elements": {"1": {"count": "1", "first": 11, "last": 11}}},
                {**where, "elements": {"1": {"count": 1, "first": 11}}},
                {k: v for k, v in where.items() if k != "tensor"},
                {**where, "tensors": {"1": ["x"] * 9}}):
        assert EVENT.problem({"step": 3, "fingerprints": [1, 2], "where": bad}, ""), bad


def test_a_replica_with_no_device_reported_is_still_named_by_rank():
    o = train(diverged=[{"step": 1, "fingerprints": [7, 7, 9]}])
    (failure,) = verdict(o)[0]
    assert failure.startswith("replicas differ after step 1: rank 2 (?) holds parameters ")


def test_the_final_digest_that_differs_is_named_beside_the_others():
    o = train(ranks=3, devices=[rank(0), rank(1), rank(2, digest=E)])
    assert verdict(o, devices=3)[0] == (
        f"final parameters differ between replicas: rank 2 (cuda:2, {NAME}, GPU-2) digest "
        "eeeeeeeeeeee, the others dddddddddddd",)


def test_two_final_digests_that_differ_are_both_named_and_a_device_without_a_name_too():
    o = train(devices=[rank(0, name=None, device="cpu"), rank(1, name=None, device="cpu",
                                                              digest=E)])
    assert verdict(o)[0] == ("final parameters differ between replicas: rank 0 (cpu) digest "
                             "dddddddddddd, rank 1 (cpu) digest eeeeeeeeeeee",)


# --- MFU and floors ---------------------------------------------------------------------

def test_one_gpu_beyond_its_datasheet_peak_is_implausible():
    o = train(ranks=1, model_tflops=1100.0)
    assert verdict(o, gpus=1, devices=1, model=H100)[0] == (
        "implausible: MFU 110.0% of the 1000 TFLOPS dense BF16 peak per device",)


def test_the_peak_setting_is_the_mfu_basis_and_figures_on_a_bound_pass():
    o = train(ranks=1, model_tflops=105.0)  # 1.05 x the peak: the most that is plausible
    assert verdict(o, gpus=1, devices=1, settings={"peak_tflops": 100.0}) == ((), ())
    o = train(ranks=1, model_tflops=50.0)
    assert verdict(o, gpus=1, devices=1, settings={"peak_tflops": 100.0, "min_mfu": 0.5}) \
        == ((), ()), "on the floor passes"
    assert verdict(o, gpus=1, devices=1, settings={"peak_tflops": 100.0, "min_mfu": 0.6})[0] \
        == ("MFU 50.0% of the 100 TFLOPS dense BF16 peak per device, below the floor of "
            "60.0%",)


def test_a_gpu_node_that_reports_no_model_flops_has_an_mfu_of_zero():
    o = train(ranks=1)
    assert verdict(o, gpus=1, devices=1, model=H100, settings={"min_mfu": 0.1})[0] == (
        "MFU 0.0% of the 1000 TFLOPS dense BF16 peak per device, below the floor of 10.0%",)


@pytest.mark.parametrize("gemm, shown", [(0.1322, "0.1322"), (None, "0")])
def test_a_cpu_nodes_mfu_names_its_measured_gemm_rate(gemm, shown):
    o = train(devices=[rank(r, device="cpu") for r in range(2)], mfu=0.2, gemm_tflops=gemm,
              dtype="fp32")
    assert verdict(o, gpus=0, devices=1, settings={"min_mfu": 0.3})[0] == (
        f"MFU 20.0% of the node's own measured GEMM rate, {shown} TFLOPS, below the floor "
        "of 30.0%",)


def test_the_tokens_floor_fails_below_it_passes_on_it_and_is_drawn():
    spec = CHECKS["train"]
    for tokens, failures in ((1000.0, ("1000 tokens/s, below the floor of 1500",)),
                             (1500.0, ())):
        o = train(tokens_per_s=tokens)
        j = Judging({"min_tokens_per_s": 1500.0}, summary("train", {"n1": o}), devices=2,
                    gpus=2)
        v = spec.judge(Node("n1", "n1"), o, j)
        assert (v.failures, v.floors) == (failures, {"train": 1500.0})


# --- peers' speed -----------------------------------------------------------------------

def test_exactly_three_nodes_are_enough_to_compare():
    fleet = peers({"a": 1000.0, "b": 1000.0, "n1": 400.0})
    assert verdict(fleet["n1"], fleet)[0] == (
        "straggler: 400 tokens/s, below 0.9 x 1000.000 tokens/s, the median of the run's 3 "
        "nodes running this job on this model",)


def test_the_peer_fraction_setting_is_the_bound_and_a_node_on_it_passes():
    fleet = peers({"a": 1000.0, "b": 1010.0, "c": 990.0, "n1": 400.0})
    assert verdict(fleet["n1"], fleet, settings={"peer_fraction": 0.3}) == ((), ())
    fleet = peers({"a": 1000.0, "b": 1000.0, "c": 1000.0, "n1": 500.0})
    assert verdict(fleet["n1"], fleet, settings={"peer_fraction": 0.5}) == ((), ())


@pytest.mark.parametrize("spreads, words", [
    (None, "0.73 x 990.000 tokens/s (6 x the robust spread of 4.5% below it)"),
    (3.0, "0.865 x 990.000 tokens/s (3 x the robust spread of 4.5% below it)"),
])
def test_a_run_that_spreads_widens_the_margin_by_its_robust_spread(spreads, words):
    # deviations from the median 990: 1%, 3%, 1%, 5%, 3% and the slow node's 29%; their
    # median 3.03% x 1.4826 is a 4.5% spread: 6 spreads below is 0.730 x 990 = 723 tokens/s
    fleet = peers({"a": 1000.0, "b": 1020.0, "c": 980.0, "d": 1040.0, "e": 960.0,
                   "n1": 700.0})
    settings, drop = ({}, ("peer_spreads",)) if spreads is None else \
        ({"peer_spreads": spreads}, ())
    assert verdict(fleet["n1"], fleet, settings=settings, drop=drop)[0] == (
        f"straggler: 700 tokens/s, below {words}, the median of the run's 6 nodes running "
        "this job on this model",)


def test_two_nodes_are_warned_of_no_comparison_and_one_alone_is_not():
    fleet = peers({"a": 1000.0, "n1": 400.0})
    assert verdict(fleet["n1"], fleet) == ((), (
        "fewer than 3 nodes ran this job on this model: no comparison with peers",))
    assert verdict(train(tokens_per_s=400.0)) == ((), ())


def test_nodes_of_another_precision_or_world_are_not_peers():
    fleet = peers({"a": 1000.0, "b": 1010.0, "c": 990.0})
    fleet["n1"] = train(tokens_per_s=400.0, dtype="fp32")  # sent fp32 by its node group
    assert verdict(fleet["n1"], fleet, settings={"dtype": "fp32"}) == ((), ())
    fleet["n1"] = train(ranks=4, tokens_per_s=400.0)
    assert verdict(fleet["n1"], fleet, gpus=4, devices=4) == ((), ())


def test_the_same_shape_written_in_another_order_is_the_same_job():
    fleet = peers({"a": 1000.0, "b": 1010.0, "c": 990.0})
    fleet["n1"] = train(tokens_per_s=400.0, shape={"layers": 1, "d_model": 32})
    (failure,) = verdict(fleet["n1"], fleet)[0]
    assert failure.startswith("straggler: 400 tokens/s, below 0.9 x 995.000 tokens/s")


def test_nodes_whose_devices_have_no_name_are_peers_of_each_other():
    fleet = {n: train(node=n, tokens_per_s=t, devices=[rank(r, name=None) for r in range(2)])
             for n, t in (("a", 1000.0), ("b", 1010.0), ("c", 990.0), ("n1", 400.0))}
    (failure,) = verdict(fleet["n1"], fleet)[0]
    assert failure.startswith("straggler: 400 tokens/s, below 0.9 x 995.000 tokens/s")


def test_a_model_slower_than_a_token_a_second_is_still_compared():
    fleet = peers({"a": 0.9, "b": 1.0, "c": 1.1, "n1": 0.3})
    (failure,) = verdict(fleet["n1"], fleet)[0]
    assert failure.startswith("straggler: 0.3 tokens/s, below ")


def test_only_nodes_that_trained_as_many_ranks_as_they_say_without_error_vote_on_speed():
    fleet = {
        "errors": train(node="errors", errors=["rank 1: NCCL timeout"]),
        "world": train(node="world", devices=[rank(0)]),   # says 2 ranks, reports 1
        "zero": train(node="zero", tokens_per_s=0.0),
        "no_rate": train(node="no_rate", tokens_per_s=None),
        "no_figures": outcome("train", [rank(0), rank(1)], node="no_figures"),
        "failed": failed("train", "ssh: timed out", node="failed"),
        **peers({"a": 1000.0, "b": 1010.0, "c": 990.0, "n1": 400.0})}
    del fleet["no_figures"].data["figures"]
    assert verdict(fleet["n1"], fleet)[0] == (
        "straggler: 400 tokens/s, below 0.9 x 995.000 tokens/s, the median of the run's 4 "
        "nodes running this job on this model",)


# --- a rank that straggles --------------------------------------------------------------

def test_the_straggler_fraction_setting_is_the_bound_and_zero_turns_the_rule_off():
    o = train(devices=[rank(0, compute_s=1.0), rank(1, compute_s=1.3)])
    assert len(verdict(o)[0]) == 1, "1.3 x its peer is beyond the default 1 / 0.8"
    assert verdict(o, settings={"straggler_fraction": 0.5}) == ((), ())
    o = train(devices=[rank(0, compute_s=1.0), rank(1, compute_s=10.0)])
    assert verdict(o, settings={"straggler_fraction": 0}) == ((), ())
    o = train(devices=[rank(0, compute_s=1.0), rank(1, compute_s=2.0)])
    assert verdict(o, settings={"straggler_fraction": 0.5}) == ((), ()), "on the bound"


def test_a_rank_that_reports_no_compute_time_does_not_hide_the_others():
    o = train(ranks=3, devices=[rank(0, compute_s=0.0), rank(1, compute_s=1.0),
                                rank(2, compute_s=2.0)])
    assert verdict(o, devices=3)[0] == (
        f"straggler: rank 2 (cuda:2, {NAME}, GPU-2) takes 2 s per step for forward and "
        "backward, above 1 s / 0.8, the median of the node's 1 other rank(s)",)


# --- the fleet's digest -----------------------------------------------------------------

def test_the_odd_digest_out_is_named_beside_the_one_most_nodes_produced():
    fleet = {n: train(node=n) for n in ("a", "b")}
    fleet["n1"] = train(digest=E, devices=[rank(0, digest=E), rank(1, digest=E)])
    assert verdict(fleet["n1"], fleet)[0] == (
        "final parameter digest eeeeeeeeeeee differs from dddddddddddd, the digest of most "
        "of the run's 3 nodes running the same deterministic job",)


def test_three_nodes_of_three_digests_each_fail_for_want_of_a_majority():
    fleet = {n: train(node=n, digest=x, devices=[rank(0, digest=x), rank(1, digest=x)])
             for n, x in (("a", D), ("b", E), ("n1", F))}
    assert verdict(fleet["n1"], fleet)[0] == (
        f"final parameter digest ffffffffffff: no majority ({D} on 1 node(s), {E} on 1 "
        f"node(s), {F} on 1 node(s)) among 3 nodes running the same deterministic job",)


def test_nodes_whose_replicas_differed_do_not_vote_on_the_digest():
    fleet = {n: train(node=n) for n in ("a", "b")}
    for n in ("c", "d", "e"):  # replicas that differed mid-run, ending alike
        fleet[n] = train(node=n, digest=E, devices=[rank(0, digest=E), rank(1, digest=E)],
                         diverged=[{"step": 1, "fingerprints": [1, 2]}])
    fleet["n1"] = train(digest=F, devices=[rank(0, digest=F), rank(1, digest=F)])
    assert verdict(fleet["n1"], fleet)[0] == (
        "final parameter digest ffffffffffff differs from dddddddddddd, the digest of most "
        "of the run's 3 nodes running the same deterministic job",)


def test_two_agreeing_nodes_judge_a_third_whose_ranks_disagree_and_one_does_not():
    split = [rank(0, digest=E), rank(1, digest=F)]
    fleet = {n: train(node=n) for n in ("a", "b")}
    fleet["n1"] = train(digest=E, devices=split)
    replicas, digest = verdict(fleet["n1"], fleet)[0]
    assert replicas.startswith("final parameters differ between replicas: ")
    assert digest == ("final parameter digest eeeeeeeeeeee differs from dddddddddddd, the "
                      "digest of most of the run's 2 nodes running the same deterministic job")
    del fleet["b"]
    (replicas,) = verdict(fleet["n1"], fleet)[0]
    assert replicas.startswith("final parameters differ between replicas: ")


def test_a_node_that_reports_no_digest_fails():
    fleet = {n: train(node=n) for n in ("a", "b")}
    fleet["n1"] = train(digest=None)
    assert verdict(fleet["n1"], fleet) == ((
        "its document names no digest: the job it ran and its final parameters cannot be "
        "judged against the one the controller sent",), ())


# --- the figures the report shows --------------------------------------------------------

def test_the_figures_are_throughput_mfu_and_each_ranks_step_time():
    o = train(mfu=0.25, devices=[rank(0, step_s=0.02), rank(1, step_s=0.03)])
    assert figures({"data": o.data}) == [
        Figure("train_tokens_per_second", (), 1000.0, "Training throughput of the node"),
        Figure("train_mfu_ratio", (("basis", "measured_gemm"),), 0.25,
               "Model FLOPs utilisation over the node's measured GEMM rate"),
        Figure("train_step_seconds", (("device", "rank0"),), 0.02,
               "Median training step time per rank", better="lower"),
        Figure("train_step_seconds", (("device", "rank1"),), 0.03,
               "Median training step time per rank", better="lower")]


def test_figures_the_node_did_not_report_are_left_out():
    o = train(tokens_per_s=None, mfu=None, devices=[{**rank(0), "step_s": None}, rank(1)])
    assert figures({"data": o.data}) == [
        Figure("train_step_seconds", (("device", "rank1"),), 0.02,
               "Median training step time per rank", better="lower")]

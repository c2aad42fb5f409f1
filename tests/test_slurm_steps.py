"""Slurm at fleet scale, on a real Slurm test cluster: one allocation per run holding every
GPU as GRES, one step per check, the inter-node all-reduce one step with one task per
GPU, a faulty node failing alone, and the allocation burnin runs inside."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import nvmlemu
from slurmcluster import calls, logged_commands, option
from suiterun import CHECKS, REPO, SUITES, junit_cases, run_suite, script
from test_health import gpu
from test_interrupt import probes_on
from test_slurm import TINY, slurm_inventory

SINGLE = ("health", "sdc", "burn", "storage", "allreduce")


def jobs_left(cluster) -> str:
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=cluster.env(),
                          timeout=30).stdout.strip()


def test_the_suite_runs_in_one_allocation_one_step_per_check_holding_every_gpu(
        pytester, make_slurm, monkeypatch, tmp_path):
    cluster = make_slurm(3, gpus=2)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    # No CUDA here: each node's GPUs are emulated behind its python, which also records
    # what every step it runs in sees of Slurm's GPUs.
    scenario = nvmlemu.write_scenario(tmp_path / "gpus.json", {"devices": [gpu(0), gpu(1)]})
    inner = nvmlemu.python_wrapper(tmp_path / "py-gpus", scenario)
    seen = tmp_path / "steps.log"
    py = script(tmp_path / "py", f'echo "$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_STEP_ID '
                                 f'${{CUDA_VISIBLE_DEVICES:-none}}" >> {seen}\n'
                                 f'exec {inner} "$@"\n')
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", checks=TINY,
                          defaults={"python": py, "gpus": 2})
    result, reports = run_suite(pytester, inv)
    result.assert_outcomes(passed=18)
    names = [h.name for h in cluster.hosts.hosts]
    assert junit_cases(reports) == {n: dict.fromkeys(CHECKS, ("passed", "")) for n in names}

    (salloc,) = calls(log, "salloc")  # one allocation for the whole run
    assert "--exclusive" in salloc["argv"] and "--gres=gpu:2" in salloc["argv"]
    sruns = calls(log, "srun")
    job = option(sruns[0]["argv"], "jobid")
    assert {option(c["argv"], "jobid") for c in sruns} == {job}
    # One srun per check, whatever the node count: five single-node checks, one task per
    # node each, and the inter-node all-reduce, one task per GPU.
    assert len(sruns) == len(SINGLE) + 1, [c["argv"][:12] for c in sruns]
    assert Counter(option(c["argv"], "job-name") for c in sruns) == Counter(
        [f"burnin-{c}" for c in SINGLE] + ["burnin-allreduce"])
    layout = [(option(c["argv"], "ntasks"), option(c["argv"], "ntasks-per-node")) for c in sruns]
    assert layout == [("3", "1")] * len(SINGLE) + [("6", "2")]
    for c in sruns:  # each step's job holds the node alone, with both its GPUs
        assert "OverSubscribe=NO" in c["job"] and "TresPerNode=gres:gpu:2" in c["job"]
        assert "--gres=gpu:2" in c["argv"]
    steps = [ln.split() for ln in seen.read_text().splitlines()]
    assert {(node, jobid, cvd) for node, jobid, _, cvd in steps} == {
        (n, job, "0,1") for n in names}, "every probe saw both GPUs, inside the one job"
    per_step = Counter(step for _, _, step, _ in steps)
    assert sorted(per_step.values()) == [3] * len(SINGLE) + [6]
    health = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()
              if '"check": "health"' in ln]
    # Each probe ran in its own node's namespaces.
    assert {r["node"]: r["data"]["node"]["hostname"] for r in health} == {n: n for n in names}
    assert list((cluster.hosts.workdir / "remote").iterdir()) == [], "probes left behind"
    assert jobs_left(cluster) == "", "the allocation outlived the run"


def test_a_node_whose_task_dies_or_hangs_fails_alone_in_the_one_step(pytester, make_slurm,
                                                                     monkeypatch, tmp_path):
    cluster = make_slurm(3)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    dies = script(tmp_path / "py-dies", "echo 'GPU has fallen off the bus' >&2\nexit 3\n")
    hangs = script(tmp_path / "py-hangs", "exec sleep 3600\n")
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml",
                          nodes={"h2": {"python": dies}, "h3": {"python": hangs}},
                          checks={"health": {"timeout_s": 20}})
    result, reports = run_suite(pytester, inv, "-k", "health")
    cases = junit_cases(reports)
    assert cases["h1"]["health"] == ("passed", "")
    outcome, message = cases["h2"]["health"]
    assert outcome == "failure" and "exited with status 3" in message \
        and "GPU has fallen off the bus" in message, message
    outcome, message = cases["h3"]["health"]
    assert outcome == "failure" and "killed at its timeout of 20 s" in message, message
    assert len(calls(log, "srun")) == 1, "three nodes, three interpreters: still one step"
    assert probes_on(cluster.hosts, "sleep") == [], "the hung task outlived its step"
    assert jobs_left(cluster) == ""


def test_a_run_inside_an_sbatch_job_uses_that_job(make_slurm, monkeypatch, tmp_path):
    cluster = make_slurm(3)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    inv = slurm_inventory(cluster, tmp_path / "inv.yaml")
    out = tmp_path / "job.out"
    res = subprocess.run(
        ["sbatch", "--wait", "--exclusive", "-N3", "--partition=test", f"--output={out}",
         f"--chdir={REPO}", "--wrap", " ".join(
             [sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv), "--reports",
              str(tmp_path / "reports"), "-k", "health", "-p", "no:cacheprovider"])],
        capture_output=True, text=True, env=cluster.env(), timeout=600)
    text = out.read_text() if out.exists() else ""
    assert res.returncode == 0, res.stdout + res.stderr + text[-3000:]
    assert "3 passed" in text, text[-3000:]
    assert calls(log, "salloc") == [], "inside a job that holds the nodes: no new allocation"
    (srun,) = calls(log, "srun")
    batch_job = res.stdout.split()[-1]
    assert option(srun["argv"], "jobid") == batch_job


def test_xdist_workers_share_the_controllers_allocation(pytester, make_slurm, monkeypatch,
                                                        tmp_path):
    cluster = make_slurm(3)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", checks=TINY)
    result, reports = run_suite(pytester, inv, "-k", "health or sdc", "-n", "2")
    result.assert_outcomes(passed=6)
    assert len(calls(log, "salloc")) == 1
    sruns = calls(log, "srun")
    assert len(sruns) == 2 and len({option(c["argv"], "jobid") for c in sruns}) == 1
    assert jobs_left(cluster) == ""
    records = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()]
    assert len(records) == 6

"""Slurm at fleet scale, on a real Slurm test cluster: one allocation per run holding every
GPU as GRES, one step per check, the inter-node all-reduce one step with one task per
GPU, a faulty node failing alone, and the allocation burnin runs inside."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter

import nvmlemu
import pytest
from support import slurmcluster, testhosts
from support.replay import replay_python
from support.slurmcluster import calls, logged_commands, option
from support.suiterun import (
    GPU_CHECKS,
    NO_HYPOTHESIS,
    REPO,
    SUITES,
    junit_cases,
    run_suite,
    script,
)
from test_health import gpu
from test_interrupt import LONG, probes_on, quiet_python, wait_for
from test_slurm import TINY, jobs_left, slurm_inventory

from burnin.transports import srun_step

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

SINGLE = GPU_CHECKS[:-3]  # every check of a GPU node but the inter-node group checks


def test_the_suite_runs_in_one_allocation_one_step_per_check_holding_every_gpu(
        pytester, make_slurm, monkeypatch, tmp_path):
    cluster = make_slurm(3, gpus=2)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    # No CUDA here: each node's GPUs are emulated behind its python, which also records
    # what every step it runs in sees of Slurm's GPUs. h3's second GPU has a row remap
    # pending: the planted fault, which must fail h3 alone.
    seen = tmp_path / "steps.log"
    pythons = {}
    for h in cluster.hosts.hosts:
        second = gpu(1, remapped_rows={"pending": 1}) if h.name == "h3" else gpu(1)
        scenario = nvmlemu.write_scenario(tmp_path / f"{h.name}.json",
                                          {"devices": [gpu(0), second]})
        inner = nvmlemu.python_wrapper(tmp_path / f"py-gpus-{h.name}", scenario)
        # health's real probe reads the emulated GPUs (and the planted fault); the other
        # checks replay their recorded documents (tests/support/replay.py): what is tested here is
        # how Slurm runs them, not what they measure.
        replayed = replay_python(tmp_path / f"replay-{h.name}", real=("health",),
                                 python=inner)
        pythons[h.name] = {"python": script(
            tmp_path / f"py-{h.name}", f'echo "$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_STEP_ID '
                                       f'${{CUDA_VISIBLE_DEVICES:-none}}" >> {seen}\n'
                                       f'exec {replayed} "$@"\n')}
    checks = {**TINY, "pcie": {"seconds": 0.3, "block_mb": 4, "peer_fraction": 0}}
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", checks=checks, nodes=pythons,
                          defaults={"gpus": 2})
    result, reports = run_suite(pytester, inv)
    cases = junit_cases(reports)
    for n in ("h1", "h2"):
        assert cases[n] == dict.fromkeys(GPU_CHECKS, ("passed", "")), cases[n]
    outcome, message = cases["h3"]["health"]
    assert outcome == "failure" and "GPU 1 (GPU-1): row remap pending" in message, message
    assert cases["h3"]["allreduce_internode"][0] == "skipped"
    assert cases["h3"]["train_internode"][0] == "skipped"
    assert cases["h3"]["sdc"] == ("passed", "")

    (salloc,) = calls(log, "salloc")  # one allocation for the whole run
    assert "--exclusive" in salloc["argv"] and "--gres=gpu:2" in salloc["argv"]
    sruns = calls(log, "srun")
    job = option(sruns[0]["argv"], "jobid")
    assert {option(c["argv"], "jobid") for c in sruns} == {job}
    # One srun per check, whatever the node count: the single-node checks, one task per
    # node each, the inter-node all-reduce of the two healthy nodes, one task per GPU, and
    # their collectives and train job, one task per node (each probe starts a rank per GPU).
    assert len(sruns) == len(SINGLE) + 3, [c["argv"][:12] for c in sruns]
    assert Counter(option(c["argv"], "job-name") for c in sruns) == Counter(
        [f"burnin-{c}" for c in SINGLE] + ["burnin-allreduce", "burnin-collectives",
                                           "burnin-train"])
    layout = [(option(c["argv"], "ntasks"), option(c["argv"], "ntasks-per-node")) for c in sruns]
    assert layout == [("3", "1")] * len(SINGLE) + [("4", "2"), ("2", "1"), ("2", "1")]
    for c in sruns:  # each step's job holds the node alone, with both its GPUs
        assert "OverSubscribe=NO" in c["job"] and "TresPerNode=gres:gpu:2" in c["job"]
        assert "--gres=gpu:2" in c["argv"]
    steps = [ln.split() for ln in seen.read_text().splitlines()]
    names = [h.name for h in cluster.hosts.hosts]
    assert {(node, jobid, cvd) for node, jobid, _, cvd in steps} == {
        (n, job, "0,1") for n in names}, "every probe saw both GPUs, inside the one job"
    per_step = Counter(step for _, _, step, _ in steps)
    assert sorted(per_step.values()) == sorted([3] * len(SINGLE) + [4, 2, 2])
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
    # h3's "interpreter" is a shell that never runs the bootstrap, so no word of the
    # controller's reaches it: srun ends only when killed, once every task has settled
    # and srun's grace for ending by itself is over (10 s; 3 s here, the run is in-process).
    monkeypatch.setattr(srun_step, "STEP_GRACE_S", 3.0)
    dies = script(tmp_path / "py-dies", "echo 'GPU has fallen off the bus' >&2\nexit 3\n")
    hangs = script(tmp_path / "py-hangs", "exec sleep 3600\n")
    # h1's probe replays its recorded document (tests/support/replay.py): it answers at once, so
    # the hung one's timeout can be short without a healthy node ever meeting it.
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml",
                          nodes={"h2": {"python": dies}, "h3": {"python": hangs}},
                          checks={"health": {"timeout_s": 10}},
                          defaults={"python": replay_python(tmp_path / "replay")})
    result, reports = run_suite(pytester, inv, "-k", "health")
    cases = junit_cases(reports)
    assert cases["h1"]["health"] == ("passed", "")
    outcome, message = cases["h2"]["health"]
    assert outcome == "failure" and "exited with status 3" in message \
        and "GPU has fallen off the bus" in message, message
    outcome, message = cases["h3"]["health"]
    assert outcome == "failure" and "killed at its timeout of 10 s" in message, message
    assert len(calls(log, "srun")) == 1, "three nodes, three interpreters: still one step"
    assert probes_on(cluster.hosts, "sleep") == [], "the hung task outlived its step"
    assert jobs_left(cluster) == ""


def test_an_unsafe_workdir_fails_its_node_alone_and_srun_ends_its_options_with_dashes(
        pytester, make_slurm, monkeypatch, tmp_path):
    cluster = make_slurm(3)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "theirs").mkdir(mode=0o700)
    os.chown(tmp_path / "theirs", 4242, 4242)  # another local user made it first
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml",
                          nodes={"h2": {"workdir": str(tmp_path / "link")},
                                 "h3": {"workdir": str(tmp_path / "theirs")}})
    result, reports = run_suite(pytester, inv, "-k", "health")
    cases = junit_cases(reports)
    assert cases["h1"]["health"] == ("passed", "")
    for node, why in (("h2", f"{tmp_path}/link is a symbolic link"),
                      ("h3", f"{tmp_path}/theirs is owned by uid 4242, not by the login user")):
        outcome, message = cases[node]["health"]
        assert outcome == "failure" and "refusing to stage probes in workdir" in message \
            and why in message, message
    assert list((tmp_path / "elsewhere").iterdir()) == [], "nothing staged through the link"
    assert list((tmp_path / "theirs").iterdir()) == []
    (srun,) = calls(log, "srun")
    argv = srun["argv"]
    # srun's options, then `--`, then the remote command: nothing after it is srun's.
    dashes = argv.index("--")
    assert all(a.startswith("--") for a in argv[1:dashes]), argv[:dashes]
    assert argv[dashes + 1:dashes + 3] == [sys.executable, "-S"], argv[dashes:dashes + 3]
    assert jobs_left(cluster) == ""


def test_a_killed_controller_leaves_no_probe_and_no_allocation(make_slurm, tmp_path,
                                                               finding):
    cluster = make_slurm(3)
    inv = slurm_inventory(cluster, tmp_path / "inv.yaml", checks=LONG,
                          defaults={"python": quiet_python(tmp_path)})
    proc = subprocess.Popen([sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv),
                             "--reports", str(tmp_path / "reports"), "-k", "sdc", "-p",
                             "no:cacheprovider", "-q"], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**cluster.env(), **NO_HYPOTHESIS})
    wait_for(lambda: len(probes_on(cluster.hosts, "sdc")) >= 3, 180, "an sdc probe on each")
    os.killpg(proc.pid, signal.SIGKILL)  # no handler runs: the lifelines must do it
    proc.wait()
    took = wait_for(lambda: not probes_on(cluster.hosts, "sdc"), 30, "every probe gone")
    wait_for(lambda: jobs_left(cluster) == "", 30, "the allocation released")
    finding(f"srun lifeline: controller SIGKILLed, last sdc probe gone {took:.1f} s later, "
            "allocation released")


def test_a_run_inside_an_sbatch_job_uses_that_job_and_slurms_gpu_count(make_slurm,
                                                                        monkeypatch, tmp_path):
    """`gpus: auto`: each step asks for the GPUs Slurm declares on the node; an exclusive
    job holds them all even when it did not name them."""
    cluster = make_slurm(3, gpus=2)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    scenario = nvmlemu.write_scenario(tmp_path / "gpus.json", {"devices": [gpu(0), gpu(1)]})
    py = nvmlemu.python_wrapper(tmp_path / "py-gpus", scenario)
    inv = slurm_inventory(cluster, tmp_path / "inv.yaml", defaults={"gpus": "auto",
                                                                    "python": py})
    out = tmp_path / "job.out"
    res = subprocess.run(
        ["sbatch", "--wait", "--exclusive", "-N3", "--partition=test", f"--output={out}",
         f"--chdir={REPO}", "--wrap", " ".join(
             [sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv), "--reports",
              str(tmp_path / "reports"), "-k", "health", "-p", "no:cacheprovider"])],
        capture_output=True, text=True, env={**cluster.env(), **NO_HYPOTHESIS}, timeout=600)
    text = out.read_text() if out.exists() else ""
    assert res.returncode == 0, res.stdout + res.stderr + text[-3000:]
    assert "3 passed" in text, text[-3000:]
    assert calls(log, "salloc") == [], "inside a job that holds the nodes: no new allocation"
    (srun,) = calls(log, "srun")
    batch_job = res.stdout.split()[-1]
    assert option(srun["argv"], "jobid") == batch_job
    assert "--gres=gpu:2" in srun["argv"]


def test_xdist_workers_share_the_controllers_allocation(pytester, make_slurm, monkeypatch,
                                                        tmp_path):
    cluster = make_slurm(3)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    # The probes replay their recorded documents (tests/support/replay.py): what is tested
    # is who allocates and which job each step runs in.
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", checks=TINY,
                          defaults={"python": replay_python(tmp_path / "replay")})
    result, reports = run_suite(pytester, inv, "-k", "health or sdc", "-n", "2")
    result.assert_outcomes(passed=6)
    assert len(calls(log, "salloc")) == 1
    sruns = calls(log, "srun")
    assert len(sruns) == 2 and len({option(c["argv"], "jobid") for c in sruns}) == 1
    assert jobs_left(cluster) == ""
    records = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()]
    assert len(records) == 6


def test_the_slurm_scale_benchmark_runs_at_tiny_scale():
    problem = testhosts.missing_requirements() or slurmcluster.missing_requirements()
    if problem:  # as make_slurm: a skip on a developer's machine, a failure in CI
        (pytest.fail if os.environ.get("CI") else pytest.skip)(problem)
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "slurm_scale.py"),
                          "--hosts", "3", "--repeat", "1"], capture_output=True, text=True,
                         env={**os.environ, **NO_HYPOTHESIS}, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert re.fullmatch(r"burnin / bare = \d+\.\d\d", lines[-1]), lines
    burnin = next(ln for ln in lines if ln.strip().startswith("burnin "))
    # One step per check: srun and its helper, never one per node.
    assert int(re.search(r"srun processes at once (\d+)", burnin).group(1)) <= 2, burnin


ENV_PROBE = """import json, os, sys
sys.stdin.read(1)
print(json.dumps({k: os.environ.get(k) for k in (
    "SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_LOCALID",
    "CUDA_VISIBLE_DEVICES")}))
"""


def test_nodes_that_differ_in_gpu_count_each_get_a_step_holding_all_of_their_own(
        make_slurm, monkeypatch, tmp_path):
    """h1 and h2 have two GPUs as GRES, h3 one: a probe with one task per GPU (the
    inter-node all-reduce's layout) runs every node's tasks, each task on its own GPU of
    its node, and each step asks for no more GPUs per node than its nodes have."""
    from burnin.inventory.schema import load_inventory
    from burnin.transports.srun import SrunLauncher

    gpus = {"h1": 2, "h2": 2, "h3": 1}
    cluster = make_slurm(3, gpus=gpus)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    probes_dir = tmp_path / "probes"
    probes_dir.mkdir()
    (probes_dir / "env.py").write_text(ENV_PROBE)
    inv = load_inventory(slurm_inventory(
        cluster, tmp_path / "inv.yaml", defaults={"python": sys.executable},
        nodes={name: {"gpus": count} for name, count in gpus.items()}))
    nodes = list(inv.nodes)
    # Then h2 reports one GPU of its two (health saw one device): one task there, in
    # the step its allocation shares with h1's two.
    layouts = (gpus, {"h1": 2, "h2": 1, "h3": 1})
    launcher = SrunLauncher(nodes, probes_dir, "r1")
    try:
        outs = [launcher.run(nodes, "env", {n.name: b"{}" for n in nodes},
                             dict.fromkeys(gpus, 120.0), 1 << 16, tasks=dict(tasks))
                for tasks in layouts]
    finally:
        launcher.close()
    for tasks, out in zip(layouts, outs, strict=True):
        for name, results in out.items():
            assert not isinstance(results, str), (name, results)
            assert [r.exit_code for r in results] == [0] * tasks[name], (name, results)
            seen = [json.loads(r.stdout) for r in results]
            assert [t["SLURMD_NODENAME"] for t in seen] == [name] * tasks[name]
            assert sorted(t["SLURM_LOCALID"] for t in seen) == [
                str(i) for i in range(tasks[name])]
            # Every task sees every GPU of its node: the rank picks its own by SLURM_LOCALID.
            visible = {t["CUDA_VISIBLE_DEVICES"] for t in seen}
            assert visible == {",".join(map(str, range(gpus[name])))}, (name, visible)
    for c in calls(log, "srun"):
        held = {n for n in gpus if n in option(c["argv"], "nodelist").split(",")}
        asked = option(c["argv"], "gres")
        assert asked == f"gpu:{min(gpus[n] for n in held)}", (asked, held)
    assert jobs_left(cluster) == ""


def test_an_internode_all_reduce_over_nodes_that_differ_in_gpu_count_passes_all_of_them(
        pytester, make_slurm, monkeypatch, tmp_path):
    """The whole path: health learns each node's GPUs, the inter-node all-reduce gives
    each node one rank per GPU (two, two and one: a world of five), and every rank meets
    the others at the real rendezvous, whichever step its node runs in."""
    gpus = {"h1": 2, "h2": 2, "h3": 1}
    cluster = make_slurm(3, gpus=gpus)
    path, log = logged_commands(tmp_path / "bin")
    monkeypatch.setenv("PATH", path)
    nodes = {}
    for name, count in gpus.items():
        scenario = nvmlemu.write_scenario(tmp_path / f"{name}.json",
                                          {"devices": [gpu(i) for i in range(count)]})
        inner = nvmlemu.python_wrapper(tmp_path / f"py-gpus-{name}", scenario)
        nodes[name] = {"gpus": count, "python": replay_python(
            tmp_path / f"replay-{name}", real=("health",), python=inner)}
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", checks=TINY, nodes=nodes)
    result, reports = run_suite(pytester, inv, "-k", "health or allreduce_internode")
    cases = junit_cases(reports)
    for name in gpus:
        assert cases[name] == {"health": ("passed", ""),
                               "allreduce_internode": ("passed", "")}, cases[name]
    records = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()
               if '"check": "allreduce_internode"' in ln]
    figures = {r["node"]: r["data"]["figures"] for r in records}
    assert {n: f["ranks"] for n, f in figures.items()} == {
        "h1": [0, 1], "h2": [2, 3], "h3": [4]}, figures
    assert {f["group"]["members"] for f in figures.values()} == {3}
    # Each allocation holds nodes of one GPU count: the group is a step in each, at once.
    steps = [c for c in calls(log, "srun") if option(c["argv"], "job-name") ==
             "burnin-allreduce"]
    assert sorted((option(c["argv"], "nodelist"), option(c["argv"], "gres")) for c in steps) \
        == [("h1,h1,h2,h2", "gpu:2"), ("h3", "gpu:1")], steps
    assert jobs_left(cluster) == ""

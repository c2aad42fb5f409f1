"""The train check on real processes: the probe trains its model data parallel on this
machine's CPU (gloo, one process per rank), with faults planted below it by a
sitecustomize the node's interpreter loads before the probe (slowed matrix products, a
rank whose products are sometimes wrong, a rank whose update flips a bit), as a faulty
device would; and the GPU path's bf16 and process-per-device launch on GPUs emulated
below NVML."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import nvmlemu
import pytest
from support.suiterun import REPO, junit_cases, run_suite, script

from burnin.checks import CHECKS, Fleet, Judging
from burnin.checks.train import fleet_summary, judge
from burnin.inventory.schema import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

# A model small enough that a run is a few seconds, most of them torch's import.
TINY = {"steps": 6, "warmup_steps": 2, "d_model": 32, "layers": 1, "heads": 2, "seq_len": 16,
        "vocab": 64, "batch": 4, "gemm_n": 64, "gemm_s": 0.05, "lr": 0.01}
CPU = Node(name="n1", address="n1", transport="local", gpus=0)

# Below the probe, in each rank's process (RANK is set only there): torch as a faulty
# device would compute. {rank} and {body} are filled per fault.
SITE = """\
import os
if os.environ.get("RANK") in {ranks!r}:
{imports}{body}
"""
TORCH = "    import torch\n    import torch.nn.functional as F\n"
# Every matrix product of the model's layers returns 0.2 s late (a device at a small share
# of its speed: the host waits for it, as for a GPU; a sleep, so that a slow rank does not
# also take the shared cores from the healthy one beside it).
SLOW = """\
    import time
    _linear = F.linear
    def linear(*args, **kwargs):
        time.sleep(0.2)
        return _linear(*args, **kwargs)
    F.linear = linear
"""
# One element of every fifth product wrong by a little: training goes on, the loss
# falls, but the parameters are not the ones the healthy fleet computes.
WRONG = """\
    _linear, _calls = F.linear, [0]
    def linear(*args, **kwargs):
        out = _linear(*args, **kwargs)
        _calls[0] += 1
        if _calls[0] % 5 == 0:
            out = out.clone()
            out.view(-1)[3] += 0.5
        return out
    F.linear = linear
"""
# The optimizer's update flips one bit of one parameter at the third step on this rank
# (a fault in the update, after the all-reduce: the replica leaves the others). Planted in
# torch's functional AdamW, the update the probe calls (traincore.FlatAdamW).
def flip(*elements: int) -> str:
    """A rank's update that flips bit 4 of these elements of the flat parameters."""
    return f"""\
    import torch.optim.adamw as _adamw
    _update, _calls = _adamw.adamw, [0]
    def adamw(params, *args, **kwargs):
        out = _update(params, *args, **kwargs)
        _calls[0] += 1
        if _calls[0] == 3:
            with torch.no_grad():
                for i in {elements!r}:
                    params[0].view(torch.int32)[i] ^= 1 << 4
        return out
    _adamw.adamw = adamw
"""


FLIP = flip(11)


def python_with(tmp_path, name: str, body: str, ranks=("0", "1", "2"),
                imports: str = TORCH) -> str:
    """A node's python whose rank processes `ranks` load `body` (after `imports`) before
    the probe."""
    site = tmp_path / f"site-{name}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE.format(ranks=set(ranks), imports=imports,
                                                       body=body))
    return script(tmp_path / f"python-{name}",
                  f"PYTHONPATH={site} OMP_NUM_THREADS=1 exec {sys.executable} \"$@\"\n")


def train(python: str = sys.executable, gpus: int = 0, **settings) -> ProbeOutcome:
    node = Node(name="n1", address="n1", transport="local", gpus=gpus, python=python)
    out = run_probe(LocalTransport(node, REPO / "probes"), "train",
                    {"gpus": gpus, "settings": {**TINY, **settings}}, timeout_s=300,
                    schema=CHECKS["train"].schema)
    assert out.ok, out.reason
    return out


def judged(out: ProbeOutcome, gpus: int = 0, devices: int | None = None, **settings):
    return judge(CPU, out, Judging({**TINY, **settings}, fleet_summary(Fleet({"n1": out})),
                                   devices=devices, gpus=gpus))


def test_help_runs_without_torch_or_settings():
    res = subprocess.run([sys.executable, str(REPO / "probes" / "train.py"), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "6N + 12 L H Q T" in res.stdout


@pytest.mark.parametrize(("elements", "said"), [
    ((11,), "1 of tok.weight's 2048 elements differs from rank 0's (element 11)"),
    # the flat buffer's second tensor, pos.weight (16 positions x 32), two elements apart
    ((2048 + 5, 2048 + 9), "2 of pos.weight's 512 elements differ from rank 0's "
                           "(elements 5 to 9)")])
def test_a_replica_whose_update_flips_a_bit_is_named_by_rank_device_and_tensor(
        tmp_path, elements, said):
    out = train(python_with(tmp_path, "flip", flip(*elements), ranks=("1",)), ranks=3)
    (event, *_) = out.data["figures"]["diverged"]
    assert event["step"] == 3
    failures = judged(out, devices=1, ranks=3).failures
    assert any(f.startswith("replicas differ after step 3: rank 1 (cpu, ") and "holds" in f
               and f"; {said}; " in f for f in failures), failures
    assert not any("rank 0 (" in f or "rank 2 (" in f for f in failures), failures


def test_gpu_path_bf16_one_process_per_emulated_gpu(tmp_path):
    scenario = nvmlemu.write_scenario(tmp_path / "gpus.json", {"devices": [
        {"uuid": f"GPU-train{i}", "pci_bus_id": f"0000:{0x18 + i:02x}:00.0"}
        for i in range(2)]})
    out = train(nvmlemu.python_wrapper(tmp_path / "gpu-python", scenario), gpus=2)
    fig, ranks = out.data["figures"], out.data["devices"]
    assert fig["dtype"] == "bf16" and fig["world"] == 2
    assert [(r["rank"], r["device"], r["uuid"]) for r in ranks] == [
        (0, "cuda:0", "GPU-train0"), (1, "cuda:1", "GPU-train1")]
    # Two GPUs emulated on one shared CPU keep no pace between them: the straggler rule,
    # a matter of GPU speed, is held by the CPU tests below; here the path is.
    assert judged(out, gpus=2, devices=2, straggler_fraction=0.01).passed


def test_a_rank_that_does_not_finish_fails_the_node(tmp_path):
    crash = "    os._exit(3)\n"
    # Rank 1 ends before the probe's first line: torch's import (its cost) is not needed.
    out = train(python_with(tmp_path, "crash", crash, ranks=("1",), imports=""))
    assert any("rank 1 (cpu) exited with status 3" in e for e in out.data["errors"])
    assert not judged(out, devices=1).passed


def test_the_ranks_left_are_stopped_a_grace_after_a_later_rank_fails(monkeypatch):
    """Rank 1 fails while rank 0 still runs (as rank 0 waits in a collective for it): rank
    0 is stopped PEER_GRACE_S later, not left to its own end (the rendezvous timeout)."""
    monkeypatch.syspath_prepend(str(REPO / "probes"))
    import train as probe

    monkeypatch.setattr(probe, "PEER_GRACE_S", 0.5)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
             for code in ("import time; time.sleep(60)", "import sys; sys.exit(3)")]
    try:
        (first, _), (second, _) = probe.wait_all(procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert (first, second) == (-9, 3)


def test_a_healthy_node_trains_its_replicas_agree_and_slowed_wrong_and_straggling_fail(
        pytester, finding):
    """One run of the suite: the healthy node (its figures as the probe reports them) beside
    a slowed node, a node whose products are wrong and a node with a straggling rank."""
    healthy = script(pytester.path / "python-healthy",
                     f"OMP_NUM_THREADS=1 exec {sys.executable} \"$@\"\n")
    pythons = {"slow": python_with(pytester.path, "slow", SLOW),
               "wrong": python_with(pytester.path, "wrong", WRONG, ranks=("0",)),
               "lame": python_with(pytester.path, "lame", SLOW, ranks=("1",))}
    # The CPU default's model: its matrix products, not Python, take most of a step.
    # Four 'nodes' on two shared cores: only a node or rank far below the others is slow.
    # Two of the four are slow, so the median is halfway between a slow and a fast one:
    # the slowed node is below half of it while the fast ones run over 3x its speed
    # (they ran 10x to 35x: each of its products 0.2 s late), the healthy one above half of
    # it while it runs over a third of the slow ones' speed.
    settings = {**TINY, "d_model": 128, "heads": 4, "seq_len": 64, "vocab": 512, "batch": 8,
                "peer_fraction": 0.5, "straggler_fraction": 0.25}
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0, python: {healthy}}}
        checks:
          train: {json.dumps(settings)}
        nodes:
          - name: good
        """) + "".join(f"  - name: {n}\n    python: {p}\n" for n, p in pythons.items()))
    # lame's ranks on devices of their own (a straggler is a device the others wait for;
    # ranks sharing one CPU are one device, judged as one).
    inv.write_text(inv.read_text().replace(f"python: {pythons['lame']}\n",
                                           f"python: {pythons['lame']}\n    cpu_devices: 2\n"))
    # One node at a time: nodes sharing this machine's two cores would slow one another.
    result, reports = run_suite(pytester, inv, "-k", "train and not internode", "--fanout", "1")
    cases = {n: c["train"] for n, c in junit_cases(reports).items()}
    records = {r["node"]: r for r in map(json.loads, (reports / "latest" / "results.jsonl").open())}
    finding("train: tokens/s per node (forward and backward s per rank): " + ", ".join(
        f"{n} {r['data']['figures']['tokens_per_s']:.0f} "
        f"({'/'.join(str(d['compute_s']) for d in r['data']['devices'])})"
        for n, r in records.items()))
    # The healthy node trains: its replicas agree step by step and at the end, its loss
    # falls, its figures are the model's, and it passes.
    fig, ranks = records["good"]["data"]["figures"], records["good"]["data"]["devices"]
    assert not records["good"]["data"]["errors"] and [r["rank"] for r in ranks] == [0, 1]
    assert fig["diverged"] == [] and fig["checked_steps"] == 8
    assert len({r["digest"] for r in ranks}) == 1 and fig["digest"] == ranks[0]["digest"]
    assert fig["losses"][-1] < 0.95 * fig["losses"][0]
    assert fig["flops_per_token"]["total"] == \
        6 * (12 * 128 * 128 + 512 * 128) + 12 * 128 * 64
    assert 0 < fig["mfu"] and fig["mfu_basis"] == "measured GEMM"
    assert all(r["compute_s"] > 0 and r["comm_s"] > 0 for r in ranks)
    finding(f"train: healthy CPU node, 2 ranks: {fig['tokens_per_s']:g} tokens/s, MFU "
            f"{fig['mfu']:.1%} of the measured GEMM rate, loss {fig['losses'][0]:.3f} -> "
            f"{fig['losses'][-1]:.3f}")
    assert cases["good"] == ("passed", ""), cases["good"]
    # The same job gives the same bits on every node whose products are right, slow or not.
    digests = {n: r["data"]["figures"]["digest"] for n, r in records.items()}
    assert len({digests[n] for n in ("good", "slow", "lame")}) == 1, digests
    assert digests["wrong"] != digests["good"]
    outcome, message = cases["slow"]
    assert outcome == "failure" and "straggler:" in message and "tokens/s" in message
    outcome, message = cases["wrong"]
    assert outcome == "failure" and "final parameter digest" in message, message
    outcome, message = cases["lame"]
    assert outcome == "failure" and "straggler: rank 1 (cpu" in message, message


def test_the_flat_adamw_is_torch_optims_adamw_to_the_bit_without_importing_the_compiler():
    """traincore.FlatAdamW against torch.optim.AdamW as the probe built it before (weight
    decay 0; one tensor at a time as on a CPU, and fused as on a GPU: torch has a fused
    CPU kernel too), over the same gradients: the same parameters, moments and step count
    to the bit after every step, and torch._dynamo not imported until torch.optim.AdamW
    itself is constructed. In a fresh interpreter: an import is global."""
    code = textwrap.dedent("""\
        import sys
        sys.path.insert(0, sys.argv[1])
        import torch, traincore
        from torch import nn
        kernel, calls = torch._fused_adamw_, []
        def spy(*args, **kwargs):  # torch's fused AdamW kernel, counted
            calls.append(1)
            return kernel(*args, **kwargs)
        torch._fused_adamw_ = spy
        for fused in (False, True):
            g = torch.Generator().manual_seed(7)
            ours = nn.Parameter(torch.randn(1000, generator=g))
            theirs = nn.Parameter(ours.detach().clone())
            start = ours.detach().clone()
            opt = traincore.FlatAdamW(ours, 0.01, fused=fused)
            print("dynamo", "torch._dynamo" in sys.modules)
            ref = torch.optim.AdamW([theirs], lr=0.01, weight_decay=0.0,
                                    **({"fused": True} if fused else {"foreach": False}))
            same, kernel_calls = [], 0
            for _ in range(5):
                grad = torch.randn(1000, generator=g)
                ours.grad, theirs.grad = grad.clone(), grad.clone()
                calls.clear()
                opt.step()
                kernel_calls += len(calls)
                ref.step()
                st = ref.state[theirs]
                same.append(torch.equal(ours.detach().view(torch.int32),
                                        theirs.detach().view(torch.int32))
                            and torch.equal(opt.exp_avg.view(torch.int32),
                                            st["exp_avg"].view(torch.int32))
                            and torch.equal(opt.exp_avg_sq.view(torch.int32),
                                            st["exp_avg_sq"].view(torch.int32))
                            and torch.equal(opt.count, st["step"])
                            and (opt.count.dtype, opt.count.device)
                            == (st["step"].dtype, st["step"].device))
            print("same", all(same), "moved", not torch.equal(ours.detach(), start),
                  "fused", kernel_calls)
        """)
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "probes")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [
        "dynamo", "False", "same", "True", "moved", "True", "fused", "0",
        "dynamo", "True", "same", "True", "moved", "True", "fused", "5"]

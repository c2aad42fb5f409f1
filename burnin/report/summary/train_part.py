"""The train check's part of a node's section: what the job was, its speed and MFU, the
loss curve, each rank's step time split into compute and communication, and where the
replicas differed."""

from __future__ import annotations

from burnin.report.summary.charts import BAD, PALETTE, Axis, Chart
from burnin.report.summary.model import mapping, num, seq
from burnin.report.summary.sections import NodeView, charts, facts, note, table


def train(view: NodeView, record: dict) -> list:
    fig = mapping(record["data"].get("figures"))
    shape = mapping(fig.get("shape"))
    devices = [mapping(d) for d in seq(record["data"].get("devices"))]
    model = ", ".join(f"{k} {v}" for k, v in shape.items())
    mfu = num(fig.get("mfu"))
    out = [facts([("ranks", fig.get("world")), ("backend", fig.get("backend")),
                  ("precision", fig.get("dtype")), ("model", model),
                  ("steps", f"{fig.get('warmup_steps')} warm-up + {fig.get('steps')} timed"),
                  ("tokens/s", fig.get("tokens_per_s")),
                  ("model TFLOPS", fig.get("model_tflops")),
                  ("MFU", None if mfu is None else f"{mfu:.1%} of the node's measured GEMM "
                   f"rate ({fig.get('gemm_tflops')} TFLOPS)"),
                  ("final digest", str(fig.get("digest") or "")[:16])])]
    losses = [(i + 1, num(x)) for i, x in enumerate(seq(fig.get("losses")))]
    pts: list[tuple[float, float]] = [(i, x) for i, x in losses if x is not None]
    colour = BAD if view.verdict("train")[0] not in ("passed", "") else PALETTE[5]
    chart = Chart("loss per step", Axis("step"), Axis("loss"), 440, 210)
    chart.line("loss", pts, colour, 2, legend=False)
    out.append(charts(chart))
    rows = [[d.get("rank"), d.get("device"), d.get("step_s"), d.get("step_spread"),
             d.get("compute_s"), d.get("comm_s"), d.get("tokens_per_s"),
             d.get("gemm_tflops"), str(d.get("digest") or "")[:12]] for d in devices]
    out.append(table(["rank", "device", "step s (median)", "spread", "compute s", "comm s",
                      "tokens/s", "GEMM TFLOPS", "digest"], rows))
    events = seq(fig.get("diverged"))
    out.append(note(f"Replicas differed after step {mapping(events[0]).get('step')}.", "fail")
               if events else note("Replicas bitwise identical after every step.", "pass"))
    return out


def internode(view: NodeView, record: dict) -> list:
    """train_internode's part: the job at its scale, and this node's ranks in it."""
    fig = mapping(record["data"].get("figures"))
    group = mapping(fig.get("group"))
    rows = [[d.get("rank"), d.get("device"), d.get("step_s"), d.get("compute_s"),
             d.get("comm_s")] for d in map(mapping, seq(record["data"].get("devices")))]
    return [facts([("excluded", fig.get("excluded")), ("group failure", fig.get("group_failure")),
                   ("group nodes", num(group.get("members"))), ("ranks", num(group.get("world"))),
                   ("step s, slowest rank", num(group.get("step_s"))),
                   ("tokens/s at this scale", num(group.get("tokens_per_s"))),
                   ("straggler", fig.get("straggler"))])] + \
        ([table(["rank", "device", "step s", "compute s", "comm s"], rows)] if rows else [])

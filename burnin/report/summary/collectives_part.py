"""collectives_internode's part of a node's section: the group's figure per operation,
and the groups this node was tested in while a slow node was sought, with the busbw of
the operation sought."""

from __future__ import annotations

from burnin.report.summary.charts import fmt_bytes
from burnin.report.summary.model import mapping, num, seq
from burnin.report.summary.sections import NodeView, facts, table

OPS = ("all_gather", "reduce_scatter", "all_to_all", "send_recv")


def internode(view: NodeView, record: dict) -> list:
    fig = mapping(record["data"].get("figures"))
    group, floors = mapping(fig.get("group")), mapping(fig.get("floors"))
    ops = mapping(group.get("ops"))
    rows = [[op, num(mapping(ops.get(op)).get("busbw_gbps")),
             fmt_bytes(size) if (size := num(mapping(ops.get(op)).get("bytes"))) else "",
             num(floors.get(op))] for op in OPS if op in ops]
    tested = [[" + ".join(str(x) for x in seq(t.get("nodes"))), t.get("op"), t.get("kind"),
               "yes" if t.get("completed") else ["no", "fail"], num(t.get("busbw_gbps"))]
              for t in map(mapping, seq(fig.get("pairs")))]
    out = [facts([("excluded", fig.get("excluded")), ("group failure", fig.get("group_failure")),
                  ("group nodes", num(group.get("members"))),
                  ("floors from", fig.get("floor_source")),
                  ("wrong elements", fig.get("wrong_elements"))])]
    if rows:
        out.append(table(["operation", "group busbw GB/s", "at size", "floor GB/s"], rows))
    if tested:
        out.append(table(["group tested", "operation sought", "kind", "completed",
                          "busbw GB/s"], tested))
    return out

"""A shared-cause incident as every layer sees it: the record burnin/gate/incidents.py
decides, the ledger keeps (burnin/ledger/incidents.py) and the reports show
(burnin/report/incidents.py). Only the record lives here, below them all."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from burnin.core.safetext import safe_text

TOPOLOGY = "topology"
FRACTION = "fraction"


@dataclass(frozen=True)
class Incident:
    """One shared cause suspected: `check` failed on `nodes` out of `judged` judged."""

    check: str
    rule: str                    # TOPOLOGY or FRACTION
    nodes: tuple[str, ...]
    judged: int                  # nodes judged for the check
    component: str = ""          # "switch=leafB" for TOPOLOGY
    group: int = 0               # nodes of the component that ran the check
    elsewhere: int = 0           # failing nodes outside the component
    figures: dict[str, Any] = field(default_factory=dict)
    # As the ledger keeps it: its number (`burnin incident close ID`), and the run that
    # found it ('' in the outputs of that run itself).
    id: int = field(default=0, compare=False)
    run_id: str = field(default="", compare=False)

    @property
    def message(self) -> str:
        """The words each of its nodes' failure starts with, in junit.xml and everywhere."""
        if self.rule == TOPOLOGY:
            where = "none elsewhere" if not self.elsewhere else \
                f"{self.elsewhere} elsewhere"
            return (f"{self.component}: {self.check} failed on all {self.group} of its nodes, "
                    f"{where}: shared cause suspected, one incident; nobody quarantined "
                    "for it")
        return (f"shared cause suspected: {self.check} failed on {len(self.nodes)} of "
                f"{self.judged} nodes, too many to be independent faults; one incident, "
                "nobody quarantined for it")

    @property
    def still_open(self) -> str:
        """The words of an incident an earlier run found that is still open: its nodes are
        held out of admission until a person closes it or a run passes them all."""
        which = f"of run {self.run_id} still open" if self.run_id else "open"
        return (f"incident {self.id} {which} ({self.name}): its {len(self.nodes)} node(s) "
                "held out of admission until a run passes them all or "
                f"`burnin incident close {self.id} --reason ...`")

    @property
    def name(self) -> str:
        """A short name: the component, or the check's failure count."""
        return self.component or f"{self.check} on {len(self.nodes)} of {self.judged}"

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "rule": self.rule, "nodes": list(self.nodes),
                "judged": self.judged, "component": self.component, "group": self.group,
                "elsewhere": self.elsewhere, "figures": self.figures,
                **({"id": self.id, "run_id": self.run_id} if self.id else {})}

    @classmethod
    def of_dict(cls, d: Mapping[str, Any]) -> Incident:
        return cls(str(d["check"]), str(d["rule"]), tuple(map(str, d["nodes"])),
                   int(d["judged"]), safe_text(str(d.get("component", ""))),
                   int(d.get("group", 0)), int(d.get("elsewhere", 0)),
                   dict(d.get("figures") or {}), int(d.get("id", 0)),
                   safe_text(str(d.get("run_id", ""))))

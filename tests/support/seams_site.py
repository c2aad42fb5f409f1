"""The modules of a site's throwaway distribution, `site-widgets`: one check (widget),
one transport (pigeon), one ledger backend (scratch://) and one report writer
(widgets.json), each through burnin.api alone, and its entry points. Installed by
tests/test_seams_entry_points.py; type-checked by tests/test_seams_api_types.py."""

from __future__ import annotations

INIT = '"""A site\'s own burnin extensions (a test\'s throwaway distribution)."""\n'

WIDGET = '''\
"""widget: each widget of a node spins at least at the floor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from burnin.api import (Check, Figure, Judging, Measure, Node, Num, Obj, ProbeOutcome,
                        Setting, Str, Verdict, document)

SPIN = Measure("widget_spin_ratio", "", "widget spin, slowest", "widget spin {device}")


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "widget", (outcome.reason,))
    floor = float(j.settings["min_spin"])
    slow = tuple(f"{d['device']}: spin {d['spin']:g}, below the floor of {floor:g}"
                 for d in outcome.data["devices"] if d["spin"] < floor)
    return Verdict(node.name, "widget", slow)


def figures(record: dict[str, Any]) -> list[Figure]:
    return [Figure(SPIN.metric, (("device", d["device"]),), d["spin"], "How well it spins.")
            for d in record["data"]["devices"]]


CHECK = Check(name="widget", doc="every widget spins", judge=judge, figures=figures,
              schema=document(Obj(required=("device", "spin"), device=Str(64), spin=Num(0)),
                              Obj()),
              settings={"min_spin": Setting("positive", 0.5, "the spin floor")},
              probe_path=str(Path(__file__).with_name("widget_probe.py")),
              measures=(SPIN,))
'''

# Runs on the node beside burnin's probes (probelib); the spins come from the test.
WIDGET_PROBE = '''\
"""widget: how well each widget spins (a test's throwaway probe)."""
import os

import probelib

payload = probelib.start(__doc__, "widget")
if payload is not None:
    with open(os.environ["WIDGET_SPINS"]) as f:
        spins = dict(line.split() for line in f.read().splitlines())
    spin = float(spins[payload["node"]])
    probelib.emit("widget", {}, [{"device": "w0", "spin": spin}], {}, [])
'''

PIGEON = '''\
"""pigeon: carries the probe the local way, and leaves a feather in its loft each time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burnin.api import CommandResult, LocalTransport, TransportRow, setting


@dataclass(frozen=True)
class PigeonSettings:
    """`pigeon:` under defaults or a node."""

    loft: str = setting("str", "/nonexistent", shown=True)
    wings: float = setting("positive", 2.0)


class PigeonTransport(LocalTransport):
    def run(self, argv: list[str], stdin: bytes, *args: Any, **kwargs: Any) -> CommandResult:
        loft = Path(self.node.transport_settings["pigeon"].loft)
        (loft / f"{self.node.name}.{len(list(loft.iterdir()))}").write_text(str(argv))
        return super().run(argv, stdin, *args, **kwargs)


ROW = TransportRow(PigeonTransport, settings=PigeonSettings)
'''

SCRATCH = '''\
"""scratch://NAME: an SQLite ledger NAME.db in $SCRATCH_ROOT, which only this site knows."""

from __future__ import annotations

import os
from pathlib import Path

from burnin.api import LedgerUrlError, SqliteBackend


class ScratchBackend(SqliteBackend):
    example = "scratch://name"

    def __init__(self, location: str) -> None:
        name = location.split("://", 1)[1]
        super().__init__(Path(os.environ["SCRATCH_ROOT"]) / f"{name}.db")
        self.where = location

    @classmethod
    def locate(cls, text: str) -> str:
        if not text.split("://", 1)[1].isidentifier():
            raise LedgerUrlError(f"{text!r}: a scratch ledger is scratch://name")
        return text
'''

REPORT = '''\
"""widgets.json: each node's outcomes, made beside the run's other reports."""

from __future__ import annotations

import json

from burnin.api import Published


def write(p: Published) -> None:
    made = {n: sorted(o for o, _ in v.values()) for n, v in p.verdicts.items()}
    (p.run_dir / "widgets.json").write_text(json.dumps({"nodes": made}))
'''

MODULES = {"site_widgets/__init__.py": INIT, "site_widgets/widget.py": WIDGET,
           "site_widgets/widget_probe.py": WIDGET_PROBE, "site_widgets/pigeon.py": PIGEON,
           "site_widgets/scratch.py": SCRATCH, "site_widgets/report.py": REPORT}
ENTRY_POINTS = {
    "burnin.checks": {"widget": "site_widgets.widget:CHECK"},
    "burnin.transports": {"pigeon": "site_widgets.pigeon:ROW"},
    "burnin.ledger_backends": {"scratch": "site_widgets.scratch:ScratchBackend"},
    "burnin.report_writers": {"widgets.json": "site_widgets.report:write"},
}

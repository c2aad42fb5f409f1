"""burnin's public API: what an extension outside the repository imports.

A site's own check, transport, ledger backend or report writer is an entry point of a
distribution it installs (docs/developer/plugins.md):

    [project.entry-points."burnin.checks"]
    spin = "site_burnin.spin:CHECK"                # a Check
    [project.entry-points."burnin.transports"]
    courier = "site_burnin.courier:ROW"            # a TransportRow, or a Transport class
    [project.entry-points."burnin.ledger_backends"]
    vault = "site_burnin.vault:VaultBackend"       # a Backend subclass, by URL scheme
    [project.entry-points."burnin.report_writers"]
    "spins.csv" = "site_burnin.report:write"       # a function of a Published

Every name here keeps its meaning from one release to the next; what is not here is
burnin's inside and may change. burnin.testing holds what such an author tests with.

Layer 12: may import every layer below it; nothing of burnin imports it.
"""

from __future__ import annotations

from burnin.checks import Check, Figure, Fleet, Judging, Kind, Measure, Setting
from burnin.errors import BurninError, LedgerError, LedgerUrlError, PluginError
from burnin.extensions import (
    CHECKS_GROUP,
    GROUPS,
    LEDGER_GROUP,
    REPORTS_GROUP,
    TRANSPORTS_GROUP,
    installed,
    load,
    register,
)
from burnin.ledger.backends import Backend, SqliteBackend
from burnin.model.nodes import Node
from burnin.model.verdict import FailureKind, Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import Bool, Int, List, Num, Obj, Scalar, Str, document
from burnin.report.publish import Published, ReportWriter
from burnin.transports import (
    CommandResult,
    Launcher,
    NodeUnreachable,
    Transport,
    TransportRow,
    setting,
)
from burnin.transports.local import LocalTransport

__all__ = [
    # checks: a Check and what it is made of, what its judge is given and returns
    "Check", "Setting", "Kind", "Measure", "Figure", "Fleet", "Judging", "Verdict",
    "FailureKind", "ProbeOutcome", "Node",
    # the shape of a probe's document (Check.schema)
    "document", "Obj", "List", "Num", "Int", "Str", "Bool", "Scalar",
    # transports: a Transport (one node) or a Launcher (many as one), its settings
    "Transport", "Launcher", "TransportRow", "setting", "CommandResult", "NodeUnreachable",
    "LocalTransport",
    # ledger backends: an engine, chosen by a location's scheme
    "Backend", "SqliteBackend", "LedgerError", "LedgerUrlError",
    # report writers: a function of what a run publishes
    "ReportWriter", "Published",
    # the loader: the four groups, and registering by hand what a process holds
    "GROUPS", "CHECKS_GROUP", "TRANSPORTS_GROUP", "LEDGER_GROUP", "REPORTS_GROUP",
    "load", "register", "installed", "BurninError", "PluginError",
]

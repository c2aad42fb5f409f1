"""The words burnin's Slurm drains start with: the vocabulary that the run's quarantine
(burnin/gate/actions.py), its reconcile, `burnin node-check` and the Slurm transport
(burnin/transports/slurmctl.py) all read, kept below them so that none of them reads
another's. Sites' tools and the docs match on them: never change them."""

from __future__ import annotations

# How burnin's own drains start: burnin recognises its own drains by it.
REASON_PREFIX = "burnin:"
# `burnin node-check` (on the node, as Slurm's HealthCheckProgram) drains with this, and
# lifts only drains whose reason starts with it. The run never resumes such a drain, and
# a node the ledger holds gets the ledger's reason in its place (burnin/gate/actions.py),
# so that node-check cannot lift it: a run's reason never starts with this.
NODE_CHECK_PREFIX = "burnin: node-check:"

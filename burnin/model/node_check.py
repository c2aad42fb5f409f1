"""The vocabulary of `burnin node-check` that the inventory needs (its `node_check:`
section): below the inventory, so that loading an inventory never imports node-check
itself (burnin/nodecheck/)."""

from __future__ import annotations

from burnin.model.nodes import NodeCheckSettings
from burnin.model.settings import kinds_of

# node-check's checks, in the order it reports them. Three are named after the run's check
# whose settings they read (the same definition of healthy): fabric and dcgm; gpu, xid and
# host read health's.
NODE_CHECKS = ("gpu", "xid", "fabric", "storage", "host", "dcgm")
# The inventory's `node_check:` keys and their kinds (burnin/inventory/schema.py's KINDS),
# as NodeCheckSettings declares them.
NODE_CHECK_KEYS = kinds_of(NodeCheckSettings)

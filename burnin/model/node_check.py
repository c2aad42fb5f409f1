"""The vocabulary of `burnin node-check` that the inventory needs (its `node_check:`
section): below the inventory, so that loading an inventory never imports node-check
itself (burnin/nodecheck/)."""

from __future__ import annotations

# node-check's checks, in the order it reports them. Three are named after the run's check
# whose settings they read (the same definition of healthy): fabric and dcgm; gpu, xid and
# host read health's.
NODE_CHECKS = ("gpu", "xid", "fabric", "storage", "host", "dcgm")
# The inventory's `node_check:` keys and their kinds (burnin/inventory/schema.py's KINDS).
NODE_CHECK_KEYS = {"budget_s": "budget", "scontrol": "str", "min_free_gib": "nonnegative",
                   "dcgm": "dcgm_mode", "skip": "node_check_list", "state_dir": "abspath",
                   "textfile": "abspath"}

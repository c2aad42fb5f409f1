"""One run of the suite: which nodes and settings (run), the probes fanned out over the
fleet (launch, execution), a group check's groups formed, launched and searched for the
slow node (groups, group_search), each check's outcomes made once and shared by every
xdist worker (outcome_store), live progress (progress).

Layer 8: may import every layer below it: core, model, transports, ledger, probe, checks,
figures, inventory.
"""

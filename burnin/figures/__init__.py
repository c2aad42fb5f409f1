"""Figures drawn from probe records and kept runs: each check's key figures
(key_figures), what a node is worth to a synchronous job (goodput), and its track record
in the ledger's kept runs: failures per node-day, the speed trend, repeat offenders
(track_record).

Layer 6: may import every layer below it: core, model, transports, ledger, probe, checks.
"""

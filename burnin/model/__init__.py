"""The vocabulary every layer speaks: nodes and their settings (nodes), outcomes
(outcome), verdicts (verdict), GPU reference figures (gpu_reference), the XID table (xid),
the environment an inventory gives the probes (environment). Plain records and tables.

Layer 2: may import burnin.errors and burnin.core.
"""

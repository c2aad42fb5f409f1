"""The quarantine ledger: which nodes are out of production, why, and their history. One
API (api) over two engines (backends), its reads (read) and its memory of runs (runs).

Layer 3: may import burnin.errors, burnin.core and burnin.model only.
"""

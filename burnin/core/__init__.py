"""Building blocks with no burnin import at all: files written whole or not at all
(safefiles), text from nodes made safe (safetext), where the shipped probes, suites and
inventories are (shipped_files).

Layer 1: imports nothing of burnin but burnin.errors (layer 0).
"""

"""The inventory: a YAML file in (yamlsource keeps its line numbers), validated against
schema version 1 (schema), a list of Nodes out.

Layer 7: may import every layer below it: core, model, transports, ledger, probe, checks,
figures.
"""

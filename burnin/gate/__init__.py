"""Where verdicts become decisions: quarantine at the end of a run (quarantine), what
quarantine does besides the ledger (actions: drain in Slurm, a command hook), and which
nodes a junit.xml admits (admit).

Layer 9: may import every layer below it; never the report, the plugin or the CLI.
"""

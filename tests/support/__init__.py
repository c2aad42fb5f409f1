"""Helpers of burnin's own tests, none of them a test: real test hosts (testhosts: sshd in
network namespaces; slurmcluster: a real Slurm; pgserver: a real PostgreSQL; testdisks:
loop disks), a suite run in a subprocess (suiterun), probes that replay recorded documents
(replay, ledger_replay), judging helpers for the fast tier (judging), summary.html read
back (summarypage), and what a test requires of the machine (requires).
"""

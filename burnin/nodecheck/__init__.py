"""`burnin node-check`: the fast tier, run on a node by Slurm between burnin's runs.

Slurm runs it as HealthCheckProgram, Prolog or Epilog (docs/operator/node-check.md). It reads the
same inventory as the controller, finds its own node, and checks in seconds what can go
wrong between runs: GPUs through NVML, XIDs since its last check, fabric ports, the storage
mount, host facts, DCGM health. Every check runs under one time budget.

This is the one part of burnin installed on every node, so it imports little: the
standard library, burnin's inventory loader and judging rules (no torch, no paramiko, no
psycopg), and pynvml only on a node the inventory gives GPUs.

Layer 10, beside the report: may import every layer below it (the inventory, the checks'
rules, the gate's Slurm actions, the ledger); nothing of burnin imports it but the CLI.
Its settings' names live below the inventory, in burnin/model/node_check.py, and its drain
prefix in burnin/model/drain.py (NODE_CHECK_PREFIX), where the run reads it too.
"""

from __future__ import annotations

"""`burnin node-check`: the fast tier, run on a node by Slurm between burnin's runs.

Slurm runs it as HealthCheckProgram, Prolog or Epilog (docs/node-check.md). It reads the
same inventory as the controller, finds its own node, and checks in seconds what can go
wrong between runs: GPUs through NVML, XIDs since its last check, fabric ports, the storage
mount, host facts, DCGM health. Every check runs under one time budget.

This is the one part of burnin installed on every node, so it imports little: the
standard library, burnin's inventory loader and judging rules (no torch, no paramiko, no
psycopg), and pynvml only on a node the inventory gives GPUs. Nothing here is imported by
the rest of burnin but the CLI's dispatch and the Slurm prefix (NODE_CHECK_PREFIX).
"""

from __future__ import annotations

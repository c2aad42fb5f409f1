"""The `burnin` command: inventory check (and, as they come, admit, quarantine, report)."""

from __future__ import annotations

import argparse
import os
import sys

from burnin.inventory import InventoryError, load_inventory


def _inventory_check(args) -> int:
    try:
        inv = load_inventory(args.file)
    except InventoryError as e:
        print(f"invalid inventory:\n{e}", file=sys.stderr)
        return 2
    rows = [("NODE", "ADDRESS", "TRANSPORT", "GPUS", "GPU_MODEL", "LABELS")]
    for n in inv.nodes:
        port = f":{n.ssh.port}" if n.transport == "ssh" and n.ssh.port != 22 else ""
        rows.append((n.name, n.address + port, n.transport,
                     "auto" if n.gpus is None else str(n.gpus), n.gpu_model or "-",
                     ",".join(f"{k}={v}" for k, v in sorted(n.labels.items())) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"{inv.path}: cluster {inv.cluster}, {len(inv.nodes)} nodes, valid")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="burnin", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("inventory", help="work with inventories")
    inv_sub = inv.add_subparsers(dest="action", required=True)
    check = inv_sub.add_parser("check", help="validate FILE and print its expanded nodes")
    check.add_argument("file")
    check.set_defaults(func=_inventory_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `burnin ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

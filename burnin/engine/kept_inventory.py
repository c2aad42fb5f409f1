"""The run's copy of its inventory, kept in its run directory when it starts, so that
`burnin rejudge RUN_DIR` judges it again later with the same settings."""

from __future__ import annotations

from pathlib import Path

INVENTORY_COPY = "inventory.yaml"


def keep_inventory(run_dir: Path, inventory_file: Path) -> None:
    """The run's copy of its inventory, for rejudging it later with the same settings."""
    (run_dir / INVENTORY_COPY).write_bytes(inventory_file.read_bytes())

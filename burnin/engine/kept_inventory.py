"""The run's copy of its inventory, kept in its run directory when it starts, so that
`burnin rejudge RUN_DIR` judges it again later with the same settings.

The copy is an output like the others: every URL in it (the ledger's) is shown as every
message shows it (burnin/ledger/url.py: `shown`), its secrets masked. Rejudging opens no
ledger, so nothing it needs is lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from burnin.ledger.url import shown

INVENTORY_COPY = "inventory.yaml"


def keep_inventory(run_dir: Path, inventory_file: Path) -> None:
    """The run's copy of its inventory, its secrets masked, for rejudging it later."""
    (run_dir / INVENTORY_COPY).write_text(masked(inventory_file.read_text(
        errors="surrogateescape")), errors="surrogateescape")


def masked(text: str) -> str:
    """An inventory's YAML text with every URL's secrets masked: the text itself (its
    comments kept) where each such URL is written out whole in it, else the inventory
    written again from its parsed form (a URL folded or escaped in the YAML)."""
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # the run refused it already; nothing was read from it
    secret = {s: shown(s) for s in _strings(tree) if shown(s) != s}
    if all(s in text for s in secret):
        for s, mask in secret.items():
            text = text.replace(s, mask)
        return text
    return yaml.safe_dump(_masked_tree(tree, secret), sort_keys=False)


def _strings(tree: Any) -> Iterator[str]:
    if isinstance(tree, str):
        if "://" in tree:
            yield tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _strings(v)


def _masked_tree(tree: Any, secret: dict[str, str]) -> Any:
    if isinstance(tree, str):
        return secret.get(tree, tree)
    if isinstance(tree, dict):
        return {_masked_tree(k, secret): _masked_tree(v, secret) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_masked_tree(v, secret) for v in tree]
    return tree

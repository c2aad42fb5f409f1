"""What a run as root refuses to run: a command hook (`quarantine.command`,
`quarantine.shared_cause`'s `incident_command`) that root does not own alone
(burnin/core/rootfiles.py). The inventory itself is checked where it is read
(yamlsource.py)."""

from __future__ import annotations

import os
import shutil

from burnin.core.rootfiles import refusal, running_as_root, untrusted
from burnin.errors import InventoryError
from burnin.inventory.yamlsource import SourceError
from burnin.model.nodes import Inventory


def refuse_untrusted_commands(inventory: Inventory) -> None:
    """InventoryError naming the first command hook root must not run; nothing when not
    root, or when a hook's program is not found (the hook's own run says so)."""
    if not running_as_root():
        return
    q = inventory.quarantine
    for key, argv in (("quarantine.command", q.command),
                      ("quarantine.incident_command", q.incident_command)):
        if not argv:
            continue
        path = shutil.which(argv[0])
        if path is None:
            continue
        problem = untrusted(path) or untrusted(os.path.realpath(path))
        if problem:
            raise InventoryError([SourceError(inventory.path, None, key,
                                              refusal("the command hook", path, problem))])

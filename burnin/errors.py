"""The errors a user sees: each is turned into a message and a non-zero exit (the CLI's
exit codes, README "Exit codes") or a run that ends incomplete, never a traceback. Every
one is a BurninError; str() is the message, which names what to fix.

Layer 0: imports nothing; every layer may import it. A module raises its errors from here
and may name them where its callers look for them (burnin.ledger.api.LedgerError).
"""

from __future__ import annotations

from dataclasses import dataclass


class BurninError(Exception):
    """An error burnin reports to its user: the message says what is wrong and what to do.

    `burnin`'s commands end with `exit_code` when one reaches them (burnin.cli.main prints
    the message, never a traceback): 2, bad input or a state that cannot be used, and
    nothing was decided or changed (docs/reference/exit-codes.md)."""

    exit_code: int = 2


# --- files a user wrote: the inventory ---------------------------------------------------

@dataclass(frozen=True)
class SourceError:
    """One thing wrong with a file: where, which key, what was expected."""

    path: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        key = f" {self.key}:" if self.key else ""
        return f"{where}:{key} {self.message}"


class SourceErrors(BurninError):
    """Every error found in one file; str() gives one line per error."""

    def __init__(self, errors: list[SourceError]):
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


class InventoryError(SourceErrors):
    """The inventory is wrong; str() has one 'file:line: key: problem' line per error."""


# --- the quarantine ledger ---------------------------------------------------------------

class LedgerError(BurninError):
    """The ledger's database refused or could not be reached, or is not one burnin may
    open: a controller fault, never a node's. The message names the ledger and what the
    database said. Every ledger error below is one, so that a command catches one type."""


class LedgerUrlError(LedgerError, ValueError):
    """quarantine.ledger (or --ledger) is not a ledger burnin can open; the message says
    what is accepted."""


class LedgerMissing(LedgerError):
    """No ledger where one is opened, and it was not asked to be created: a ledger is
    created on purpose (`burnin ledger init`), never where one was expected."""


class LedgerNotEmpty(LedgerError):
    """`burnin ledger copy` would overwrite a ledger that holds something."""


class LedgerLost(LedgerError):
    """A ledger that existed is gone, emptied or lost tables: starting an empty one would
    release every node it held, so nothing opens it until a person restores it (or says to
    start anew)."""


class IncidentError(BurninError):
    """`burnin incident close`: no incident of that number, or it is closed already."""


# --- the controller and its run ----------------------------------------------------------

class NotReady(BurninError):
    """The controller cannot run the suite as configured; the message says what to fix."""


class ControllerFault(BurninError):
    """The controller itself failed (its reports or ledger cannot be written, the disk is
    full, a bug outside any one node's document): the run ends incomplete, no report of
    it is admissible, and no node is blamed."""

    exit_code = 3


class NotShipped(BurninError, RuntimeError):
    """This burnin has no such directory: a broken install."""


# --- reports and run directories a command reads ----------------------------------------

class ReportError(BurninError):
    """The report cannot be trusted at all: every node stays out (exit 2)."""


class RunError(BurninError):
    """A run directory that cannot be compared (no results.jsonl)."""


class RejudgeError(BurninError):
    """The run directory cannot be judged again (bad input: exit 2)."""


# --- node-check, on the node (burnin/nodecheck/) ------------------------------------------

class NodeCheckUsage(BurninError):
    """node-check was started where or how it cannot work (no inventory entry for this
    host, a mode it does not know): exit 2."""


class SlurmError(BurninError):
    """scontrol could not be run or refused: the message says why (node-check's exit 3:
    the node could not be read, drained or resumed)."""

    exit_code = 3


class SlurmUnreachable(BurninError):
    """`burnin run --rolling` cannot ask Slurm (scontrol show node failed): the loop stops
    with exit 2; a node it had drained stays drained as its own, and the next loop takes
    it up."""


class StateError(BurninError):
    """node-check's state (its kernel-log cursor) cannot be read or written: the message
    says where and why."""


# --- extensions from installed distributions (burnin/extensions.py) ------------------------

class PluginError(BurninError):
    """An installed distribution's extension cannot be used: two claim one name (or one
    claims a built-in's), or one does not import or is not what its group takes. The
    message names the entry point and its distribution: uninstall or fix that one."""

"""The one way the product opens its quarantine ledger: the plugin (a run, an xdist
worker), `burnin quarantine`, `burnin history`, `burnin admit` and `burnin ledger` all
call open_ledger, so that what is refused, and when a ledger may be created, is decided
here once.

A ledger is created on purpose, never where one was expected:
- `burnin ledger init LOCATION` (and `burnin ledger copy`'s destination) create one.
- A run creates one in a single case: no ledger is configured anywhere (no
  `quarantine.ledger`), so the run uses the default beside its reports
  (reports/quarantine.db), and nothing was ever there: an operator's first run on a
  laptop (inventories/localhost.yaml) needs no set-up. From then on its marker file guards
  it: a lost or emptied file is refused, never made again.
- Everything else (a configured ledger, any command, a re-validation of nothing) opens
  only a ledger that is there, whole: a missing one is LedgerMissing, a lost one
  LedgerLost (burnin/ledger/backends.py).

A ledger reached over the network must be reached over verified TLS (sslmode=verify-full
or verify-ca), unless the inventory says `quarantine.ledger_insecure: true`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from burnin.ledger.api import Ledger
from burnin.ledger.backends import LedgerUrlError, parse_location, transport_problem
from burnin.ledger.url import shown
from burnin.model.nodes import QuarantineSettings

DEFAULT_NAME = "quarantine.db"  # beside the run directories, where none is configured


@dataclass(frozen=True)
class LedgerSite:
    """Where a ledger is, and whether anyone named it (`default`: no quarantine.ledger
    and no --ledger, so it is the reports directory's quarantine.db)."""

    location: Path | str
    default: bool

    @property
    def shown(self) -> str:
        return str(self.location) if isinstance(self.location, Path) else \
            shown(self.location)


def ledger_site(configured: str | None, reports_dir: Path,
                given: str | None = None) -> LedgerSite:
    """The ledger a command or run means: `given` (--ledger, a command's argument), else
    the inventory's quarantine.ledger (`configured`), else reports_dir/quarantine.db.
    LedgerUrlError for a location burnin cannot open."""
    named = given or configured
    if named:
        return LedgerSite(parse_location(named), default=False)
    return LedgerSite(reports_dir / DEFAULT_NAME, default=True)


def open_ledger(site: LedgerSite, *, create: bool = False, first_run: bool = False,
                insecure: bool = False) -> Ledger:
    """Open the ledger at `site`. It is created only by an explicit act (`create`:
    `burnin ledger init`, a copy's destination) or, with `first_run` (a run), where it is
    the default one and nothing was ever there. LedgerUrlError for a network location
    without verified TLS unless `insecure` (the inventory's quarantine.ledger_insecure);
    LedgerMissing, LedgerLost, LedgerError as Ledger raises them."""
    problem = transport_problem(site.location)
    if problem and not insecure:
        raise LedgerUrlError(f"the quarantine ledger {site.shown}: {problem}")
    return Ledger(site.location, create=create or (first_run and site.default))


def open_configured(quarantine: QuarantineSettings | None, reports_dir: Path,
                    given: str | None = None, *, create: bool = False,
                    first_run: bool = False) -> Ledger:
    """The ledger an inventory's quarantine settings name (`given` first; with no
    inventory, `quarantine` None: `given` or the default), opened as open_ledger does,
    with that inventory's quarantine.ledger_insecure: what the run and every command that
    takes --inventory open."""
    site = ledger_site(quarantine.ledger if quarantine else None, reports_dir, given=given)
    return open_ledger(site, create=create, first_run=first_run,
                       insecure=bool(quarantine and quarantine.ledger_insecure))


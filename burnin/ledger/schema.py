"""The quarantine ledger's schema, in the words of any engine: its tables, the numbered
steps that make them (each applied once, recorded in `ledger_schema`; burnin/ledger/
backends.py applies them) and the indexes re-made whenever missing. A new step is a new
number here and SCHEMA_VERSION raised with it."""

from __future__ import annotations

from burnin.ledger import incidents as incidents_ledger

SCHEMA_VERSION = 5


def _migrations(real: str, serial: str) -> dict[int, tuple[str, ...]]:
    """The schema's steps, in either engine's words (`real`, `serial` differ)."""
    return {
        1: (f"""CREATE TABLE IF NOT EXISTS quarantine (
                node TEXT PRIMARY KEY,
                cluster TEXT NOT NULL,
                checks TEXT NOT NULL,         -- JSON list of failed checks
                reasons TEXT NOT NULL,        -- JSON list of failure messages
                figures TEXT NOT NULL,        -- JSON: key figures, per check
                run_id TEXT NOT NULL,
                since {real} NOT NULL,
                updated {real} NOT NULL,
                set_by TEXT NOT NULL,
                clean_runs INTEGER NOT NULL DEFAULT 0,
                drained_by_burnin INTEGER NOT NULL DEFAULT 0)""",
            f"""CREATE TABLE IF NOT EXISTS history (
                id {serial},
                node TEXT NOT NULL,
                time {real} NOT NULL,
                event TEXT NOT NULL,  -- quarantined, failed-again, clean, released, ...
                who TEXT NOT NULL,
                why TEXT NOT NULL,
                run_id TEXT)"""),
        # `burnin quarantine add`: an operator's entry, released only by hand
        2: ("ALTER TABLE quarantine ADD COLUMN by_hand INTEGER NOT NULL DEFAULT 0",),
        # Every run's verdict on every node it judged, kept for quarantine.keep_runs_days:
        # `burnin history`, failures per node-day, the speed trend (burnin/figures/track_record.py).
        3: (f"""CREATE TABLE IF NOT EXISTS runs (
                id {serial},
                node TEXT NOT NULL,
                cluster TEXT NOT NULL,
                run_id TEXT NOT NULL,
                time {real} NOT NULL,
                outcome TEXT NOT NULL,   -- the node's worst: passed, failed, error
                checks TEXT NOT NULL,    -- JSON list of the checks it did not pass
                reasons TEXT NOT NULL,   -- JSON list of their messages, each bounded
                speed {real},            -- relative speed (burnin/figures/goodput.py), if known
                figures TEXT NOT NULL)   -- JSON: what set the speed""",),
        # Shared-cause incidents (burnin/gate/incidents.py): its SQL lives with its methods.
        4: incidents_ledger.migration(real, serial),
        # An incident is open until a person or a passing run closes it.
        5: incidents_ledger.closing_migration(real),
    }


# Not version steps: re-made whenever missing (an index dropped by hand), each once the
# schema has the step that makes its table.
ENSURE = ((1, "history_node", "CREATE INDEX IF NOT EXISTS history_node ON history (node, id)"),
          (3, "runs_node", "CREATE INDEX IF NOT EXISTS runs_node ON runs (node, time)"),
          (3, "runs_time", "CREATE INDEX IF NOT EXISTS runs_time ON runs (time)"))
VERSION_TABLE = ("CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER PRIMARY KEY, "
                 "applied {real} NOT NULL, how TEXT NOT NULL)")


TABLES = ("quarantine", "history", "runs", "incidents", "ledger_schema")

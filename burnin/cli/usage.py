"""What `burnin --help` and each command's --help tell the person who runs it: what the
command does, its exit codes, an example. Kept apart from the code's docstrings, which
are written for developers; docs/reference/exit-codes.md has every code in one table.

A command is named by its words on the command line ("quarantine list"); `apply` puts
its text on the parser that build_parser made, so a command defined in another module
(burnin/cli/ledger.py, incident.py, remediate.py, burnin/nodecheck/run.py) reads the same
way. tests/test_cli_errors.py fails for a command without a row here."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
burnin: acceptance tests that decide, node by node, whether GPU servers may enter
production. Check an inventory, run the suites against it, then admit the nodes that
passed; a node that fails is quarantined until it passes again or a person releases it.

Example:
  burnin inventory check inventories/my-fleet.yaml
  burnin run --inventory inventories/my-fleet.yaml
  burnin admit reports/latest/junit.xml --inventory inventories/my-fleet.yaml

Exit codes: 0 done, nothing wrong; 1 done, and something was found (a node failed, was
not admitted, a verdict would change); 2 bad input (a file, an inventory, a ledger or a
report that cannot be used): nothing was decided or changed. `burnin run` keeps pytest's
codes (3 controller fault, 4 usage or invalid inventory). Each command's --help gives its
own; docs/reference/exit-codes.md has them all."""

BAD_INPUT = "2 bad input (the message says what to fix): nothing was decided or changed"

# command words: (what it does, its exit codes, an example)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": (
        "Run the shipped acceptance suites under pytest against the inventory's nodes "
        "(with no --inventory: this machine). Every argument after `run` is pytest's or "
        "burnin's plugin's; the options are listed below under 'burnin'. With --rolling, "
        "re-validate a fleet in production in waves (docs/operator/rolling.md).",
        "0 no node failed; 1 some node failed a check; 2 interrupted; 3 controller "
        "fault (no node blamed); 4 usage error, invalid inventory or controller not "
        "ready (no node touched); 5 no test collected",
        "burnin run --inventory inventories/my-fleet.yaml --reports /var/lib/burnin"),
    "inventory check": (
        "Validate an inventory and print its nodes as burnin expands them (hostlists, "
        "defaults, each node's transport settings).",
        f"0 valid; {BAD_INPUT}",
        "burnin inventory check inventories/my-fleet.yaml --json"),
    "admit": (
        "Decide which nodes a run's junit.xml lets into production, and write them to "
        "admitted.txt beside the report. With --inventory, nodes it lists that the report "
        "lacks, nodes in its quarantine ledger and nodes of an open incident stay out.",
        "0 every node admitted; 1 some node not admitted; 2 the report cannot be trusted "
        "or bad input: nobody admitted",
        "burnin admit reports/latest/junit.xml --inventory inventories/my-fleet.yaml"),
    "quarantine list": (
        "List the nodes in the quarantine ledger, with why and since which run.",
        f"0 listed; {BAD_INPUT}",
        "burnin quarantine list --inventory inventories/my-fleet.yaml"),
    "quarantine show": (
        "Show nodes' ledger entries and their history.",
        f"0 shown; 1 a node the ledger never knew; {BAD_INPUT}",
        "burnin quarantine show 'gpu[001-004]' --inventory inventories/my-fleet.yaml"),
    "quarantine add": (
        "Quarantine nodes by hand (released only by hand); with --inventory, its "
        "quarantine.actions run too (a Slurm drain).",
        f"0 quarantined; 1 an action failed (the ledger entry stays); {BAD_INPUT}",
        "burnin quarantine add gpu017 --reason 'fan noise' --inventory fleet.yaml"),
    "quarantine release": (
        "Take nodes out of quarantine by hand.",
        f"0 every named node released; 1 a named node was not in quarantine; {BAD_INPUT}",
        "burnin quarantine release gpu017 --reason 'fan replaced' --inventory fleet.yaml"),
    "quarantine reconcile": (
        "Drain in Slurm every node of --inventory that the ledger holds and Slurm has in "
        "service, with its ledger reason (an administrator's drain stays). For a timer.",
        f"0 nothing to do or every such node drained; 1 some could not be drained; "
        f"{BAD_INPUT}",
        "burnin quarantine reconcile --inventory inventories/my-fleet.yaml"),
    "history": (
        "Nodes over time: quarantined, failed again, clean, released, every run's "
        "verdict and speed, and whether each is a repeat offender. With --watch, the "
        "replace-soon list (docs/operator/replace-soon.md).",
        f"0 shown (--watch: no node on the list); 1 a node the ledger never knew (--watch: "
        f"some node on the list); {BAD_INPUT}",
        "burnin history gpu017 --inventory inventories/my-fleet.yaml"),
    "ledger init": (
        "Create a quarantine ledger: the only command that does (docs/operator/ledger.md).",
        "0 created, or already there whole; 2 it cannot be created, or one there is lost: "
        "nothing created",
        "burnin ledger init postgresql://burnin@db.example/burnin"),
    "ledger copy": (
        "Copy a ledger, history included, into another (SQLite <-> PostgreSQL).",
        "0 copied; 2 a ledger cannot be opened, read or written, or the destination is "
        "not empty (without --force): nothing copied",
        "burnin ledger copy reports/quarantine.db postgresql://burnin@db.example/burnin"),
    "incident list": (
        "List the open shared-cause incidents (--all: closed ones too); their nodes are "
        "held out of admission (docs/operator/incidents.md).",
        f"0 listed; {BAD_INPUT}",
        "burnin incident list --inventory inventories/my-fleet.yaml"),
    "incident close": (
        "Close an incident: its nodes are held out of admission no more.",
        f"0 closed; 2 no open incident of that number, or {BAD_INPUT}",
        "burnin incident close 3 --reason 'switch replaced' --inventory fleet.yaml"),
    "remediate": (
        "Climb the remediation ladder for every node the ledger holds: GPU reset, reboot, "
        "RMA, each step proven by re-validation (docs/operator/remediation.md).",
        f"0 every held node healed, or none held; 1 some node still held; {BAD_INPUT}; "
        "3 another burnin remediate is running, nothing done",
        "burnin remediate --inventory inventories/my-fleet.yaml --dry-run"),
    "node-check": (
        "On a node, between runs: the fast checks (NVML, XIDs since the last check, "
        "fabric ports, storage mount, host, DCGM health), as Slurm's HealthCheckProgram, "
        "Prolog or Epilog (docs/operator/node-check.md).",
        "0 the node is fit; 1 something found; 2 invalid inventory, node not in it, or "
        "run where it cannot work; 3 as HealthCheckProgram: scontrol could not read, "
        "drain or resume the node",
        "burnin node-check --inventory /etc/burnin/fleet.yaml --mode health"),
    "report": (
        "Render summary.html and metrics.prom again from a run directory (its junit.xml "
        "and results.jsonl).",
        "0 rendered; 2 no or unreadable junit.xml",
        "burnin report reports/latest"),
    "compare": (
        "Per node, the figures that moved between two runs by more than --threshold.",
        "0 no figure regressed; 1 a figure regressed; 2 a run directory without "
        "results.jsonl",
        "burnin compare reports/run-a reports/run-b --threshold 0.05"),
    "rejudge": (
        "Judge a run again from its results.jsonl: with its own settings, or what-if with "
        "another --inventory.",
        "0 every verdict as the run's; 1 some verdict would change (listed); 2 no trusted "
        "junit.xml, unreadable results.jsonl, or an inventory lacking the run's nodes",
        "burnin rejudge reports/latest --inventory inventories/stricter.yaml"),
}


def commands(parser: argparse.ArgumentParser, words: str = "") -> \
        dict[str, argparse.ArgumentParser]:
    """{"quarantine list": its parser, ...}: every command that runs something (a leaf of
    the parser's tree), found from the parser, so that a command added anywhere is in."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out |= commands(child, f"{words} {name}".strip())
    return out or {words: parser}


def epilog(command: str) -> str:
    _, codes, example = COMMANDS[command]
    return f"Exit codes: {codes}.\n\nExample:\n  {example}"


def apply(parser: argparse.ArgumentParser) -> None:
    """Each command's description and epilog from COMMANDS (a command without a row keeps
    argparse's: the test names it)."""
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for words, child in commands(parser).items():
        if words in COMMANDS:
            child.description = COMMANDS[words][0]
            child.epilog = epilog(words)
            child.formatter_class = _Formatter


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The description wrapped to the terminal; the epilog's example kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("Exit codes:"):
            codes, _, example = text.partition("\n\n")
            return argparse.HelpFormatter._fill_text(self, codes, width, indent) + \
                "\n\n" + example
        return argparse.HelpFormatter._fill_text(self, text, width, indent)

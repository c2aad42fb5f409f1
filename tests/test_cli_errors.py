"""Every `burnin` command, found from the parser (so a command added anywhere is walked
too), given bad input: a missing file, a bad inventory, a ledger URL burnin cannot open, a
report that is not one. Each ends with its documented exit code and a message, never a
traceback (burnin/cli/__init__.py's main is the one boundary). And every command's --help
is written for its user: what it does, its exit codes, an example, never a developer's
docstring (burnin/cli/usage.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from burnin.cli import build_parser, main, usage

REPO = Path(__file__).resolve().parent.parent
COMMANDS = usage.commands(build_parser())
# `run` hands its arguments to pytest (main never parses them): walked in a subprocess.
IN_PROCESS = sorted(set(COMMANDS) - {"run"})
VARIANTS = ("missing file", "bad inventory", "bad ledger URL", "bad report")
# What each command exits with for bad input (docs/reference/exit-codes.md): 2, but node
# -check's own and `burnin run`'s, which are pytest's (4: usage, invalid inventory).
DOCUMENTED = {"run": 4}


@pytest.fixture
def bad(tmp_path: Path) -> dict[str, Path]:
    inventory = tmp_path / "bad-inventory.yaml"
    inventory.write_text("cluster: c\nnodes:\n  - name: [not, a, name]\n    gpus: many\n")
    report = tmp_path / "bad-run"
    report.mkdir()
    (report / "junit.xml").write_text("<testsuites><testsuite name='x'>")  # cut short
    (report / "inventory.yaml").write_text(inventory.read_text())
    return {"missing": tmp_path / "nowhere" / "missing.yaml", "inventory": inventory,
            "report": report, "junit": report / "junit.xml", "tmp": tmp_path}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def argv_for(words: str, variant: str, bad: dict[str, str]) -> list[str] | None:
    """A command line of `words` with one kind of bad input, or None when the command
    takes no input of that kind."""
    parser = COMMANDS[words]
    options = _options(parser)
    url = "mysql://burnin@db.example/burnin"  # no ledger burnin can open
    argv = words.split()
    used = False
    for action in parser._actions:
        if action.option_strings or action.nargs == 0:
            continue
        if action.type is int:
            argv.append("1")
        elif action.dest in ("nodes",):
            argv.append("gpu[001-002]")
        elif variant == "bad ledger URL" and action.dest in ("location", "src", "dst"):
            argv.append(url)
            used = True
        elif variant == "bad report" and action.dest in ("junit",):
            argv.append(str(bad["junit"]))
            used = True
        elif variant == "bad report":
            argv.append(str(bad["report"]))
            used = True
        else:
            argv.append(str(bad["missing"]))
            used = used or variant == "missing file"
    if variant == "bad inventory" and "--inventory" in options:
        argv += ["--inventory", str(bad["inventory"])]
        used = True
    elif variant == "bad ledger URL" and "--ledger" in options:
        argv += ["--ledger", url]
        used = True
    elif "--inventory" in options and (options["--inventory"].required or
                                       variant == "missing file"):
        argv += ["--inventory", str(bad["missing"])]
        used = used or variant == "missing file"
    for option in ("--reason",):
        if option in options and options[option].required:
            argv += [option, "a test"]
    return argv if used else None


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code if isinstance(e.code, int) else 2
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_the_walk_finds_every_command_from_the_parser():
    """Commands of every module are in the walk: the ones cli/__init__.py defines, and
    those ledger.py, incident.py and node-check add on the same parser."""
    assert {"inventory check", "admit", "quarantine list", "quarantine reconcile",
            "history", "ledger init", "ledger copy", "incident close", "node-check",
            "report", "compare", "rejudge", "run"} <= set(COMMANDS)
    assert "quarantine" not in COMMANDS  # a group of commands is no command


# Every (command, kind of bad input) the command takes, its paths filled in by the test.
PLACES = {k: "{" + k + "}" for k in ("missing", "inventory", "report", "junit")}
CASES = [(w, v) for w in IN_PROCESS for v in VARIANTS if argv_for(w, v, PLACES)]


def test_every_command_is_walked_with_some_bad_input():
    assert {w for w, _ in CASES} == set(IN_PROCESS)
    assert {v for _, v in CASES} == set(VARIANTS)


@pytest.mark.parametrize(("words", "variant"), CASES)
def test_bad_input_is_a_message_and_a_documented_exit_never_a_traceback(
        words, variant, bad, capsys, monkeypatch):
    monkeypatch.chdir(bad["tmp"])  # a default reports/ ledger is never the checkout's
    argv = [a.format(**{k: str(v) for k, v in bad.items()})
            for a in argv_for(words, variant, PLACES) or ()]
    rc, said = run_main(argv, capsys)  # an exception escaping main fails the test here
    assert rc == DOCUMENTED.get(words, 2), (argv, said)
    assert said.strip() and "Traceback" not in said, (argv, said)


def test_a_burnin_error_from_any_command_is_said_with_its_exit_code(capsys, monkeypatch):
    """The boundary takes every BurninError, with the exit code its class declares."""
    from burnin import errors

    class Late(errors.BurninError):
        exit_code = 7

    def fails(args):
        raise Late("what went wrong, and what to do")

    parser = build_parser()
    monkeypatch.setattr("burnin.cli.build_parser", lambda: parser)
    COMMANDS_NOW = usage.commands(parser)
    COMMANDS_NOW["report"].set_defaults(func=fails)
    rc, said = run_main(["report", "x"], capsys)
    assert (rc, said) == (7, "burnin report: what went wrong, and what to do\n")
    assert errors.LedgerLost.exit_code == 2 and issubclass(errors.LedgerLost,
                                                           errors.LedgerError)


def test_burnin_run_with_a_missing_inventory_is_a_usage_error_without_traceback(bad):
    done = subprocess.run([sys.executable, "-m", "burnin", "run", "--inventory",
                           str(bad["missing"]), "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=120, cwd=bad["tmp"],
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == DOCUMENTED["run"], done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert str(bad["missing"]) in done.stdout + done.stderr


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv + ["--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("words", [""] + IN_PROCESS)
def test_every_help_is_written_for_its_user(words, capsys):
    text = _help(words.split(), capsys)
    assert "Layer" not in text and "pyproject" not in text, text
    assert "Exit codes:" in text and "Example:" in text, \
        f"`burnin {words} --help` says no exit codes or example: give it a row in " \
        "burnin/cli/usage.py's COMMANDS"


def test_burnin_run_help_says_burnin_first(bad):
    done = subprocess.run([sys.executable, "-m", "burnin", "run", "--help"],
                          capture_output=True, text=True, timeout=120, cwd=bad["tmp"],
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    ours = done.stdout.partition("pytest's help follows")[0]
    assert done.returncode == 0 and ours, done.stderr
    assert "Exit codes:" in ours and "Example:" in ours and "Layer" not in ours
    assert "--inventory" in done.stdout  # burnin's plugin's options, in pytest's help


def test_the_plugin_turns_a_burnin_error_at_configure_time_into_a_usage_error(
        tmp_path, monkeypatch, capsys):
    """pytest's side of the boundary: a BurninError while the run is set up (here, planted
    where the nodes are chosen) is pytest's usage error (4) with its message."""
    from burnin import errors
    from burnin.cli import run_suites

    def planted(*args, **kwargs):
        raise errors.BurninError("planted: what to fix")

    monkeypatch.setattr("burnin.plugin.select_nodes", planted)
    monkeypatch.chdir(tmp_path)
    rc = run_suites(["--inventory", str(REPO / "inventories" / "localhost.yaml"),
                     "--reports", str(tmp_path / "reports"), "--collect-only", "-q",
                     "-p", "no:cacheprovider", "-p", "no:randomly"])
    said = capsys.readouterr()
    assert rc == 4 and "planted: what to fix" in said.err + said.out
    assert "Traceback" not in said.err + said.out

"""README's two commands are the contract with a newcomer; CI runs the second exactly. The
operator guide's snippets, wherever they now live (README or docs/), run or parse here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support import docpages

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


def test_readme_starts_with_the_suite_and_the_test_command():
    suite, tests = readme_commands()
    assert "pytest suites/" in suite
    # Three workers (xdist) on 2 cores: the integration tests mostly wait on real hosts
    # and daemons (with two, the cores were busy about 60% of the run).
    assert tests.endswith("pytest tests/ -n 4 --dist worksteal")


def test_ci_runs_exactly_the_readme_test_command():
    ci = [ln for ln in (REPO / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.lstrip().startswith("#")]
    assert ci[-1] == readme_commands()[1]


def test_lint_is_clean():
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "burnin", "probes", "suites",
                          "tests", "benchmarks"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# --- the operator guide: what can be checked without the operator's machines ----------
# README.md and the pages under docs/ (tests/support/docpages.py): a snippet is checked
# wherever it sits, and one a test looks for must be there.

def code_blocks(lang: str) -> list[str]:
    return docpages.code_blocks(lang)


def burnin_commands() -> list[list[str]]:
    """Every `burnin ...` command in the code blocks of README and the docs, as a shell
    splits it, up to the first shell operator (`||`, `>`, `;`, ...)."""
    import shlex
    out = []
    for block in docpages.code_blocks(r"\w*"):
        for m in re.finditer(r"(?:^|[\s'\"(])(?:\S*/)?burnin ((?:run|admit|quarantine|"
                             r"inventory|report|compare|--version)\b.*)$",
                             block.replace("\\\n", " "), re.M):
            if "{{" in m.group(1):  # an alert's templated text, not a command
                continue
            lexer = shlex.shlex(m.group(1), posix=True, punctuation_chars=True)
            argv = []
            try:
                for token in lexer:
                    if token and set(token) <= set("|&;<>()"):
                        break
                    argv.append(token)
            except ValueError:  # the closing quote of an `sh '...'` around the command
                pass
            out.append(argv)
    return out


def test_every_burnin_command_in_the_docs_parses():
    from burnin.cli import build_parser
    commands = burnin_commands()
    assert len(commands) >= 15 and {c[0] for c in commands} >= {
        "run", "admit", "quarantine", "inventory", "compare", "--version"}
    run_options = set()
    for argv in commands:
        if argv[0] == "run":
            run_options |= {a.split("=")[0] for a in argv[1:] if a.startswith("--")}
        elif argv != ["--version"]:
            build_parser().parse_args(argv)  # SystemExit(2) on an unknown option
    helped = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p",
                             "no:cacheprovider"], capture_output=True, text=True, timeout=120,
                            cwd=REPO).stdout
    assert {"--inventory", "--profile", "--nodes", "--revalidate"} <= run_options
    run_options -= {"--rolling"}  # burnin's own (cli/rolling.py), never passed to pytest
    unknown = {o for o in run_options if not re.search(rf"(?<![\w-]){o}(?![\w-])", helped)}
    assert not unknown, f"the docs pass `burnin run` options pytest does not know: {unknown}"


def test_the_ci_snippets_load_and_gate_on_admit():
    import yaml
    gitlab, github = (yaml.safe_load(b) for b in code_blocks("yaml")
                      if "burnin run" in b and "burnin admit" in b)
    script = gitlab["burnin"]["script"]
    assert script[0].startswith("burnin run") and "burnin admit" in script[1]
    assert "--json" in script[1] and gitlab["burnin"]["artifacts"]["reports"]["junit"]
    steps = github["jobs"]["acceptance"]["steps"]
    assert "burnin run" in steps[0]["run"] and "--json" in steps[1]["run"]
    (jenkins,) = code_blocks("groovy")
    assert "junit 'reports/latest/junit.xml'" in jenkins and "burnin admit" in jenkins


def parser_commands() -> set[str]:
    """Every command the `burnin` parser knows, down to the leaves: `burnin quarantine add`."""
    import argparse

    from burnin.cli import build_parser

    def walk(parser, prefix):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return {prefix}
        return set().union(*(walk(p, f"{prefix} {name}")
                             for name, p in subs[0].choices.items()))
    return walk(build_parser(), "burnin")


def exit_code_rows(text: str) -> list[str]:
    """The rows of the exit-code table: the one under the page's or section's heading."""
    return [ln for ln in text.splitlines() if ln.startswith("| `")]


def test_the_exit_code_table_has_a_row_for_every_command():
    rows = exit_code_rows(docpages.sections(docpages.page("reference/exit-codes.md"))[
        "Exit codes"])
    named = {m for ln in rows for m in re.findall(r"`(burnin [^`]+)`", ln.split("|")[1])}
    # Modes of a command with exit codes of their own have their own row.
    modes = {"burnin --version", "burnin history --watch", "burnin run --rolling"}
    commands = parser_commands() | modes
    assert len(commands) >= 9 and named == commands, (sorted(named), sorted(commands))
    # Each row says what 0 means, and every command but --version what a failure means.
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[1] and (any(cells[2:]) or "--version" in cells[0]), ln


def test_the_systemd_units_verify(tmp_path):
    import shutil
    tool = shutil.which("systemd-analyze")
    if tool is None:
        import pytest
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is missing in CI: apt-get install systemd")
        pytest.skip("needs systemd-analyze (Debian's systemd; CI installs it)")
    units = []
    for block in code_blocks("ini"):
        name = re.match(r"# /etc/systemd/system/(\S+)", block).group(1)
        # verify checks that ExecStart's program exists: the controller's install path
        # stands for this machine's interpreter here.
        (tmp_path / name).write_text(block.replace("/opt/burnin/bin/burnin", sys.executable))
        units.append(str(tmp_path / name))
    assert sorted(Path(u).name for u in units) == ["burnin-revalidate.service",
                                                   "burnin-revalidate.timer"]
    res = subprocess.run([tool, "verify", "--man=no", *units], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), res.stdout + res.stderr


def test_readme_exit_codes_are_the_references_rows():
    """The front door shows the codes of a run and of admit: the reference's rows, word for
    word, so that the two cannot come to say different things."""
    readme = exit_code_rows(docpages.sections(docpages.README.read_text())["Exit codes"])
    reference = exit_code_rows(docpages.page("reference/exit-codes.md"))
    assert [r.split("|")[1].strip() for r in readme] == [
        "`pytest suites/`, `burnin run` (pytest's codes)", "`burnin admit`"]
    assert all(r in reference for r in readme), "README's exit codes differ from the reference"

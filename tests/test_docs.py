"""The documentation site: it builds with `mkdocs build --strict` (a broken link, a missing
anchor, a page left out of the nav fail it), offline, and the reference pages say what the
code does: every inventory key, every check, every command. README stays the front door."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import docpages
from support.requires import need

REPO = docpages.REPO


def build(site: Path, root: Path = REPO) -> subprocess.CompletedProcess:
    # Material prints a banner about MkDocs 2.0 on every build; it is not a warning of ours.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=300, env=env)


def test_the_site_builds_strict_and_reads_offline(tmp_path):
    need("" if importlib.util.find_spec("material") else
         "needs mkdocs-material (pip install -e '.[test]')")
    res = build(tmp_path / "site")
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "WARNING" not in out, out
    html = sorted((tmp_path / "site").rglob("*.html"))
    assert len(html) > len(nav_pages())  # every page, and 404.html
    for page in html:
        text = page.read_text()
        # Nothing fetched when the page is read: no web font, script or style from away.
        external = re.findall(r'<(?:script|link|img)\b[^>]*(?:src|href)="(?:https?:)?//[^"]*"',
                              text)
        assert not external, (page, external)
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, page


def test_a_broken_link_or_an_orphan_fails_the_build(tmp_path):
    """--strict and mkdocs.yml's validation hold the site together: a dead anchor, a nav
    entry without its page and a page left out of the nav each fail the build."""
    need("" if importlib.util.find_spec("material") else "needs mkdocs-material")
    import shutil
    root = tmp_path / "repo"  # a copy: another worker may be building the real one
    shutil.copytree(REPO / "docs", root / "docs")
    for name in ("mkdocs.yml", "CHANGELOG.md"):
        shutil.copy(REPO / name, root / name)
    # Three faults in one build (strict mode names every warning before it aborts).
    page = root / "docs" / "reference" / "checks.md"
    page.write_text(page.read_text() + "\n[gone](outputs.md#no-such-anchor)\n")
    (root / "docs" / "reference" / "exit-codes.md").unlink()  # in the nav, not there
    (root / "docs" / "orphan.md").write_text("# Not in the nav\n")
    res = build(tmp_path / "site", root)
    out = res.stdout + res.stderr
    warnings = [ln for ln in out.splitlines() if ln.startswith("WARNING")]
    assert res.returncode != 0 and len(warnings) >= 3, out
    assert any("anchor '#no-such-anchor'" in w for w in warnings), warnings
    assert any("not included in the \"nav\"" in w for w in warnings), warnings  # orphan.md
    assert any("'reference/exit-codes.md'" in w and "nav" in w.lower() for w in warnings), out


class _Loader(yaml.SafeLoader):
    """mkdocs.yml as data: MkDocs' own tags (`!relative`) read as plain values."""


_Loader.add_multi_constructor("!", lambda loader, tag, node: None)


def nav_pages() -> set[str]:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Loader)

    def walk(item):
        if isinstance(item, str):
            return {item}
        if isinstance(item, dict):
            return set().union(*(walk(v) for v in item.values()))
        return set().union(*(walk(v) for v in item))
    return walk(config["nav"])


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert nav_pages() == pages


def test_the_changelog_is_on_the_site_and_keeps_an_unreleased_section():
    assert '--8<-- "CHANGELOG.md"' in docpages.page("changelog.md")
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "\n## [Unreleased]\n" in changelog


# --- the front door ----------------------------------------------------------------------

def test_readme_is_the_front_door():
    text = docpages.README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: the rest belongs in docs/"
    # The two commands come first: the first code block, before any section.
    assert text.index("```sh") < text.index("\n## ")
    heads = set(docpages.sections(text))
    assert {"What burnin decides", "A six-line inventory", "Where the report lands",
            "Exit codes", "Documentation"} <= heads
    warning = docpages.sections(text)["Before you point it at production: quarantine"]
    assert "> [!WARNING]" in warning and "--no-quarantine" in warning


def test_readme_links_lead_somewhere():
    text = docpages.README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert len(local) >= 15
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, missing
    # Every page of the site is one click from the front door.
    linked = {str(Path(t).relative_to("docs")) for t in local if t.startswith("docs/")}
    assert nav_pages() - linked <= {"index.md", "changelog.md"}, nav_pages() - linked


def test_getting_started_shows_the_readme_commands_word_for_word():
    def first_sh(text):
        return re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    assert first_sh(docpages.page("getting-started.md")) == first_sh(
        docpages.README.read_text())


def test_the_six_line_inventory_is_one_burnin_accepts(tmp_path):
    block = docpages.sections(docpages.README.read_text())["A six-line inventory"]
    inventory = re.search(r"```yaml\n(.*?)```", block, re.S).group(1)
    assert len(inventory.splitlines()) == 6
    # The same inventory on the getting-started page.
    assert inventory in docpages.page("getting-started.md")
    (tmp_path / "rack42.yaml").write_text(inventory)
    res = run_cli("inventory", "check", str(tmp_path / "rack42.yaml"))
    assert res.returncode == 0, res.stderr
    assert len([ln for ln in res.stdout.splitlines() if ln.startswith("gpu")]) == 32


# --- the reference says what the code does ----------------------------------------------

def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from burnin.cli import main; "
                           "sys.exit(main())", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


# An unknown key at every level of the inventory: burnin's own message names, per level,
# every key it accepts. The reference must have a row for each, and none for a key that
# does not exist.
EVERY_LEVEL = """\
version: 1
bogus: 1
defaults: {bogus: 1, ssh: {bogus: 1}, srun: {bogus: 1}, storage: {bogus: 1}, expect: {bogus: 1}}
nodes:
  - {name: n1, bogus: 1}
quarantine: {bogus: 1}
admission: {bogus: 1}
goodput: {bogus: 1}
remediation: {bogus: 1}
rolling: {bogus: 1}
gpu_models: {X: {nvml_names: [a], bogus: 1}}
checks: {bogus: {}}
"""
SECTION = {"": "Top level", "defaults": "defaults", "defaults.ssh": "ssh",
           "defaults.srun": "srun", "defaults.storage": "storage", "defaults.expect": "expect",
           "quarantine": "quarantine", "admission": "admission", "goodput": "goodput",
           "gpu_models.X": "gpu_models", "remediation": "remediation",
           "rolling": "rolling"}


def accepted_keys(tmp_path) -> dict[str, set[str]]:
    (tmp_path / "every.yaml").write_text(EVERY_LEVEL)
    res = run_cli("inventory", "check", str(tmp_path / "every.yaml"))
    assert res.returncode == 2, res.stdout + res.stderr
    found = re.findall(r"^\S+:\d+: (?:(\S+)\.)?bogus: unknown (?:key|check); expected one of: "
                       r"(.*)$", res.stdout + res.stderr, re.M)
    return {level: set(keys.split(", ")) for level, keys in found}


def rows(section: str) -> set[str]:
    return set(re.findall(r"^\| `([\w.]+)` \|", section, re.M))


def test_the_inventory_reference_has_a_row_for_every_key(tmp_path):
    keys = accepted_keys(tmp_path)
    assert set(SECTION) | {"nodes[0]", "checks"} == set(keys), sorted(keys)
    page = docpages.sections(docpages.page("reference/inventory.md"))
    for level, heading in SECTION.items():
        assert rows(page[heading]) == keys[level], (level, heading)
    # A node entry takes its own keys and every default.
    assert rows(page["nodes"]) | rows(page["defaults"]) == keys["nodes[0]"]


def test_the_checks_reference_has_a_section_for_every_check(tmp_path):
    checks = accepted_keys(tmp_path)["checks"]
    assert len(checks) >= 10
    page = docpages.sections(docpages.page("reference/checks.md"))
    assert checks <= set(page), checks - set(page)
    for check in checks:
        assert page[check].strip().startswith("**Fails a node when:**"), check
    assert set(re.findall(r"^\| \[(\w+)\]", page["Checks"], re.M)) == checks


def test_the_commands_reference_lists_every_command():
    from test_readme import parser_commands
    listed = {m for ln in docpages.page("reference/commands.md").splitlines()
              if ln.startswith("| `") for m in re.findall(r"`(burnin [^`]+)`", ln.split("|")[1])}
    assert listed == parser_commands() | {"burnin --version"}


@pytest.mark.parametrize("old", ["TESTING.md"])
def test_a_moved_page_points_to_its_new_place(old):
    """A link to the page's old place (an operator's bookmark, an old checkout's note)
    lands on a stub that points at where it lives now."""
    text = (REPO / old).read_text()
    target = re.search(r"\]\((docs/[^)]+)\)", text).group(1)
    assert (REPO / target).exists() and len(text.splitlines()) < 20

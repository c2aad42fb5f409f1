"""A new check is its probe, its Check in the table, its suite file, and nothing else:
a throwaway check declared here, with its probe and suite file written by the
test, is found in junit.xml, metrics.prom, summary.html, admission and `burnin compare`,
and no other file of burnin knows it."""

from __future__ import annotations

import json
import textwrap

from support.replay import replay_python
from support.suiterun import REPO, junit_cases, script
from support.summarypage import Summary

from burnin import cli
from burnin.checks import CHECKS, Check, Figure, Judging, Measure, Setting
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import Num, Obj, Str, document

NAME = "widget"
# Everything about the check, in one place: what a check module under burnin/checks/ holds.
SPIN = Measure("widget_spin_ratio", "", "widget spin, slowest", "widget spin {device}",
               chart="widget: spin per device", key="widget spin")


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, NAME, (outcome.reason,))
    floor = j.settings["min_spin"]
    slow = [f"{d['device']}: spin {d['spin']:g}, below the floor of {floor:g}"
            for d in outcome.data["devices"] if d["spin"] < floor]
    return Verdict(node.name, NAME, tuple(slow), floors={"widget spin": floor})


def figures(record: dict) -> list[Figure]:
    return [Figure(SPIN.metric, (("device", d["device"]),), d["spin"], "How well it spins.")
            for d in record["data"]["devices"]]


CHECK = Check(name=NAME, doc="the widget spins", judge=judge, figures=figures,
              schema=document(Obj(required=("device", "spin"), device=Str(64), spin=Num(0)),
                              Obj()),
              settings={"min_spin": Setting("positive", 0.5, "spin floor")}, page_order=-1,
              measures=(SPIN,))

PROBE = '''\
"""widget: how well each widget spins (a test's throwaway probe)."""
import sys
from pathlib import Path
sys.path.insert(0, PROBES)
import probelib

payload = probelib.start(__doc__, "widget")
if payload is not None:
    spins = dict(line.split() for line in Path(SPINS).read_text().splitlines())
    spin = float(spins[payload["node"]])
    probelib.emit("widget", {}, [{"device": "w0", "spin": spin}], {}, [])
'''
SUITE = '''\
from burnin.model.verdict import assert_passed


def test_widget(node, burnin_run):
    assert_passed(burnin_run.verdict("widget", node))
'''


def spin_run(pytester, monkeypatch, spins: dict[str, float]):
    """One run of health and the widget check over w1 and w2; returns its directory."""
    (pytester.path / "spins").write_text("".join(f"{n} {v}\n" for n, v in spins.items()))
    return_code = pytester.runpytest(
        str(REPO / "suites" / "test_health.py"), str(pytester.path / "test_widget.py"),
        "--inventory", str(pytester.path / "inv.yaml"), "--reports",
        str(pytester.path / "reports"), "--no-quarantine", "-p", "no:cacheprovider").ret
    assert return_code in (0, 1)
    return (pytester.path / "reports" / "latest").resolve()


def test_a_check_declared_in_one_place_is_found_everywhere(pytester, monkeypatch, capsys):
    monkeypatch.setitem(CHECKS, NAME, CHECK)  # its row in the table; no other file touched
    probe = pytester.path / "widget.py"
    probe.write_text(PROBE.replace("PROBES", repr(str(REPO / "probes"))).replace(
        "SPINS", repr(str(pytester.path / "spins"))))
    (pytester.path / "test_widget.py").write_text(SUITE)
    replay = replay_python(pytester.path / "replay")
    # The node's python runs the widget probe from the test's own files, the rest replayed.
    python = script(pytester.path / "python", textwrap.dedent(f"""\
        case "$1" in */widget.py) shift; exec {replay} {probe} "$@";; esac
        exec {replay} "$@"
        """))
    (pytester.path / "inv.yaml").write_text(textwrap.dedent(f"""\
        version: 1
        cluster: widgets
        defaults: {{transport: local, gpus: 0, python: {python}}}
        nodes:
          - name: w[1-2]
        """))
    before = spin_run(pytester, monkeypatch, {"w1": 0.9, "w2": 0.2})
    after = spin_run(pytester, monkeypatch, {"w1": 0.6, "w2": 0.2})

    cases = junit_cases(after.parent)
    assert cases["w1"][NAME] == ("passed", "")
    assert cases["w2"][NAME] == ("failure", "w0: spin 0.2, below the floor of 0.5")
    prom = (after / "metrics.prom").read_text()
    assert 'burnin_widget_spin_ratio{cluster="widgets",node="w1",device="w0"} 0.6' in prom
    assert 'burnin_check_outcome{cluster="widgets",node="w2",check="widget",outcome="failed"} 1' \
        in prom

    page = Summary(after / "summary.html")
    grid = page.text.split("id='grid'")[1].split("</section>")[0]
    assert "widget / health" in grid  # its stripe, in its page order (before health)
    section = page.text.split("id='n-w2'")[1].split("</section>")[0]
    assert "w0: spin 0.2, below the floor of 0.5" in section and "<th>spin</th>" in section
    fleet = page.text.split("id='grid'")[1].split("id='n-")[0]
    chart = fleet.split('aria-label="widget: spin per device"')[1].split("</svg>")[0]
    assert "<title>floor 0.5</title>" in chart  # the floor its judge stated, drawn
    assert "<title>w2 w0: 0.2 </title>" in chart or "<title>w2 w0: 0.2</title>" in chart

    capsys.readouterr()  # what the runs printed
    # Only health and the widget ran: admission asked of those two (the rest is missing).
    assert cli.main(["admit", str(after / "junit.xml"), "--json", "--require",
                     "health,widget"]) == 1
    admission = json.loads(capsys.readouterr().out)
    assert admission["admitted"] == ["w1"] and list(admission["rejected"]) == ["w2"], admission
    assert "widget" in " ".join(admission["rejected"]["w2"])

    assert cli.main(["compare", str(before), str(after), "--json"]) == 1  # w1 spins slower
    moved = json.loads(capsys.readouterr().out)["moved"]
    assert [(m["node"], m["metric"], m["regressed"]) for m in moved] == [
        ("w1", SPIN.metric, True)]

"""junit.xml against the Ant/Jenkins JUnit format (tests/schemas/junit.xsd, written for this
project from the format's documentation), validated by xmllint: what Jenkins, GitLab and
other JUnit readers get from a real run with passed, failed and skipped testcases."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.replay import replay_python
from support.suiterun import run_suite, script

from burnin.ledger.api import Ledger

SCHEMA = Path(__file__).resolve().parent / "schemas" / "junit.xsd"


def xmllint(path: Path) -> subprocess.CompletedProcess:
    tool = shutil.which("xmllint")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("xmllint is missing in CI: apt-get install libxml2-utils")
        pytest.skip("needs xmllint (Debian's libxml2-utils; CI installs it)")
    return subprocess.run([tool, "--noout", "--schema", str(SCHEMA), str(path)],
                          capture_output=True, text=True, timeout=60)


def test_a_real_runs_junit_validates_against_the_junit_schema(pytester):
    py = script(pytester.path / "py-n2", "echo 'GPU \"0\" <fell> off & away' >&2\nexit 3\n")
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: lab
        defaults: {{transport: local, gpus: 0, python: {replay_python(pytester.path / "r")}}}
        nodes:
          - name: n1
          - name: n2
            python: {py}
          - name: n3
        quarantine:
          ledger: {pytester.path / 'ledger.db'}
        """))
    Ledger(pytester.path / "ledger.db").quarantine_by_hand("n3", "lab", "fan noisy", "ann")
    _, reports = run_suite(pytester, inv, "-k", "health")
    junit = reports / "latest" / "junit.xml"
    root = ET.parse(junit).getroot()
    outcomes = {(s.get("name"), c.get("name")): [e.tag for e in c]
                for s in root.iter("testsuite") for c in s.iter("testcase")}
    assert outcomes[("n2", "health")] == ["failure"]
    assert outcomes[("n3", "health")] == ["skipped"]
    assert [t for t in outcomes[("n1", "health")] if t != "system-out"] == []  # passed
    res = xmllint(junit)
    assert res.returncode == 0, res.stderr
    assert root.get("skipped") == "1" and root.get("tests") == str(len(outcomes))
    for suite in root.iter("testsuite"):
        assert suite.get("timestamp") and suite.get("hostname") and suite.get("time")
    assert all(c.get("time") for c in root.iter("testcase"))


@pytest.mark.parametrize("damage", ["testcase-time", "testsuites-skipped", "suite-hostname",
                                    "suite-timestamp"])
def test_the_schema_refuses_what_readers_need_missing(tmp_path, damage):
    doc = ET.fromstring(GOOD)
    {"testcase-time": lambda: doc.find("testsuite/testcase").attrib.pop("time"),
     "testsuites-skipped": lambda: doc.attrib.pop("skipped"),
     "suite-hostname": lambda: doc.find("testsuite").attrib.pop("hostname"),
     "suite-timestamp": lambda: doc.find("testsuite").set("timestamp", "yesterday")}[damage]()
    ok, bad = tmp_path / "ok.xml", tmp_path / "bad.xml"
    ok.write_text(GOOD)
    bad.write_bytes(ET.tostring(doc))
    assert xmllint(ok).returncode == 0
    assert xmllint(bad).returncode != 0


GOOD = """<testsuites tests="1" failures="0" errors="0" skipped="0" time="1.000">
<testsuite name="n1" tests="1" failures="0" errors="0" skipped="0" time="1.000"
           timestamp="2024-05-01T12:00:00" hostname="10.0.0.1">
  <properties><property name="run_id" value="r1"/></properties>
  <testcase name="health" classname="lab.n1" time="1.000"/>
</testsuite>
</testsuites>"""

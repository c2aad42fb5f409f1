"""An inventory's `env:` on a real run of local nodes: it reaches the probe unchanged
(shell metacharacters included, and no shell runs them), the all-reduce ranks where gloo
starts (a wrong interface name breaks gloo itself), the probe's record and the report."""

from __future__ import annotations

import json
import shutil
import textwrap

from support.suiterun import junit_cases, run_suite
from support.summarypage import Summary, drawn_dom

# Every character a shell would act on, and a quote of each kind: it must arrive as it is.
HOSTILE = """a b;c|d&e $(touch {canary}) `touch {canary}` '"' \\ * ~ > {canary} $HOME"""


def inventory(pytester, env: dict[str, str]) -> str:
    """One node of one gloo rank: a rank is its own process all the same, where gloo
    starts and reads GLOO_SOCKET_IFNAME (a second rank would only cost another torch)."""
    path = pytester.path / "inv.yaml"
    body = textwrap.dedent("""\
        version: 1
        defaults: {transport: local, gpus: 0}
        checks:
          allreduce: {ranks: 1, max_bytes: 65536, seconds_per_size: 0.02, rendezvous_timeout_s: 20}
        nodes:
          - name: n1
            address: 127.0.0.1
        """)
    body += "    env:\n" + "".join(f"      {k}: {json.dumps(v)}\n" for k, v in env.items())
    path.write_text(body)
    return str(path)


def record(reports, check: str) -> dict:
    for line in (reports / "latest" / "results.jsonl").open():
        r = json.loads(line)
        if r["check"] == check:
            return r
    raise AssertionError(f"no {check} record")


def test_env_reaches_the_allreduce_probe_unchanged_and_is_recorded_and_shown(pytester,
                                                                            tmp_path):
    canary = tmp_path / "canary"
    env = {"GLOO_SOCKET_IFNAME": "lo", "ACCEPTANCE_NOTE": HOSTILE.format(canary=canary)}
    result, reports = run_suite(pytester, inventory(pytester, env), "-k", "allreduce")
    assert junit_cases(reports) == {"n1": {"allreduce": ("passed", "")}}
    assert record(reports, "allreduce")["data"]["env"] == env
    assert not canary.exists()  # no shell ever saw the value
    html = reports / "latest" / "summary.html"
    page = Summary(html)
    if "n1" in page.sections:  # written into the page
        assert "GLOO_SOCKET_IFNAME=lo</span>" in page.text
    else:  # kept compressed, drawn by the page's script when opened
        assert ["GLOO_SOCKET_IFNAME", "lo"] in page.lazy()["n1"]["x"]
        if shutil.which("chromium"):
            assert 'title="set by its probes (env:)">GLOO_SOCKET_IFNAME=lo</span>' in \
                drawn_dom(html, tmp_path / "profile", "n1")


def test_a_wrong_interface_reaches_gloo_in_the_ranks_and_fails_there(pytester):
    """The ranks are separate processes: the interface they were told is the one gloo
    could not find, so the value went all the way to where gloo starts."""
    env = {"GLOO_SOCKET_IFNAME": "burnin-nic9"}
    result, reports = run_suite(pytester, inventory(pytester, env), "-k", "allreduce")
    outcome, message = junit_cases(reports)["n1"]["allreduce"]
    assert outcome == "failure" and "exited with status" in message, message
    r = record(reports, "allreduce")
    assert r["data"]["env"] == env
    assert "burnin-nic9" in r["stderr_tail"], r["stderr_tail"][-2000:]

"""`burnin rejudge RUN_DIR`: a run judged again from its results.jsonl gives the run's own
verdicts; another inventory's settings list what would change; bad input is exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from support.suiterun import TINY_MEMORY, junit_cases, run_suite, script, trio_inventory


def burnin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burnin", *args], capture_output=True,
                          text=True, timeout=300)


def inventory(pytester, path: Path, checks: str = "") -> Path:
    """n1 and n2 replay the real probes' recorded documents (tests/support/replay.py); n3's python
    fails every probe, so the run holds failures to reproduce as well as passes."""
    script(pytester.path / "py3", "echo 'GPU fell off the bus' >&2\nexit 3\n")
    return trio_inventory(pytester, path, f"checks:\n  memory: {json.dumps(TINY_MEMORY)}\n"
                          + textwrap.indent(textwrap.dedent(checks), "  "))


def test_a_run_judged_again_gives_its_own_verdicts_and_what_if_lists_the_changes(pytester):
    inv = inventory(pytester, pytester.path / "inv.yaml")
    result, reports = run_suite(pytester, inv, "--no-quarantine", "-k", "not internode")
    cases = junit_cases(reports)
    assert cases["n1"]["burn"][0] == "passed" and cases["n3"]["burn"][0] == "failure"
    run_dir = (reports / "latest").resolve()
    assert (run_dir / "inventory.yaml").read_bytes() == inv.read_bytes()

    same = burnin("rejudge", str(run_dir), "--json")
    assert same.returncode == 0, same.stdout + same.stderr
    out = json.loads(same.stdout)
    judged = sum(len(c) for c in cases.values())
    assert out["changed"] == [] and out["judged"] == judged

    # What-if: a burn floor no CPU reaches fails every node that passed burn, and only
    # burn; burn failing on 3 of 3 nodes is then one shared-cause incident
    # (burnin/gate/incidents.py), whose words n3's own failure gains too.
    strict = inventory(pytester, pytester.path / "strict.yaml",
                       "burn: {min_tflops: 1000000}\n")
    what_if = burnin("rejudge", str(run_dir), "--inventory", str(strict))
    assert what_if.returncode == 1, what_if.stdout + what_if.stderr
    lines = what_if.stdout.splitlines()
    changed = sorted(ln.split(":")[0] for ln in lines if " -> " in ln)
    assert changed == ["n1 burn", "n2 burn", "n3 burn"], lines
    assert "below the floor of 1e+06 TFLOPS" in what_if.stdout
    assert "n1 burn: passed -> failed: shared cause suspected: burn failed on 3 of 3" \
        in what_if.stdout
    assert lines[-1] == f"{judged} verdict(s) judged again, 3 would change"


def test_a_changed_record_is_a_changed_verdict(pytester):
    """The verdicts come from results.jsonl, not from junit.xml: a record edited after the
    run (here n1's burn probe reported an error) is judged as what it now says."""
    inv = inventory(pytester, pytester.path / "inv.yaml")
    _, reports = run_suite(pytester, inv, "--no-quarantine", "-k", "health or burn")
    run_dir = (reports / "latest").resolve()
    results = run_dir / "results.jsonl"
    records = [json.loads(ln) for ln in results.read_text().splitlines()]
    for r in records:
        if (r["node"], r["check"]) == ("n1", "burn"):
            r["data"]["errors"] = ["cuda:0: an edited error"]
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    res = burnin("rejudge", str(run_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == ("n1 burn: passed -> failed: probe error on cuda:0: "
                                          "an edited error")


def test_bad_input_is_a_message_and_exit_2(tmp_path, pytester):
    res = burnin("rejudge", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "junit.xml: no such file" in res.stderr

    inv = inventory(pytester, pytester.path / "inv.yaml")
    _, reports = run_suite(pytester, inv, "--no-quarantine", "-k", "health")
    run_dir = (reports / "latest").resolve()
    (run_dir / "inventory.yaml").unlink()
    res = burnin("rejudge", str(run_dir))
    assert res.returncode == 2 and "name it with --inventory FILE" in res.stderr

    other = tmp_path / "other.yaml"
    other.write_text("version: 1\nnodes:\n  - name: elsewhere\n")
    res = burnin("rejudge", str(run_dir), "--inventory", str(other))
    assert res.returncode == 2 and "lacks node(s) the run tested: n1, n2, n3" in res.stderr

    (run_dir / "results.jsonl").write_text("{not json\n")
    res = burnin("rejudge", str(run_dir), "--inventory", str(inv))
    assert res.returncode == 2 and "results.jsonl:1: not a burnin record" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_check_the_run_kept_no_record_of_is_an_error_not_a_probe_run_now(pytester):
    """Nodes of `gpus: auto` learn their device count from health's record: with that
    record gone, judging burn again is an error that says so; no probe is started."""
    inv = inventory(pytester, pytester.path / "inv.yaml")
    _, reports = run_suite(pytester, inv, "--no-quarantine", "-k", "health or burn")
    run_dir = (reports / "latest").resolve()
    results = run_dir / "results.jsonl"
    kept = [ln for ln in results.read_text().splitlines() if json.loads(ln)["check"] != "health"]
    results.write_text("".join(ln + "\n" for ln in kept))
    auto = pytester.path / "auto.yaml"
    auto.write_text(inv.read_text().replace("gpus: 0", "gpus: auto"))
    res = burnin("rejudge", str(run_dir), "--inventory", str(auto))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "n1 burn: passed -> error: RejudgeError: the run kept no record of health" \
        in res.stdout, res.stdout


def test_a_failed_verdict_whose_reasons_change_is_a_change(pytester):
    """Failed before and failed again, for another reason: the operator tuning a floor
    must see it (the outcome alone would hide it)."""
    strict = inventory(pytester, pytester.path / "strict.yaml", "burn: {min_tflops: 1000000}\n")
    _, reports = run_suite(pytester, strict, "--no-quarantine", "-k", "health or burn")
    run_dir = (reports / "latest").resolve()
    assert junit_cases(reports)["n1"]["burn"][0] == "failure"
    stricter = inventory(pytester, pytester.path / "stricter.yaml",
                         "burn: {min_tflops: 2000000}\n")
    res = burnin("rejudge", str(run_dir), "--inventory", str(stricter), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    changed = {(c["node"], c["check"]): c for c in json.loads(res.stdout)["changed"]}
    assert sorted(changed) == [("n1", "burn"), ("n2", "burn")], changed
    n1 = changed["n1", "burn"]
    assert n1["was"] == n1["now"] == "failed"
    assert "below the floor of 1e+06 TFLOPS" in n1["was_message"]
    assert "below the floor of 2e+06 TFLOPS" in n1["now_message"]
    # n3 failed burn for the same reason under both: not a change.
    assert ("n3", "burn") not in changed
    text = burnin("rejudge", str(run_dir), "--inventory", str(stricter))
    assert "n1 burn: failed -> failed (another reason): " in text.stdout, text.stdout

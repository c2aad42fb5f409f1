"""A node-check that cannot judge its node is never silent: a bad inventory, a node not in
it, or an internal error exits non-zero with one line on stderr (what slurmd logs) and,
where a textfile directory is named (`node_check.textfile`, or `--textfile` for an
inventory that cannot be read at all), `burnin_node_check_up 0` with the reason; a run
that judged writes `burnin_node_check_up 1`."""

from __future__ import annotations

import os
import subprocess
import sys

from test_nodecheck import HANG_S, ROOT, make_inventory, node_check

from burnin.nodecheck import up


def one_line(res: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("burnin node-check: "), res.stderr
    return lines[0]


def metric(where) -> str:
    text = (where / up.FILE).read_text()
    return next(line for line in text.splitlines() if line.startswith("burnin_node_check_up"))


def test_a_yaml_error_in_health_mode_is_said_and_is_up_0(tmp_path):
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nnodes: [{name: a}\n")
    res = node_check(bad, "--mode", "health", "--textfile", str(textfiles))
    assert res.returncode == 2
    assert "invalid inventory: " in one_line(res) and "not valid YAML" in res.stderr
    assert metric(textfiles) == 'burnin_node_check_up{reason="inventory"} 0'


def test_a_schema_error_names_its_textfile_and_a_judged_run_is_up_1(tmp_path):
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(f"version: 1\nnodes: [{{name: a}}]\nnode_check: {{budget_s: 0, "
                     f"textfile: {textfiles}}}\n")
    res = node_check(wrong, "--mode", "health")
    assert res.returncode == 2 and "node_check.budget_s" in one_line(res)
    assert metric(textfiles) == 'burnin_node_check_up{reason="inventory"} 0'

    res = node_check(make_inventory(tmp_path, name="not-this-host",
                                    node_check={"textfile": str(textfiles)}))
    assert res.returncode == 2 and "is not in" in one_line(res)
    assert metric(textfiles) == 'burnin_node_check_up{reason="usage"} 0'

    inv = make_inventory(tmp_path, {"storage": {"path": str(tmp_path / "no" / "such")}},
                         node_check={"textfile": str(textfiles)})
    assert node_check(inv).returncode == 1
    assert metric(textfiles) == "burnin_node_check_up 1"
    assert "burnin_node_check_findings_count 1" in (textfiles / up.FILE).read_text()


def test_an_internal_error_exits_4_in_one_line_and_is_up_0(tmp_path):
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    inv = make_inventory(tmp_path, node_check={"textfile": str(textfiles)})
    # A fault planted in the test's own interpreter: a bug while planning the checks.
    planted = ("import sys; import burnin.nodecheck.run as r\n"
               "def boom(*a, **k): raise RuntimeError('planted')\n"
               "r.plan = boom\n"
               "from burnin.cli import main\n"
               f"sys.exit(main(['node-check', '--inventory', {str(inv)!r}, '--mode', "
               "'health']))\n")
    res = subprocess.run([sys.executable, "-c", planted], capture_output=True, text=True,
                         timeout=HANG_S, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 4
    assert one_line(res) == "burnin node-check: internal error: RuntimeError: planted"
    assert metric(textfiles) == 'burnin_node_check_up{reason="internal"} 0'

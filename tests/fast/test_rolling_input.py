"""`burnin run --rolling` on bad input: a clear message and exit 2, never a traceback,
and nothing drained."""

from __future__ import annotations

import yaml

from burnin.cli import main


def test_a_missing_inventory_and_nodes_off_slurm_are_refused(tmp_path, capsys):
    assert main(["run", "--rolling", "--inventory", str(tmp_path / "none.yaml")]) == 2
    assert "burnin run --rolling:" in capsys.readouterr().err
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"version": 1, "cluster": "c", "nodes": [
        {"name": "n1", "address": "n1", "transport": "ssh"}]}))
    assert main(["run", "--rolling", f"--inventory={inv}",
                 "--reports", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "n1 not on Slurm" in err and "Traceback" not in err
    assert main(["run", "--rolling", "--inventory", str(inv), "--nodes", "n[1-"]) == 2
    assert "not a valid hostlist" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_slurm_that_cannot_be_asked_stops_the_loop_with_exit_2(tmp_path, capsys,
                                                                 monkeypatch):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"version": 1, "cluster": "c", "nodes": [
        {"name": "n1", "address": "n1", "transport": "srun"}]}))
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol
    assert main(["run", "--rolling", "--inventory", str(inv),
                 "--reports", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "scontrol" in err and "stopped" in err and "Traceback" not in err

"""A failing fleet's evidence folders (burnin/report/evidence.py: Files): written by a few
threads while publish makes the next file's text, each file what writing it at once
writes; a file that cannot be written costs its own node's folder only, and says why."""

from __future__ import annotations

import threading

import pytest
from support.summarypage import synthetic

from burnin.report import evidence
from burnin.report.publish import publish
from burnin.report.summary import page as page_mod

bench = synthetic()


def folders(run) -> dict[str, dict[str, bytes]]:
    return {d.name: {f.name: f.read_bytes() for f in sorted(d.iterdir())}
            for d in sorted((run / "nodes").iterdir())}


@pytest.mark.parametrize("big", [False, True], ids=["held", "streamed"])
def test_threads_write_each_bundle_as_one_thread_would(tmp_path, monkeypatch, big):
    if big:  # a big fleet's failing nodes beyond WHOLE_FAILING: from results.jsonl
        monkeypatch.setattr(page_mod, "WHOLE_SECTIONS", 5)
        monkeypatch.setattr(page_mod, "WHOLE_FAILING", 1)
    runs = {}
    for how in ("threads", "at once"):
        run = tmp_path / how / "reports" / "20261128T120000Z-now"
        verdicts, inventory = bench.synthetic_run(run, 12, 20, failing=4,
                                                  kinds=("thermal", "storage", "sdc"))
        writers: set[str] = set()
        real = evidence._write

        def noted(path, text, real=real, writers=writers):
            writers.add(threading.current_thread().name)
            real(path, text)
        monkeypatch.setattr(evidence, "_write", noted)
        if how == "at once":
            monkeypatch.setattr(evidence.Files, "put_for", lambda self, node, real=real: real)
        assert publish(run, "c", run.name, verdicts, nodes=inventory) == []
        assert not (run / ".evidence-writing").exists(), "made there, then renamed: gone"
        runs[how] = (folders(run), writers)
        monkeypatch.undo()
        if big:
            monkeypatch.setattr(page_mod, "WHOLE_SECTIONS", 5)
            monkeypatch.setattr(page_mod, "WHOLE_FAILING", 1)
    (threaded, by), (at_once, _) = runs["threads"], runs["at once"]
    assert len(threaded) == 4 and all(len(f) > 3 for f in threaded.values())
    assert threaded == at_once
    assert by == {"burnin-evidence"}, by


def test_a_file_that_cannot_be_written_costs_its_own_nodes_folder_only(tmp_path):
    run = tmp_path / "reports" / "20261128T120000Z-now"
    verdicts, inventory = bench.synthetic_run(run, 12, 20, failing=3,
                                              kinds=("thermal", "storage", "sdc"))
    bad = sorted(n for n, v in verdicts.items() if any(o != "passed" for o, _ in v.values()))
    (run / "nodes" / bad[0] / "verdicts.txt").mkdir(parents=True)  # cannot be a file
    problems = publish(run, "c", run.name, verdicts, nodes=inventory)
    assert len(problems) == 1 and problems[0].startswith(
        f"the evidence folder of {bad[0]} could not be made: IsADirectoryError"), problems
    for node in bad[1:]:
        assert (run / "nodes" / node / "verdicts.txt").is_file()
    page = (run / "summary.html").read_text()
    assert f"nodes/{bad[1]}/verdicts.txt'>evidence" in page
    assert f"nodes/{bad[0]}/verdicts.txt'>evidence" not in page


def test_a_staging_folder_that_is_a_link_is_refused_and_nothing_written_through_it(
        tmp_path):
    run = tmp_path / "reports" / "20261128T120000Z-now"
    verdicts, inventory = bench.synthetic_run(run, 12, 20, failing=2,
                                              kinds=("thermal", "storage"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / ".evidence-writing").symlink_to(elsewhere)
    problems = publish(run, "c", run.name, verdicts, nodes=inventory)
    assert any(p.startswith("the evidence folders could not be made: OSError: ") and
               "not a folder of this user's" in p for p in problems), problems
    assert list(elsewhere.iterdir()) == []
    assert not (run / "nodes").exists()

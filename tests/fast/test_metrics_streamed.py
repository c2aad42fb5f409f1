"""metrics.prom written as it is made: a fleet's is a million lines, which held whole (each
series' line beside its name, then all of them joined) were the largest part of a passing
fleet's peak. The text is the same; what is held while writing it is not."""

from __future__ import annotations

import tracemalloc

import pytest
from support.summarypage import synthetic

from burnin.core.safefiles import write_atomically
from burnin.figures.record_figures import read_records
from burnin.report import metrics


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    run = tmp_path_factory.mktemp("reports") / "20261128T100000Z-now"
    verdicts, _ = synthetic().synthetic_run(run, 150, 20, failing=5)
    return verdicts, read_records(run / "results.jsonl")


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_streamed_text_is_the_rendered_one_and_holds_less_than_it(fleet, tmp_path):
    verdicts, records = fleet
    args = ("c", "r", 1.0, verdicts, records, {"gpu00001": True}, {"gpu00002": (0.9, "burn")})
    text = metrics.render(*args)
    assert text.count("\n") > 10_000 and text.endswith("\n")
    assert "".join(metrics.lines(*args)) == text
    streamed = _peak(lambda: metrics.write(tmp_path / "a.prom", metrics.lines(*args)))
    whole = _peak(lambda: metrics.write(tmp_path / "b.prom", metrics.render(*args)))
    assert (tmp_path / "a.prom").read_text() == (tmp_path / "b.prom").read_text() == text
    # rendered whole, the text is held at least twice (its lines, then joined)
    assert streamed < whole - len(text), (streamed, whole, len(text))


def test_a_text_that_fails_as_it_is_made_leaves_the_old_file_and_no_other(tmp_path):
    path = tmp_path / "metrics.prom"
    path.write_text("old\n")

    def pieces():
        yield "new\n"
        raise RuntimeError("a record that cannot be written")

    with pytest.raises(RuntimeError):
        write_atomically(path, pieces())
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.prom"]

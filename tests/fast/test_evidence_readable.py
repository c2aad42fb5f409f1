"""A failing node's evidence files: JSON a person reads, and JSON a program reads back
the same. The encoder's key texts are held between calls: 1 and True must stay apart."""

from __future__ import annotations

import json

from burnin.report.evidence import readable


def test_evidence_json_reads_back_the_same_and_keeps_series_on_one_line():
    doc = {"devices": [{"device": "cuda:0", "series": {"t": [0.0, 1.0], "temp_c": [50, 51]}}],
           "figures": {"world": 8, "ok": True, "none": None, "text": 'a "quoted" é'}}
    text = readable(doc)
    assert json.loads(text) == doc
    assert '"temp_c": [50, 51]' in text and '\n   "device": "cuda:0"' in text


def test_a_key_is_written_as_its_own_text_whatever_came_before():
    assert json.loads(readable({1: "a"})) == {"1": "a"}
    assert json.loads(readable({True: "b"})) == {"True": "b"}
    assert json.loads(readable({1.0: "c"})) == {"1.0": "c"}


def test_plain_scalars_are_written_as_json_dumps_writes_them():
    import enum
    import math

    class Level(enum.IntEnum):
        HIGH = 1
    values = [1.5, math.nan, math.inf, -math.inf, -0.0, 1e-7, 123456789.123, 10 ** 20,
              True, False, None, "é\n\"\u2028\\", Level.HIGH, 0, -3]
    for v in values:
        assert readable({"k": v}) == '{\n "k": ' + json.dumps(v) + "\n}", v

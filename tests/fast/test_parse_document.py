"""burnin/core/safetext.py parse_document: a probe's document parsed and made safe in one step,
with a fast way for plain texts. Whatever the text, it must give what safe_document gives
of json.loads (the same values, the same refusals): each case here is one the fast way
must notice and leave to safe_document."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burnin.core.safetext import MAX_DEPTH, UnsafeDocument, parse_document, safe_document


def reference(raw: bytes):
    """What the document was made before parse_document: safe_document(json.loads)."""
    try:
        return "value", safe_document(json.loads(raw.decode("utf-8")))
    except UnsafeDocument as e:
        return "unsafe", str(e)


def parsed(raw: bytes):
    try:
        return "value", parse_document(raw)
    except UnsafeDocument as e:
        return "unsafe", str(e)


def nest(levels: int, inner: str = "1", kind: str = "list") -> str:
    if kind == "list":
        return "[" * levels + inner + "]" * levels
    return '{"k": ' * levels + inner + "}" * levels


HOSTILE = [
    '{"a": "esc \\u001b[2J"}',                 # an escape the text does not show
    '{"a": "lone \\ud800"}',                   # a lone surrogate, escaped
    '{"k\\u202e": 1}',                          # a bidi override in a key, escaped
    '{"a": "raw \u202e bidi"}',                 # and written as itself
    '{"a": "raw \x85 C1"}',
    '{"a":\n1}',                                # newline as whitespace: safe as it is
    '{"a": [1,\t2],\r\n"b": "x"}\n',              # tab, CR, LF between values
    '{"a": NaN}', '{"a": [Infinity]}', '{"a": -Infinity}',
    '{"a": 1e999}', '{"a": 1E+400}', '{"a": -2e308}', '{"a": 1e0400}',
    '{"a": ' + "9" * 400 + '.5}',               # a float of 400 digits: an infinity
    '{"a": ' + "9" * 99 + 'e99}',               # 1e198: finite, the largest allowed fast
    '{"a": 12.5e-5, "b": 3e+20, "c": [1, 2.5, -0.0]}',
    '{"digest": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08e902"}',
    '{"a": "NaN", "b": "Infinity", "c": "1e999"}',   # words in strings are only words
    nest(MAX_DEPTH), nest(MAX_DEPTH + 1), nest(MAX_DEPTH, kind="dict"),
    nest(MAX_DEPTH + 1, kind="dict"),
    nest(MAX_DEPTH - 1, '{"k": 1}'), nest(MAX_DEPTH, '{"k": 1}'),
    '{"s": "' + "[" * 100 + '"}',               # brackets inside a string are not depth
    '[' + ", ".join(["[]"] * 40) + ']',         # many brackets, little depth
]


@pytest.mark.parametrize("text", HOSTILE)
def test_parse_document_gives_what_safe_document_gives(text):
    raw = text.encode("utf-8")
    assert parsed(raw) == reference(raw)


def test_depth_past_the_bound_is_refused_on_the_fast_way_too():
    raw = nest(MAX_DEPTH + 1, '"x"').encode()
    with pytest.raises(UnsafeDocument, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_document(raw)
    assert parse_document(nest(MAX_DEPTH, '"x"').encode()) == json.loads(nest(MAX_DEPTH, '"x"'))


def test_a_probe_document_ending_in_its_newline_takes_the_fast_way(monkeypatch):
    """probelib.emit ends every document with a newline, which json.loads allows only as
    whitespace: it must not send every real document to the full walk."""
    import burnin.core.safetext as safetext

    def walked(*args):
        raise AssertionError("walked value by value")

    monkeypatch.setattr(safetext, "safe_document", walked)
    doc = {"probe": "burn", "devices": [{"t": [0.5, 1.0], "name": "GPU 0"}], "errors": []}
    assert parse_document((json.dumps(doc) + "\n").encode()) == doc


def test_a_raw_control_character_in_a_string_is_a_json_error():
    for c in "\t\n\r\x1b":
        with pytest.raises(json.JSONDecodeError):
            parse_document(f'{{"a": "x{c}y"}}\n'.encode())


def test_json_errors_are_json_errors():
    with pytest.raises(json.JSONDecodeError):
        parse_document(b'{"a": ')
    with pytest.raises(UnicodeDecodeError):
        parse_document(b'{"a": "\xff"}')


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(JSON, st.booleans())
def test_any_document_parses_as_safe_document_made_it(doc, ascii_only):
    raw = json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        want = reference(raw)
    except UnicodeDecodeError:  # a lone surrogate written raw: not UTF-8, refused alike
        with pytest.raises(UnicodeDecodeError):
            parse_document(raw)
        return
    assert parsed(raw) == want


@pytest.mark.parametrize("text,deep", [
    ("[[1], [2]]", False),        # as deep as allowed, more brackets than levels
    ("[[], [[]]]", True),         # one level past, after a sibling closed
    ('[["\\u001b"], [2]]', False),  # the full walk keeps the bound it is given
    ('[[["\\u001b"]]]', True),
    ("[[" + "1" * 100 + "], [2]]", False),  # as is a long number's
    ("[[[" + "1" * 100 + "]]]", True),
])
def test_a_bound_other_than_the_default_is_the_one_held(text, deep):
    if deep:
        with pytest.raises(UnsafeDocument, match="nested deeper than 2 levels"):
            parse_document(text.encode(), max_depth=2)
    else:
        assert parse_document(text.encode(), max_depth=2) == safe_document(
            json.loads(text), 2)

"""Text from nodes, made safe once, where it enters the controller.

A node's document is parsed in one place (burnin/probe/protocol.py) and passed through
safe_document() there: what comes out can be shown on a terminal, written to SQLite, XML,
JSON and Prometheus text, and re-encoded, whatever the node printed. Downstream code never
meets a lone surrogate (UTF-8 cannot encode it: the ledger and junit writers would raise),
a control character (ESC drives the operator's terminal; NUL and BEL corrupt logs and
XML), a bidi override (U+202E makes a failure message read backwards), a newline inside a
single-line field, a NaN or an infinity (no JSON reader after us takes them, and `NaN < x`
is false, so a NaN figure passes every floor), or nesting deep enough to exhaust the
recursion limit of an encoder."""

from __future__ import annotations

import json
import math
import re
from typing import Any

# C0 and C1 control characters but newline and tab, DEL, bidi embeddings, overrides and
# isolates, and the invisible marks that reorder text: shown escaped, as Python writes
# them, so that what was there stays visible.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                          "\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Probe documents are a few levels deep (document, devices, a device, its telemetry,
# a series): anything deeper than this is not a document any probe prints.
MAX_DEPTH = 32


# A document's JSON text that json.loads turns into safe values as they are: no escape (a
# string is then a slice of the text), no control or bidi character but tab, newline and
# carriage return (json.loads refuses any control character inside a string, so these
# three can only be whitespace between values: the newline every probe document ends
# with), no non-finite word, no number json.loads would make an infinity (100 digits, or
# an exponent of 3 digits: with fewer, at most 1e198); the text of a str decoded from
# UTF-8 holds no lone surrogate.
_NOT_PLAIN = re.compile("[\\\\\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                        "\u2066-\u2069]")
_DIGITS = bytes.maketrans(b"123456789E-", b"000000000e+")  # every exponent 'e' or 'e+'
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_STRING = re.compile(b'"[^"]*"')  # in a text without escapes


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def safe_text(text: str, multiline: bool = True) -> str:
    """`text` from a node, safe to show and to store: lone surrogates become U+FFFD,
    control and bidi characters are escaped (newline and tab kept when `multiline`)."""
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    return (_UNSAFE if multiline else _UNSAFE_LINE).sub(_escape, text)


class UnsafeDocument(ValueError):
    """A document that cannot be made safe: too deep, or a number that is not finite."""


def safe_document(data: Any, max_depth: int = MAX_DEPTH) -> Any:
    """A copy of parsed JSON `data` with every string (keys too) passed through
    safe_text(multiline=False); UnsafeDocument when it nests deeper than `max_depth` or
    holds a non-finite number. Iterative: a hostile depth cannot exhaust the stack."""
    root: list[Any] = [None]
    # (value, container to put the copy in, key or index there, depth)
    stack: list[tuple[Any, Any, Any, int]] = [(data, root, 0, 0)]
    while stack:
        value, into, where, depth = stack.pop()
        if isinstance(value, str):
            into[where] = safe_text(value, multiline=False)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise UnsafeDocument(f"a number that is not finite ({value})")
            into[where] = value
        elif isinstance(value, dict):
            if depth >= max_depth:
                raise UnsafeDocument(f"nested deeper than {max_depth} levels")
            copy: dict[str, Any] = {}
            into[where] = copy
            for k, v in value.items():
                key = safe_text(k, multiline=False)
                copy[key] = None
                stack.append((v, copy, key, depth + 1))
        elif isinstance(value, list):
            if depth >= max_depth:
                raise UnsafeDocument(f"nested deeper than {max_depth} levels")
            items: list[Any] = [None] * len(value)
            into[where] = items
            stack.extend((v, items, i, depth + 1) for i, v in enumerate(value))
        else:  # int, bool, None
            into[where] = value
    return root[0]


def parse_document(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads(raw), made safe as safe_document() makes it (its errors too, and
    UnicodeDecodeError). A plain text (see _NOT_PLAIN: most probes' documents) parses
    to safe values as they are, and only its depth is checked, on its brackets outside
    strings: walking every value of 80,000 documents was most of reading them."""
    text = raw.decode("utf-8")
    data = json.loads(text)
    if _NOT_PLAIN.search(text):
        return safe_document(data, max_depth)
    outside = _STRING.sub(b'""', raw)  # numbers, words and structure: no text of a string
    digits = outside.translate(_DIGITS)
    if b"NaN" in outside or b"Infinity" in outside or b"e000" in digits \
            or b"e+000" in digits or b"0" * 100 in digits:
        return safe_document(data, max_depth)
    if outside.count(b"[") + outside.count(b"{") > max_depth:  # fewer cannot nest deeper
        depth = 0
        for c in outside.translate(None, _NOT_BRACKET):
            depth += 1 if c in b"[{" else -1
            if depth > max_depth:
                raise UnsafeDocument(f"nested deeper than {max_depth} levels")
    return data

"""Scan cursors and key ranges (serving/engines/scan.py).

A cursor decodes to the store key it was made from; anything else a client can send as
``cursor=`` decodes or raises ValueError (the route's 400), never another exception (a
500). ``KeyRange.build`` holds exactly the store keys its arguments describe.
"""

from __future__ import annotations

import base64

from garbage import deep_json, json_docs
from hypothesis import given
from hypothesis import strategies as st

from streamiq.serving.engines.scan import KeyRange, decode_cursor, encode_cursor

names = st.text(max_size=20)


@given(names, st.binary(max_size=64))
def test_cursor_round_trip(view: str, last: bytes) -> None:
    assert decode_cursor(view, encode_cursor(view, last)) == last


def _b64(doc: str) -> str:
    return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")


@given(names, st.one_of(st.text(max_size=80), json_docs.map(_b64), deep_json.map(_b64),
                        st.binary(max_size=60).map(lambda b: base64.b64encode(b).decode())))
def test_garbage_cursor_is_bytes_or_value_error(view: str, cursor: str) -> None:
    try:
        out = decode_cursor(view, cursor)
    except ValueError:
        return
    assert isinstance(out, bytes)


@given(st.text(max_size=20), st.text(max_size=20))
def test_cursor_of_another_view_is_refused(view: str, other: str) -> None:
    if view != other:
        try:
            decode_cursor(other, encode_cursor(view, b"k"))
        except ValueError as exc:
            assert "belongs to view" in str(exc)
        else:
            raise AssertionError("a cursor of another view was accepted")


opt_text = st.none() | st.text(max_size=6)


@given(st.lists(st.binary(max_size=8), max_size=30), opt_text, opt_text, opt_text,
       st.none() | st.binary(max_size=6))
def test_key_range_holds_exactly_the_described_keys(
        keys: list[bytes], start: str | None, end: str | None, prefix: str | None,
        after: bytes | None) -> None:
    rng = KeyRange.build(start=start, end=end, prefix=prefix, after=after)
    for k in keys + [s.encode() for s in (start, end, prefix) if s]:
        want = ((not start or k >= start.encode()) and (not end or k < end.encode())
                and (not prefix or k.startswith(prefix.encode()))
                and (after is None or k > after))
        inside = (not rng.empty and (rng.lo is None or k >= rng.lo)
                  and (rng.hi is None or k < rng.hi))
        assert inside == want, (k, rng)

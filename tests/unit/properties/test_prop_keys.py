"""View keys (views/base.py): encode/decode/parse round trips, store-key order, errors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamiq.views.bank import BALANCES
from streamiq.views.base import KEY_SEP, decode_key, encode_key, store_key, window_bounds
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

parts = st.text(max_size=20).filter(lambda s: KEY_SEP not in s)
windows = st.integers(min_value=0, max_value=2**63 - 1)  # epoch ms: ts >= 0 (views.limits)
views = st.sampled_from([BALANCES, ORDER_COUNTS, ORDER_COUNTS_1M])


@given(st.lists(parts, min_size=1, max_size=4))
def test_encode_decode_round_trip(values: list[str]) -> None:
    assert decode_key(encode_key(values)) == values


@given(views, st.data())
def test_parse_key_inverts_key_of(view: object, data: st.DataObject) -> None:
    from streamiq.views.base import View

    assert isinstance(view, View)
    row = {c: data.draw(parts.filter(bool), label=c) for c in view.key_columns}
    assert view.parse_key(view.key_of(row)) == row


@given(views, st.text(max_size=60) | st.text(alphabet="a|", max_size=8))
def test_parse_key_garbage_is_columns_or_value_error(view: object, raw: str) -> None:
    from streamiq.views.base import View

    assert isinstance(view, View)
    try:
        out = view.parse_key(raw)
    except ValueError:
        return
    assert list(out) == list(view.key_columns) and all(out.values())
    assert encode_key(out.values()) == raw


@given(st.text(max_size=20), windows, windows)
def test_store_keys_order_by_window(key: str, w1: int, w2: int) -> None:
    a, b = store_key(key, w1), store_key(key, w2)
    assert (a < b) == (w1 < w2) and (a == b) == (w1 == w2)
    assert a[:-9].decode() == key and store_key(key) == key.encode()


@given(st.text(max_size=20), windows, windows, windows)
def test_window_bounds_hold_exactly_the_windows_in_range(key: str, w: int, s: int, e: int
                                                         ) -> None:
    lo, hi = window_bounds(key, s, e)
    assert (lo <= store_key(key, w) < hi) == (s <= w < e)

"""A view's key check: the lean path's ``checked_key`` accepts exactly what
``parse_key`` accepts, and gives the bytes the partitioner hashes."""

from __future__ import annotations

import pytest

from streamiq.views.bank import BALANCES
from streamiq.views.base import MAX_KEY_BYTES
from streamiq.views.orders import ORDER_COUNTS


@pytest.mark.parametrize("key", ["a1", "été", "x" * MAX_KEY_BYTES, "", "a|b", "a\ud800",
                                 "x" * (MAX_KEY_BYTES + 1), "é" * (MAX_KEY_BYTES // 2 + 1)])
def test_checked_key_accepts_what_parse_key_accepts(key: str) -> None:
    try:
        parsed = BALANCES.parse_key(key)
    except ValueError as exc:
        with pytest.raises(ValueError) as got:
            BALANCES.checked_key(key)
        assert str(got.value) == str(exc)  # the same message names the problem
    else:
        assert BALANCES.checked_key(key) == key.encode() and parsed == {"account": key}


def test_a_key_of_two_columns_needs_both() -> None:
    assert ORDER_COUNTS.key_columns == ("store", "type")
    assert ORDER_COUNTS.checked_key("s1|GENERAL") == b"s1|GENERAL"
    for bad in ("s1", "s1|", "|GENERAL", "s1|GENERAL|x"):
        with pytest.raises(ValueError, match="keys have the form"):
            ORDER_COUNTS.checked_key(bad)

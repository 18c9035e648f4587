"""Aggregates over data that does not fit them fail with a ValueError (a 400), never a 500."""

from __future__ import annotations

import pytest

from streamiq.serving.aggregate import Agg, _combine, _folder


@pytest.mark.parametrize("func", ["min", "max"])
def test_min_max_of_mixed_types_is_a_clear_error(func: str) -> None:
    agg = Agg(func, "revenue")
    with pytest.raises(ValueError, match=r"different types"):
        _folder(agg)(3, "text")
    with pytest.raises(ValueError, match=r"different types"):
        _combine(agg, "text", 3)


def test_min_max_of_comparable_values() -> None:
    assert _folder(Agg("min", "x"))(3, 2) == 2
    assert _combine(Agg("max", "x"), 3.5, 2) == 3.5
    assert _combine(Agg("max", "x"), None, 2) == 2

"""``loads_row`` returns and raises exactly what ``json.loads`` does, only faster."""

from __future__ import annotations

import json
import math

import pytest

from streamiq.serving.engines._json import loads_row


@pytest.mark.parametrize("raw", [
    b'{"account":"a-1","balance":40,"count":1}',
    b'{"nested":{"a":[1,2.5,null,true]},"s":"\\u00e9\\n"}',
    '{"name":"caf\u00e9"}'.encode(),
    b'  {"leading":"space"}', b'{"trailing":"space"}\n', b"[1,2]", b"7", b'"text"',
    '{"utf16":1}'.encode("utf-16"),
    # integers outside 64 bits (orjson widens them to floats): ints, as json.loads gives
    b'{"d":123456789012345678901234567890}', b'{"n":-9223372036854775809}',
    b'{"a":[{"u":18446744073709551616}]}', b"18446744073709551616",
    b'{"big_float":1.5e300,"i64":9223372036854775807,"f":9.3e18}',
    b'{"s":"\\ud800"}', b"1e400",  # a lone surrogate escape, beyond a double
])
def test_same_value_as_json_loads(raw: bytes) -> None:
    got, expected = loads_row(raw), json.loads(raw)
    assert got == expected
    assert repr(got) == repr(expected)  # the same types too (an int stays an int)


@pytest.mark.parametrize("raw", [b"NaN", b'{"x":Infinity}', b"[-Infinity,NaN,1]"])
def test_nan_and_infinity_decode_as_json_loads_does(raw: bytes) -> None:
    """orjson rejects these literals; Spark's to_json never writes them, and a row that
    has them decodes as json.loads decodes it (NaN, inf), not as an error."""
    assert repr(loads_row(raw)) == repr(json.loads(raw))  # nan, inf, -inf where they were


def test_nan_row_decodes_to_nan() -> None:
    assert math.isnan(loads_row(b'{"x":NaN}')["x"])
    assert loads_row(b'{"x":-Infinity}')["x"] == -math.inf


@pytest.mark.parametrize("raw", [b"", b"{", b'{"a":1}x', b'{"a":1} {"b":2}', b"\xff\xfe\xfa",
                                 b"nul"])
def test_same_error_as_json_loads(raw: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(raw)
    with pytest.raises(type(expected.value)) as got:
        loads_row(raw)
    assert str(got.value) == str(expected.value)


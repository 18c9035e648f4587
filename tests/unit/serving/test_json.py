"""``loads_row`` returns and raises exactly what ``json.loads`` does, only faster."""

from __future__ import annotations

import json

import pytest

from streamiq.serving._json import loads_row


@pytest.mark.parametrize("raw", [
    b'{"account":"a-1","balance":40,"count":1}',
    b'{"nested":{"a":[1,2.5,null,true]},"s":"\\u00e9\\n"}',
    '{"name":"caf\u00e9"}'.encode(),
    b'  {"leading":"space"}', b'{"trailing":"space"}\n', b"[1,2]", b"7", b'"text"',
    '{"utf16":1}'.encode("utf-16"),
])
def test_same_value_as_json_loads(raw: bytes) -> None:
    assert loads_row(raw) == json.loads(raw)


@pytest.mark.parametrize("raw", [b"", b"{", b'{"a":1}x', b'{"a":1} {"b":2}', b"\xff\xfe\xfa",
                                 b"nul"])
def test_same_error_as_json_loads(raw: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(raw)
    with pytest.raises(type(expected.value)) as got:
        loads_row(raw)
    assert str(got.value) == str(expected.value)

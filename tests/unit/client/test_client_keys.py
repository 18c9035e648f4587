"""Any string can be looked up: the client percent-encodes keys and view names whole,
so "/" stays inside the key (it was a path separator: no route, or another key)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from streamiq.client import AsyncClient, Client, QueryError
from streamiq.kafka.partitioner import partition_for

NODE = "10.0.0.1:1"
KEYS = {  # key -> the path segment it must travel as
    "dir/a1": "dir%2Fa1", "store-7|GENERAL": "store-7%7CGENERAL", "50%": "50%25",
    "a b?#": "a%20b%3F%23", "é": "%C3%A9", "..": "%2E%2E", ".": "%2E", "\ud800": "%ED%A0%80",
}


def node(seen: list[bytes]) -> Any:
    """One node that records each raw path; a lone surrogate's bytes get its 400."""

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.url.raw_path.split(b"?")[0])
        if req.url.path == "/v1/views":
            return httpx.Response(200, json={"views": [{"name": "balances", "partitions": 3}]})
        if req.url.path == "/v1/cluster":
            return httpx.Response(200, json={"nodes": [{"endpoint": NODE}], "views": {}})
        if b"%ED%A0%80" in req.url.raw_path:
            return httpx.Response(400, json={"code": "BAD_REQUEST", "detail": "not UTF-8"})
        return httpx.Response(200, json={"raw": seen[-1].decode()})

    return handler


@pytest.mark.parametrize(("key", "wire"), KEYS.items())
def test_keys_travel_percent_encoded_whole(key: str, wire: str) -> None:
    seen: list[bytes] = []
    with Client(NODE, transport=httpx.MockTransport(node(seen))) as c:
        if key == "\ud800":
            with pytest.raises(QueryError) as err:
                c.get("balances", key)
            assert err.value.code == "BAD_REQUEST"
        else:
            assert c.get("balances", key) == {"raw": f"/v1/views/balances/keys/{wire}"}
            c.metadata("balances", key)
            c.windows("balances", key)
    assert f"/v1/views/balances/keys/{wire}".encode() in seen
    if key != "\ud800":
        assert f"/v1/metadata/balances/{wire}".encode() in seen
        assert f"/v1/views/balances/keys/{wire}/windows".encode() in seen


async def test_the_async_client_the_same() -> None:
    seen: list[bytes] = []
    async with AsyncClient(NODE, transport=httpx.MockTransport(node(seen))) as c:
        assert await c.get("balances", "dir/a1") == {"raw": "/v1/views/balances/keys/dir%2Fa1"}
        assert c.partition("balances", "dir/a1") == partition_for(b"dir/a1", 3)
        assert c.partition("balances", "\ud800") is None  # no partition: any node says 400

"""Input that once made a node answer 500: now a 400 naming the problem."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from streamiq.views.base import MAX_KEY_BYTES


async def _ask(app: Any, method: str, url: str, **kw: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app.app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as c:
        return await c.request(method, url, **kw)


@pytest.mark.parametrize("url", [
    "/v1/views/order_counts_1m/windows?to=9223372036854775808",
    "/v1/views/order_counts_1m/keys/s%7Ct/windows?to=9223372036854775808",
    "/v1/views/order_counts_1m/keys/s%7Ct/windows?from=99999999999999999999",
])
async def test_a_window_bound_past_64_bits_is_a_bad_request(app: Any, url: str) -> None:
    r = await _ask(app, "GET", url)
    assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST", r.text
    assert r.json()["detail"].split(":")[0] in ("to", "from")


async def test_a_lone_surrogate_key_in_a_multi_get_is_a_bad_request(app: Any) -> None:
    r = await _ask(app, "POST", "/v1/views/balances/keys", content='{"keys": ["a1", "\\ud800"]}',
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "keys[1]", r.text
    assert "Unicode" in r.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/views/balances/keys/{k}", "/v1/metadata/balances/{k}"])
async def test_a_key_longer_than_the_limit_is_a_bad_request(app: Any, path: str) -> None:
    ok = await _ask(app, "GET", path.format(k="a" * MAX_KEY_BYTES))
    assert ok.status_code in (200, 404), ok.text  # at the limit: a key like any other
    r = await _ask(app, "GET", path.format(k="a" * (MAX_KEY_BYTES + 1)))
    assert r.status_code == 400 and f"more than {MAX_KEY_BYTES}" in r.json()["detail"], r.text

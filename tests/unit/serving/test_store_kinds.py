"""A node answers the same from either kind of store (``--store rocksdb`` or ``memory``):
through the lean path, the FastAPI routes and a scatter-gather scan."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from nodeapp import make_app

from streamiq.state import KINDS, StoreKind


@pytest.mark.parametrize("kind", KINDS)
async def test_a_node_serves_from_either_store(kind: StoreKind, tmp_path: Path) -> None:
    app = make_app(tmp_path / "n", store=kind)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as c:
        found = await c.get("/v1/views/balances/keys/a1")
        missing = await c.get("/v1/views/balances/keys/nobody")
        scan = await c.get("/v1/views/balances/scan")
    assert found.status_code == 200 and found.json()["value"]["balance"] == 5, found.text
    assert missing.status_code == 404, missing.text
    assert [r["key"] for r in scan.json()["rows"]] == ["a1"], scan.text
    assert (tmp_path / "n").exists() == (kind == "rocksdb")  # memory writes no files

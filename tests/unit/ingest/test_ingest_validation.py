"""Ingest refuses what the pipeline would dead-letter: 400, the field named, nothing sent.

No broker: the producer and topic creation are replaced by fakes that record what
would have been produced.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeIngestProducer as _FakeProducer
from fastapi.testclient import TestClient

from streamiq.config import Settings
from streamiq.ingest import app as ingest
from streamiq.views.limits import AMOUNT, MAX_AMOUNT, ORDER_AMOUNT


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setattr(ingest, "Producer", _FakeProducer)
    monkeypatch.setattr(ingest, "ensure_topics", lambda *a, **k: {})
    _FakeProducer.sent = []
    app = ingest.create_ingest_app(Settings(app="bank,orders", auth=False))
    with TestClient(app) as c:
        yield c


def _order(amount: Any) -> str:
    return ('{"order_id": "o-1", "store": "s-1", "type": "GENERAL", "amount": '
            f"{amount}}}")


@pytest.mark.parametrize("amount", ["false", "true", '"12"', "NaN", "Infinity", "-Infinity",
                                    "1e309", "-1", "1e13", str(2**63), str(MAX_AMOUNT + 1),
                                    "null", "[1]"])
def test_order_amount_refused(client: TestClient, amount: str) -> None:
    r = client.post("/orders", content=_order(amount),
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "BAD_REQUEST"
    assert body["detail"].startswith("amount: "), body
    assert _FakeProducer.sent == []


@pytest.mark.parametrize("amount", ["0", "12.5", "30", str(MAX_AMOUNT)])
def test_order_amount_accepted(client: TestClient, amount: str) -> None:
    r = client.post("/orders", content=_order(amount),
                    headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    (sent,) = _FakeProducer.sent
    assert sent[2]["amount"] == float(amount)
    assert isinstance(sent[2]["amount"], float) and ORDER_AMOUNT.contains(sent[2]["amount"])


@pytest.mark.parametrize("amount", ["false", "true", "1.5", "1e3", "NaN", "inf",
                                    str(MAX_AMOUNT + 1), str(-MAX_AMOUNT - 1), str(2**63), ""])
def test_bank_amount_refused(client: TestClient, amount: str) -> None:
    r = client.post(f"/account/a-1?amount={amount}")
    assert r.status_code == 400, r.text
    assert r.json()["detail"].startswith("amount: "), r.json()
    assert _FakeProducer.sent == []


@pytest.mark.parametrize("amount", [0, -7, AMOUNT.lo, AMOUNT.hi])
def test_bank_amount_accepted(client: TestClient, amount: int) -> None:
    r = client.post(f"/account/a-1?amount={amount}")
    assert r.status_code == 200, r.text
    (sent,) = _FakeProducer.sent
    assert sent[2]["amount"] == amount and type(sent[2]["amount"]) is int


def test_bounds_are_the_pipelines() -> None:
    """Ingest's limits are the views' checks: the same Bound objects, not copies."""
    from streamiq.views import bank, orders

    assert AMOUNT.check("amount") in bank.BALANCES.checks
    assert ORDER_AMOUNT.check("amount") in orders.ORDER_COUNTS.checks
    assert ORDER_AMOUNT.check("amount") in orders.ORDER_COUNTS_1M.checks


def test_writes_need_a_token_with_the_ingest_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamiq.auth import mint

    monkeypatch.setattr(ingest, "Producer", _FakeProducer)
    monkeypatch.setattr(ingest, "ensure_topics", lambda *a, **k: {})
    _FakeProducer.sent = []
    secret = "an-ingest-jwt-secret-32-bytes-long"
    app = ingest.create_ingest_app(Settings(app="bank,orders", auth=True, jwt_secret=secret))
    with TestClient(app) as c:
        assert c.get("/health").status_code == 200  # probes carry no token
        r = c.post("/account/100001", params={"amount": 5})
        assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED"
        reader = {"authorization": f"Bearer {mint(secret, scope='views:*')}"}
        r = c.post("/account/100001", params={"amount": 5}, headers=reader)
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
        r = c.post("/account/100001", params={"amount": "x"})  # 401 before validation
        assert r.status_code == 401
        assert _FakeProducer.sent == []
        writer = {"authorization": f"Bearer {mint(secret)}"}
        r = c.post("/account/100001", params={"amount": 5}, headers=writer)
        assert r.status_code == 200, r.text
        assert len(_FakeProducer.sent) == 1


def test_metrics_count_writes_refusals_and_time_each_route(client: TestClient) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    for i in range(3):
        assert client.post(f"/account/a{i}?amount=5").status_code == 200
    assert client.post("/orders", content=_order(1),
                       headers={"content-type": "application/json"}).status_code == 200
    assert client.post("/orders", content=_order("NaN"),
                       headers={"content-type": "application/json"}).status_code == 400
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(r.text) for s in f.samples}
    assert samples[("streamiq_ingest_records_total", (("topic", "bank-transactions"),))] == 3
    assert samples[("streamiq_ingest_records_total", (("topic", "orders"),))] == 1
    assert samples[("streamiq_ingest_refused_total", ())] == 1
    assert samples[("streamiq_ingest_failed_total", ())] == 0
    count = "streamiq_ingest_request_duration_seconds_count"
    assert samples[(count, (("code", "2xx"), ("route", "/account/{account}")))] == 3
    assert samples[(count, (("code", "4xx"), ("route", "/orders")))] == 1


@pytest.mark.parametrize(("url", "unknown"), [
    ("/account/a-1?amount=5&amout=7", "amout"),
    ("/transfer?from=a-1&to=a-2&amount=5&note=rent", "note"),
    ("/orders?dry_run=true", "dry_run"),
])
def test_a_parameter_the_route_does_not_take_is_refused_by_name(
        client: TestClient, url: str, unknown: str) -> None:
    """A misspelt or made-up query parameter is a 400 naming it (it used to be ignored:
    the write went through as if it had not been sent), and nothing is produced."""
    r = client.post(url, content=_order(5), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["problems"] == [r.json()["detail"]]
    assert r.json()["detail"].startswith(f"{unknown}: not a parameter of this route"), r.text
    assert _FakeProducer.sent == []

"""The lean write path answers exactly as the FastAPI routes do: the same requests sent to
the ingest as run_ingest serves it (lean writes on) and to its FastAPI routes alone (as
before), side by side; the same status, body (the record's ``ts`` aside) and record
produced. A valid write is answered on the lean path; every refusal by the routes,
with their wording. No broker: the producer is a fake that records what it is given."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fakes import FakeIngestProducer
from httpserve import serving

from streamiq.config import Settings
from streamiq.ingest import app as ingest
from streamiq.ingest import records
from streamiq.ingest.metrics import IngestCounters
from streamiq.views.limits import AMOUNT, MAX_AMOUNT

JSON = {"content-type": "application/json"}


def _order(amount: Any = "12.5", **fields: Any) -> str:
    base = {"order_id": '"o-1"', "store": '"s-1"', "type": '"GENERAL"', "amount": amount}
    base.update(fields)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in base.items() if v is not None) + "}"


#: (path, body or None, headers, whether the lean path takes it)
CASES: list[tuple[str, str | None, dict[str, str], bool]] = [
    *((f"/account/a-1?amount={a}", None, {}, True)
      for a in ("5", "-7", "0", "-0", str(AMOUNT.lo), str(AMOUNT.hi))),
    *((f"/account/a-1?amount={a}", None, {}, False)
      for a in ("1.5", "1e3", "true", "", "007", "+5", str(MAX_AMOUNT + 1),
                str(2**63), "5&note=x", "5&amount=6", " 5")),
    ("/account/a-1", None, {}, False),
    ("/account/a%2Fb?amount=5", None, {}, False),
    ("/account/a%20b?amount=5", None, {}, False),
    (f"/account/{'x' * 65}?amount=5", None, {}, False),
    (f"/account/{'x' * 64}?amount=5", None, {}, True),
    ("/account/a-1/x?amount=5", None, {}, False),
    ("/transfer?from=a-1&to=b-2&amount=5", None, {}, True),
    ("/transfer?amount=-3&to=b-2&from=a-1", None, {}, True),
    *((f"/transfer?{q}", None, {}, False) for q in (
        "from=a-1&to=a-1&amount=5", "from=a-1&amount=5", "to=b&amount=5", "from=a&to=b",
        "from=a/b&to=b&amount=5", "from=a&to=b&amount=1.5", f"from=a&to=b&amount={2**63}",
        "from=a&to=b&amount=true", "from=a&to=b&amount=5&x=1", "from=a&to=b&amount=5&to=c",
        f"from={'x' * 65}&to=b&amount=5", "from=&to=b&amount=5", "")),
    *(("/orders", _order(a), JSON, True) for a in ("12.5", "30", "0", str(MAX_AMOUNT))),
    ("/orders", _order(type='"RESTAURANT"'), {"content-type": "application/json; "
                                                              "charset=utf-8"}, True),
    *(("/orders", _order(a), JSON, False)
      for a in ("false", "true", '"12"', "NaN", "Infinity", "1e309", "-1", "1e13", "null",
                "[1]", str(2**63))),
    ("/orders", _order(extra='"x"'), JSON, False),
    ("/orders", _order(order_id=None), JSON, False),
    ("/orders", _order(type='"OTHER"'), JSON, False),
    ("/orders", _order(store='"s 1"'), JSON, False),
    ("/orders", _order(order_id="7"), JSON, False),
    ("/orders", _order().replace("}", ', "amount": 3}'), JSON, False),  # a field twice
    ("/orders", "[1, 2]", JSON, False),
    ("/orders", "not json", JSON, False),
    ("/orders", _order(), {"content-type": "text/plain"}, False),
    ("/orders", _order() + " " * 20000, JSON, False),  # past the lean body limit: 200
]


@pytest_asyncio.fixture(loop_scope="function")
async def ports(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[int, int,
                                                                         IngestCounters]]:
    """(the lean ingest's port, the routes-only ingest's port, the lean one's counters)."""
    monkeypatch.setattr(ingest, "Producer", FakeIngestProducer)
    monkeypatch.setattr(ingest, "ensure_topics", lambda *a, **k: {})
    FakeIngestProducer.sent = []
    settings = Settings(app="bank,orders", auth=False)
    lean, old = ingest.create_ingest_app(settings), ingest.create_ingest_app(settings)
    async with serving(lean, lean.state.http_edge, lifespan=True,
                       writes=lean.state.lean_writes) as p, \
            serving(old, old.state.http_edge, lifespan=True) as q:
        yield p, q, lean.state.counters


def _answer(r: httpx.Response) -> tuple[int, str, Any]:
    """The answer, but for what differs between two writes (the time, the offset: both
    ingests share the fake's one log)."""
    body = r.json()
    if isinstance(body.get("record"), dict):
        body["record"].pop("ts")
        offset = body.pop("offset")
        assert body.pop("position") == f"{body['topic']}:{body['partition']}:{offset}"
    return r.status_code, r.headers["content-type"], body


@pytest.mark.parametrize(("path", "body", "headers", "taken"), CASES)
async def test_the_lean_path_answers_as_the_routes_do(
        ports: tuple[int, int, IngestCounters], path: str, body: str | None,
        headers: dict[str, str], taken: bool) -> None:
    lean_port, old_port, counters = ports
    answers = []
    async with httpx.AsyncClient() as c:
        for port in (lean_port, old_port):
            r = await c.post(f"http://127.0.0.1:{port}{path}", content=body, headers=headers)
            answers.append(_answer(r))
    assert answers[0] == answers[1]
    assert counters.lean == int(taken), answers[0]
    produced = [(t, k, {f: v for f, v in rec.items() if f != "ts"})
                for t, k, rec in FakeIngestProducer.sent]
    assert produced[:len(produced) // 2] == produced[len(produced) // 2:]
    assert len(produced) == (2 if answers[0][0] == 200 else 0)


async def test_a_transfer_is_one_record_keyed_by_the_account_it_leaves(
        ports: tuple[int, int, IngestCounters]) -> None:
    async with httpx.AsyncClient() as c:
        r = await c.post(f"http://127.0.0.1:{ports[0]}/transfer",
                         params={"from": "a-1", "to": "b-2", "amount": 7})
        bad = await c.post(f"http://127.0.0.1:{ports[0]}/transfer",
                           params={"from": "a-1", "to": "a-1", "amount": 7})
    assert r.status_code == 200 and r.json()["key"] == "a-1"
    ((topic, key, record),) = FakeIngestProducer.sent
    assert (topic, key) == ("bank-transactions", "a-1")
    assert list(record) == ["account", "to", "amount", "ts"]
    assert (record["account"], record["to"], record["amount"]) == ("a-1", "b-2", 7)
    assert r.json()["position"] == f"bank-transactions:0:{r.json()['offset']}"
    assert bad.status_code == 400
    assert bad.json()["detail"] == "to: must differ from from", bad.json()


def test_the_checks_take_only_plain_valid_input() -> None:
    """What no HTTP client sends as such, checked directly."""
    assert records.deposit("a-1\n", b"amount=5") is None  # re's $ allows a last newline
    assert records.deposit("a-1", b"amount=5\n") is None
    ok = records.order(json.dumps({"order_id": "o", "store": "s", "type": "GENERAL",
                                   "amount": 3}).encode())
    assert ok is not None and ok[1]["amount"] == 3.0 and type(ok[1]["amount"]) is float
    assert records.order(b'{"order_id": "o", "store": "s", "type": "GENERAL", '
                         b'"amount": {"a": 1}}') is None
    assert records.transfer(b"from=a&to=b&amount=5&") is None

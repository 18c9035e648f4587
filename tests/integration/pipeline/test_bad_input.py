"""Hostile input through the real broker and the real pipeline (``--app bank,orders``).

An amount near 2**63, a NaN or 1e309 order amount and a timestamp near 2**63 used to
raise Spark's ANSI overflow (or poison every revenue sum): the query failed, replayed
the same batch on restart and failed again until the pipeline exited. Now each goes to
the dead-letter topic with a reason naming the field; the good records of the same
micro-batch and of later ones are reflected exactly and no query ever stops.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from pipeline_harness import (
    changelog_state,
    dead_letter_docs,
    input_ends,
    is_marker,
    wait_caught_up,
)
from procs import SHORT_BATCHES

from streamiq.pipeline.deadletter import DEAD_LETTER_TOPIC
from streamiq.views.limits import MAX_AMOUNT, MAX_TS_MS

pytestmark = pytest.mark.integration

I64_MAX = 2**63 - 1
NOW = int(time.time() * 1000)
RANGE_AMOUNT = f"check failed: amount out of range [{-MAX_AMOUNT}, {MAX_AMOUNT}]"
RANGE_TS = f"check failed: ts out of range [0, {MAX_TS_MS}]"
NON_FINITE = "not a finite number (NaN or Infinity) in field(s): amount"


def _txn(account: str, amount: int, ts: int = NOW) -> dict[str, Any]:
    return {"account": account, "amount": amount, "ts": ts}


def _order(i: int, store: str, kind: str, amount: Any, ts: int = NOW) -> str:
    """Raw JSON text, so NaN and 1e309 reach the pipeline as written."""
    return (f'{{"order_id": "o-{i}", "store": "{store}", "type": "{kind}", '
            f'"amount": {amount}, "ts": {ts}}}')


GOOD_TXNS = [[_txn(f"acct-{i % 4}", (i * 37) % 101 - 40, NOW + i) for i in range(40)],
             [_txn(f"acct-{i % 5}", (i * 13) % 97 - 30, NOW + 100 + i) for i in range(30)]]
BAD_TXNS = {  # value -> reason; acct-1 has good transactions: its sum would overflow
    json.dumps(_txn("acct-1", I64_MAX)): RANGE_AMOUNT,
    json.dumps(_txn("acct-1", -I64_MAX - 1)): RANGE_AMOUNT,
    json.dumps(_txn("acct-2", 5, I64_MAX)): RANGE_TS,
}
GOOD_ORDERS = [[_order(i, f"store-{i % 3}", ("GENERAL", "RESTAURANT")[i % 2], i + 0.5, NOW + i)
                for i in range(30)],
               [_order(100 + i, f"store-{i % 4}", "GENERAL", 2 * i, NOW + 200 + i)
                for i in range(20)]]
BAD_ORDERS = {
    _order(900, "store-0", "GENERAL", "NaN"): NON_FINITE,
    _order(901, "store-1", "RESTAURANT", "1e309"): NON_FINITE,
    _order(902, "store-2", "GENERAL", "-Infinity"): NON_FINITE,
    _order(903, "store-0", "GENERAL", 1, I64_MAX): RANGE_TS,
}


def _store(order: str) -> str:
    return str(json.loads(order)["store"])


def _caught_up(bootstrap: str, topic: str, changelogs: list[str]) -> list[list[Any]]:
    counted = input_ends(bootstrap, topic)  # counts partitions holding records only
    ends = {str(p): counted.get(str(p), 0) for p in range(3)}
    return [wait_caught_up(bootstrap, c, ends, topic, 3, timeout=180) for c in changelogs]


def _expected_orders(orders: list[str]) -> tuple[dict[str, Any], dict[tuple[str, int], Any]]:
    total: dict[str, dict[str, Any]] = {}
    windows: dict[tuple[str, int], dict[str, Any]] = {}
    for raw in orders:
        o = json.loads(raw)
        key = f"{o['store']}|{o['type']}"
        for acc in (total.setdefault(key, {"count": 0, "revenue": 0.0}),
                    windows.setdefault((key, o["ts"] - o["ts"] % 60_000),
                                       {"count": 0, "revenue": 0.0})):
            acc["count"] += 1
            acc["revenue"] += o["amount"]
    return total, windows


def test_hostile_records_are_dead_lettered_and_the_pipeline_keeps_running(
        cluster: Any, bootstrap: str, produce: Callable[..., None]) -> None:
    pipe = cluster.pipeline("bank,orders", extra=SHORT_BATCHES)  # markers every 10 s
    bank_in, orders_in = cluster.topic("bank-transactions"), cluster.topic("orders")
    balances, counts = cluster.topic("balances-changelog"), cluster.topic("order_counts-changelog")
    counts_1m = cluster.topic("order_counts_1m-changelog")

    # batch 1: the hostile records among good ones (one produce each: one micro-batch)
    txns1 = [json.dumps(t) for t in GOOD_TXNS[0]] + list(BAD_TXNS)
    produce(bank_in, txns1, keys=[json.loads(t)["account"] for t in txns1])
    orders1 = GOOD_ORDERS[0] + list(BAD_ORDERS)
    produce(orders_in, orders1, keys=[_store(o) for o in orders1])
    _caught_up(bootstrap, bank_in, [balances])
    _caught_up(bootstrap, orders_in, [counts, counts_1m])

    # batch 2: good records only, after the hostile ones: still reflected
    produce(bank_in, GOOD_TXNS[1], keys=[t["account"] for t in GOOD_TXNS[1]])
    produce(orders_in, GOOD_ORDERS[1], keys=[_store(o) for o in GOOD_ORDERS[1]])
    (bal_msgs,) = _caught_up(bootstrap, bank_in, [balances])
    cnt_msgs, win_msgs = _caught_up(bootstrap, orders_in, [counts, counts_1m])

    want_bal: dict[str, dict[str, int]] = {}
    for t in GOOD_TXNS[0] + GOOD_TXNS[1]:
        w = want_bal.setdefault(t["account"], {"balance": 0, "count": 0, "last_update": 0})
        w["balance"] += t["amount"]
        w["count"] += 1
        w["last_update"] = max(w["last_update"], t["ts"])
    last, _ = changelog_state(bal_msgs)
    assert {k: {c: v[c] for c in ("balance", "count", "last_update")}
            for k, v in last.items()} == want_bal

    want_total, want_windows = _expected_orders(GOOD_ORDERS[0] + GOOD_ORDERS[1])
    last, _ = changelog_state(cnt_msgs)
    assert {k: {"count": v["count"], "revenue": v["revenue"]} for k, v in last.items()} \
        == want_total
    got_windows: dict[tuple[str, int], dict[str, Any]] = {}
    for m in win_msgs:
        if not is_marker(m):
            v = json.loads(m.value())
            got_windows[(m.key().decode(), v["window_start"])] = {
                "count": v["count"], "revenue": v["revenue"]}
    assert got_windows == want_windows

    bad = {**BAD_TXNS, **BAD_ORDERS}
    docs = dead_letter_docs(bootstrap, cluster.topic(DEAD_LETTER_TOPIC), len(bad))
    dead = {d["value"]: d for d in docs}
    assert len(docs) == len(dead), "a record was dead-lettered twice"
    assert {v: d["reason"] for v, d in dead.items()} == bad
    assert {d["view"] for v, d in dead.items() if v in BAD_TXNS} == {"balances"}
    assert pipe.alive(), pipe.log()[-4000:]
    assert "query stopped" not in pipe.log() and " terminated: " not in pipe.log()

    # The dead-letter queries' checkpoints: a pipeline stopped and started again does not
    # dead-letter the records it wrote already, and takes the new ones
    pipe.stop(60)
    again = cluster.pipeline("bank,orders", extra=SHORT_BATCHES)
    produce(bank_in, [b"{again"], keys=["bad"])
    docs = dead_letter_docs(bootstrap, cluster.topic(DEAD_LETTER_TOPIC), len(bad) + 1)
    assert sorted(d["value"] for d in docs) == sorted([*bad, "{again"]), again.log()[-4000:]
    assert again.alive(), again.log()[-4000:]

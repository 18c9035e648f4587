"""The balances view's plan on transfers (issue 46): both legs from one record.

In-process Spark (the session fixture of tests/conftest.py), batch frames shaped like
the Kafka source's rows, run through the pipeline's own plan (``queries.view_frame``,
then the changelog records). Before transfers, ``to`` was ignored: a transfer of N was
a deposit of N to the sender, so every balance below was wrong and the balances summed
to more than the deposits.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from streamiq.pipeline.deadletter import parse_input, reason_column
from streamiq.pipeline.queries import changelog_records, view_frame
from streamiq.views.bank import BALANCES
from streamiq.views.base import POSITION_HEADER

pytestmark = pytest.mark.integration

KAFKA_COLUMNS = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
                 "timestamp TIMESTAMP, timestampType INT")
TOPIC = "bank-transactions"
INPUTS = [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _record(account: str, amount: int, ts: int, to: str | None = None) -> bytes:
    doc: dict[str, Any] = {"account": account, "amount": amount, "ts": ts}
    if to is not None:
        doc["to"] = to
    return json.dumps(doc).encode()


#: (partition, offset, value): deposits to a, b and c, then transfers between them, in
#: other partitions than their targets' (a -> b in partition 0, b -> c in 1, c -> a in 2)
RECORDS = [
    (0, 0, _record("a", 100, 1)), (1, 0, _record("b", 50, 2)), (2, 0, _record("c", 5, 3)),
    (0, 1, _record("a", 30, 10, to="b")),
    (1, 1, _record("b", 45, 11, to="c")),
    (2, 1, _record("c", -7, 12, to="a")),  # a negative transfer moves money back
    (0, 2, _record("a", 1, 13, to="a")),  # bad: to itself
    (0, 3, _record("a", 1, 14, to="")),  # bad: empty target
    (1, 2, _record("b", 1, 15, to="x" * 65)),  # bad: too long
    (1, 3, _record("b", 2, 16, to="y" * 64)),  # 64 characters: a good transfer
]
WANT = {  # balance, count (each leg counts), last_update (the record's ts on both legs)
    "a": (100 - 30 - 7, 3, 12), "b": (50 + 30 - 45 - 2, 4, 16), "c": (5 + 45 + 7, 3, 12),
    "y" * 64: (2, 1, 16),
}


def _raw(spark: Any) -> Any:
    rows = [(b"k", v, TOPIC, p, o, NOW, 0) for p, o, v in RECORDS]
    return spark.createDataFrame(rows, KAFKA_COLUMNS)


def test_a_transfer_folds_both_legs(spark: Any) -> None:
    rows = {r.account: r for r in view_frame(_raw(spark), BALANCES).collect()}
    assert {k: (r.balance, r["count"], r.last_update) for k, r in rows.items()} == WANT
    deposits = sum(json.loads(v)["amount"] for _, _, v in RECORDS[:3])
    assert sum(r.balance for r in rows.values()) == deposits


def test_both_legs_carry_the_transfers_position(spark: Any) -> None:
    """b's row names a -> b's offset in partition 0, where b itself never wrote: a read
    of b with that transfer's token is answered once b's row is stored."""
    rows = view_frame(_raw(spark), BALANCES, INPUTS)
    got = {r.key: dict(r.headers)[POSITION_HEADER].decode()
           for r in changelog_records(rows, BALANCES, INPUTS).collect()}
    assert got["b"] == f"{TOPIC}:0:1,{TOPIC}:1:3"
    assert got["a"] == f"{TOPIC}:0:1,{TOPIC}:2:1"  # the bad transfers of 0 folded nothing
    assert got["c"] == f"{TOPIC}:1:1,{TOPIC}:2:1"


def test_bad_transfers_have_their_reasons(spark: Any) -> None:
    parsed = parse_input(_raw(spark), BALANCES)
    why = {(r.p, r.o): r.why for r in parsed.select(
        parsed["_streamiq_partition"].alias("p"), parsed["_streamiq_offset"].alias("o"),
        reason_column(BALANCES).alias("why")).collect()}
    assert {k: v for k, v in why.items() if v is not None} == {
        (0, 2): "check failed: transfer to the same account",
        (0, 3): "check failed: empty transfer target (to)",
        (1, 2): "check failed: transfer target (to) longer than 64 characters",
    }

"""SQL sessions on 3 real nodes (issue 26): who may connect and what a token sees,
errors on a connection that stays usable, SQLAlchemy's reflection, and a position set in
the session that waits for the write it names.

The same 3 nodes and rows as test_sql_e2e.py (tests/sqlnodes.py): changelogs written
directly (no Spark), client authentication on. A write is made as the ingest and the
pipeline's sink make it: a record on the input topic (its offset is the position token),
then the row and a marker on the changelog.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from confluent_kafka import Producer
from psycopg import errors
from sqlnodes import BAL, T0, connect, metric, owners, psql, start_nodes
from updemo import until

from streamiq.auth import mint
from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.bank import TOPIC as BANK_INPUT
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, marker_value

pytestmark = pytest.mark.integration

VIEWS = ["balances", "order_counts", "order_counts_1m"]
ERRORS = "streamiq_sql_errors_total"


@pytest.fixture
def nodes(cluster: Any) -> Iterator[list[tuple[int, int]]]:
    """3 nodes serving bank and orders, each with its SQL port: [(http, sql)]."""
    yield start_nodes(cluster)


def test_sql_sessions_on_three_nodes(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """One cluster start (3 nodes) for the checks."""
    _no_password_is_refused(cluster, nodes)
    _a_token_sees_only_its_views(cluster, nodes)
    _errors_leave_the_connection_usable(cluster, nodes)
    _sqlalchemy_reflects_the_views(cluster, nodes)
    _a_position_waits_for_its_write(cluster, nodes)  # last: it writes rows


def _message(f: Any) -> tuple[bytes, bytes]:
    """One backend message: (its type, its body)."""
    head = f.read(5)
    assert len(head) == 5, head
    return head[:1], f.read(struct.unpack("!i", head[1:])[0] - 4)


def _refusal(sql_port: int, instead: bytes) -> dict[str, str]:
    """The fields of the server's answer when the client sends ``instead`` of a
    password (libpq sends no empty password: the bytes are written here), and the
    connection is closed after it."""
    params = b"user\x00tests\x00database\x00streamiq\x00\x00"
    with socket.create_connection(("127.0.0.1", sql_port), timeout=30) as s:
        f = s.makefile("rb")
        s.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        assert _message(f) == (b"R", struct.pack("!i", 3))  # a cleartext password asked
        s.sendall(instead)
        kind, body = _message(f)
        assert f.read(1) == b""  # closed
    assert kind == b"E", body
    return {field[:1].decode(): field[1:].decode() for field in body.split(b"\x00") if field}


def _no_password_is_refused(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """An empty password and a token signed with another secret: FATAL 28P01, the
    connection closed, counted. A query sent instead of the password: FATAL too (not
    the protocol), counted as a refused connection."""
    password = [b"p" + struct.pack("!i", 4 + len(p)) + p for p in (
        b"\x00", mint(uuid.uuid4().hex, subject="tests").encode() + b"\x00")]
    query = b"Q" + struct.pack("!i", 14) + b"SELECT 1;\x00"
    for port, sql in nodes:
        counts = [f'{ERRORS}{{scope="connection",sqlstate="28P01"}}',
                  f'{ERRORS}{{scope="connection",']  # every refusal
        before = [metric(cluster, port, name) for name in counts]
        for instead in password:
            fields = _refusal(sql, instead)
            assert (fields["S"], fields["C"]) == ("FATAL", "28P01"), fields
        assert _refusal(sql, query)["S"] == "FATAL"
        assert [metric(cluster, port, name) for name in counts] == [
            before[0] + 2, before[1] + 3]


def _a_token_sees_only_its_views(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """A token that may read balances only: its catalog lists balances alone, the other
    views do not exist for it (42P01, the SQLSTATE an invisible view gets), and it reads
    every balance, those owned by the other nodes too (they check the token again)."""
    token = mint(cluster.jwt_secret, subject="analyst", scope="views:balances")
    for _, sql in nodes:
        with connect(sql, token) as conn:
            assert conn.execute("SELECT table_name FROM information_schema.tables WHERE "
                                "table_schema = 'public'").fetchall() == [("balances",)]
            for statement in ("SELECT count FROM order_counts WHERE store = 'st01' AND "
                              "type = 'GENERAL'", "SELECT type, count(*) FROM order_counts_1m "
                              "GROUP BY type", "SELECT * FROM balances b JOIN order_counts o "
                              "ON o.store = b.account"):
                with pytest.raises(errors.UndefinedTable, match=r'"order_counts(_1m)?" does '
                                   "not exist") as refused:
                    conn.execute(statement)
                assert refused.value.sqlstate == "42P01"
            assert conn.execute("SELECT account, balance FROM balances ORDER BY account"
                                ).fetchall() == [(r["account"], r["balance"]) for r in BAL]
    out = psql(nodes[0][1], token, r"\dt")
    assert out.returncode == 0, out.stderr
    assert [line.split("|")[1] for line in out.stdout.splitlines()] == ["balances"], out.stdout


def _errors_leave_the_connection_usable(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """Bad SQL is 42601 and an unknown view 42P01, each counted, prepared or not; the
    next statement on the same connection answers."""
    for port, sql in nodes:
        counts = {s: metric(cluster, port, f'{ERRORS}{{scope="statement",sqlstate="{s}"}}')
                  for s in ("42601", "42P01")}
        with connect(sql, cluster.token) as conn:
            for statement, error in (("selec 1", errors.SyntaxError),
                                     ("SELECT * FROM balances WHERE", errors.SyntaxError),
                                     ("SELECT * FROM nope", errors.UndefinedTable),
                                     ("SELECT 1 FROM balances JOIN nope ON true",
                                      errors.UndefinedTable)):
                for prepare in (False, True):
                    with pytest.raises(error) as failed:
                        conn.execute(statement, prepare=prepare)
                    assert failed.value.sqlstate == error.sqlstate, statement
                    assert conn.execute("SELECT balance FROM balances WHERE account = %s",
                                        (BAL[5]["account"],)).fetchall() == [(BAL[5]["balance"],)]
        assert [metric(cluster, port, f'{ERRORS}{{scope="statement",sqlstate="{s}"}}')
                for s in counts] == [n + 4 for n in counts.values()]


def _sqlalchemy_reflects_the_views(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """SQLAlchemy's reflection through a node that does not own every partition: the
    three views, their columns (window bounds too), and a read of keys owned elsewhere."""
    ports = [p for p, _ in nodes]
    placed = {v: owners(cluster, ports[0], v) for v in VIEWS}
    port, sql = next((p, s) for p, s in nodes if all(set(o.values()) != {p}
                                                     for o in placed.values()))
    engine = sa.create_engine(f"postgresql+psycopg://tests:{cluster.token}@127.0.0.1:{sql}"
                              "/streamiq?sslmode=disable")
    try:
        inspector = sa.inspect(engine)
        assert inspector.get_table_names() == VIEWS
        assert [c["name"] for c in inspector.get_columns("order_counts_1m")] == [
            "store", "type", "window_start", "window_end", "count", "revenue"]
        table = sa.Table("balances", sa.MetaData(), autoload_with=engine)
        elsewhere = [r for r in BAL if placed["balances"][BALANCES.partition_of(
            r["account"], 3)] != port][:10]
        assert elsewhere
        with engine.connect() as c:
            got = c.execute(sa.select(table.c.account, table.c.balance).where(
                table.c.account.in_([r["account"] for r in elsewhere])).order_by(
                table.c.account)).all()
        assert [tuple(r) for r in got] == [(r["account"], r["balance"]) for r in elsewhere]
    finally:
        engine.dispose()


class _Pipeline:
    """Writes as an ingest and the pipeline's sink do: a record on the input topic (its
    position token returned), then the row on the changelog and a marker on each of its
    partitions naming the input offsets reflected."""

    def __init__(self, cluster: Any) -> None:
        self.input = cluster.topic(BANK_INPUT)
        self.changelog = cluster.topic(BALANCES.changelog_topic)
        conf = {"bootstrap.servers": cluster.bootstrap}
        ensure_topics(conf, {self.input: 3})
        self.producer = Producer({**conf, "partitioner": "murmur2_random", "linger.ms": 5,
                                  "enable.idempotence": True})
        self.reflected: dict[str, dict[int, int]] = {self.input: {}}
        self.batch = 0

    def ingest(self, account: str, amount: int) -> tuple[int, int]:
        """The input record's (partition, offset): ``topic:partition:offset`` its token."""
        written: list[Any] = []
        self.producer.produce(self.input, key=account.encode(), value=json.dumps(
            {"account": account, "amount": amount, "ts": T0}).encode(),
            on_delivery=lambda err, m: written.append(err or m))
        assert self.producer.flush(30) == 0 and len(written) == 1
        return int(written[0].partition()), int(written[0].offset())

    def sink(self, row: dict[str, Any], partition: int, offset: int) -> None:
        self.producer.produce(self.changelog, key=BALANCES.key_of(row).encode(),
                              value=json.dumps(row).encode())
        self.reflected[self.input][partition] = offset + 1
        self.batch += 1
        for p in range(3):
            self.producer.produce(self.changelog, key=MARKER_KEY, partition=p,
                                  value=marker_value(self.batch, self.reflected),
                                  headers=[(MARKER_HEADER, b"1")])
        assert self.producer.flush(30) == 0


def _a_position_waits_for_its_write(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """From every node: with ``SET streamiq.position`` the token of a write, a lookup
    started before the write reaches the changelog waits for it and answers its row."""
    pipeline = _Pipeline(cluster)
    for i, (port, sql) in enumerate(nodes):
        account = f"pos-{i}-{uuid.uuid4().hex[:6]}"
        partition, offset = pipeline.ingest(account, 100 + i)
        with connect(sql, cluster.token) as conn:
            conn.execute(f"SET streamiq.position = '{pipeline.input}:{partition}:{offset}'")
            conn.execute("SET streamiq.wait_ms = 60000")
            got = _started_lookup(cluster, port, conn, account)
            assert not got.done.is_set(), got.answer  # waiting: its write is not in the view
            pipeline.sink({"account": account, "balance": 100 + i, "count": 1,
                           "last_update": T0}, partition, offset)
            assert got.done.wait(90), "the lookup never answered"
        assert got.answer == [(100 + i, 1)], (port, got.answer)


class _Lookup(threading.Thread):
    """A balance lookup on ``conn``, in a thread; ``answer``: its rows or its error."""

    def __init__(self, conn: psycopg.Connection[Any], account: str) -> None:
        super().__init__(daemon=True)
        self.conn, self.account = conn, account
        self.answer: Any = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.answer = self.conn.execute("SELECT balance, count FROM balances WHERE "
                                            "account = %s", (self.account,)).fetchall()
        except psycopg.Error as exc:
            self.answer = exc
        finally:
            self.done.set()


def _started_lookup(cluster: Any, port: int, conn: psycopg.Connection[Any],
                    account: str) -> _Lookup:
    """The lookup started, once the node's /metrics counts it as running."""
    name = 'streamiq_sql_statements_total{kind="lookup"}'
    before = metric(cluster, port, name)
    got = _Lookup(conn, account)
    got.start()
    until(lambda: metric(cluster, port, name) == before + 1, 30, "the lookup to start")
    return got

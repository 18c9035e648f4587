"""A resumed subscription's missed rows are read again from Kafka a batch at a time:
sent as read (a stream far behind never held whole), the ends respected, markers and
foreign rows skipped, the consumer closed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import Message

from streamiq.errors import Unavailable
from streamiq.serving.changes import replay as replay_mod
from streamiq.serving.changes.replay import Replay
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER


def _row(account: str, balance: int) -> bytes:
    return json.dumps({"account": account, "balance": balance, "count": 1,
                       "last_update": 0}).encode()


class _Consumer:
    """A consumer of ``records`` (partition -> list), handing over ``batch`` at most per
    call, and nothing on ``stalls`` calls first."""

    def __init__(self) -> None:
        self.records: dict[int, list[Message]] = {}
        self.pos: dict[int, int] = {}
        self.stalls = 0
        self.closed = False
        self.made = 0  # times a Replay made it

    def assign(self, tps: list[Any]) -> None:
        self.pos = {tp.partition: tp.offset for tp in tps}

    def consume(self, n: int, timeout: float) -> list[Message]:
        if self.stalls:
            self.stalls -= 1
            return []
        out: list[Message] = []
        for p, at in self.pos.items():
            got = self.records.get(p, [])[at:at + n - len(out)]
            self.pos[p] = at + len(got)
            out += got
        return out

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> _Consumer:
    import confluent_kafka

    c = _Consumer()

    def make(conf: dict[str, Any]) -> _Consumer:
        c.made += 1
        return c

    monkeypatch.setattr(confluent_kafka, "Consumer", make)
    return c


def test_rows_come_a_batch_at_a_time_up_to_the_end(consumer: _Consumer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_mod, "_BATCH", 4)
    consumer.records[0] = [Message("t", 0, o, f"k{o % 3}".encode(), _row(f"k{o % 3}", o))
                           for o in range(20)]
    consumer.records[0][5] = Message("t", 0, 5, b"m", b"{}", [(MARKER_HEADER, b"1")])
    consumer.records[0][6] = Message("t", 0, 6, b"k0", b"not a row")
    consumer.stalls = 1
    r = Replay({}, "t", BALANCES, 1, {0: (2, 15)}, lambda k: k != b"k2")
    chunks = []
    while (chunk := r.next()) is not None:
        chunks.append(chunk)
    r.close()
    assert chunks[0] == []  # nothing yet: the caller may send a keepalive
    assert all(len(c) <= 4 for c in chunks)  # never more than a batch held
    got = [(c.offset, c.key) for chunk in chunks for c in chunk]
    assert got == [(o, f"k{o % 3}".encode()) for o in range(2, 15)
                   if o not in (5, 6) and o % 3 != 2]
    assert consumer.closed


def test_nothing_to_read_makes_no_consumer(consumer: _Consumer) -> None:
    r = Replay({}, "t", BALANCES, 1, {0: (7, 7)}, lambda k: True)
    assert r.next() is None
    r.close()
    assert consumer.made == 0


def test_a_changelog_that_cannot_be_read_again_is_unavailable(
        consumer: _Consumer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_mod, "_TIMEOUT_S", 0.0)
    r = Replay({}, "t", BALANCES, 1, {0: (0, 5)}, lambda k: True)
    with pytest.raises(Unavailable, match="could not be read again"):
        r.next()
    r.close()
    assert consumer.closed

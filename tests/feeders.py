"""A node of one partition per view whose materializer a test feeds: the real
``Materializer.apply`` over in-memory stores, for the live subscriptions' unit tests
(``tests/unit/serving/changes/``)."""

from __future__ import annotations

import json
from pathlib import Path

from fakes import Message, offline_parts

from streamiq.config import Settings
from streamiq.serving.changelog.materializer import Materializer, PartitionState
from streamiq.serving.node import Node, Parts
from streamiq.state import open_store
from streamiq.supervise import Supervisor
from streamiq.views.bank import BALANCES
from streamiq.views.base import load_app
from streamiq.views.orders import ORDER_COUNTS_1M

TOPIC = {"balances": "cl-b", "order_counts_1m": "cl-w"}


class Feeder:
    """A node of one partition per view whose materializer is fed by the test."""

    def __init__(self, tmp_path: Path, buffer: int) -> None:
        views = {"balances": BALANCES, "order_counts_1m": ORDER_COUNTS_1M}
        stores = {name: open_store("memory", tmp_path / name) for name in views}
        parts = dict.fromkeys(views, 1)
        self.m = Materializer({}, views, stores, TOPIC, partitions=parts)
        for name in views:
            self.m.states[(name, 0)] = PartitionState(restored=True)
        base = offline_parts(parts, self.m)
        self.node = Node(Settings(app="bank,orders", changes_buffer=buffer),
                         load_app("bank,orders"),
                         Parts(parts, TOPIC, stores, self.m, base.membership, base.router,
                               base.discovery), Supervisor())
        self.offset = 0

    def put(self, *rows: tuple[str, int]) -> None:
        msgs = []
        for account, balance in rows:
            value = json.dumps({"account": account, "balance": balance, "count": 1,
                                "last_update": 0}).encode()
            msgs.append(Message(TOPIC["balances"], 0, self.offset, account.encode(), value))
            self.offset += 1
        self.m.apply(msgs)

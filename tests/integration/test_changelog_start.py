"""A restore from empty asks for offset 0 (not the log's start, which a consumer that
does not know the leader yet looks up half a second later: issue 49,
``bench/bench_restore_fetch.py``'s empty polls); a changelog whose log no longer starts
at 0 (records deleted, as retention does) is still read from its start, every row that
is left stored."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from changelog import produce_rows
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from streamiq.serving.changelog.materializer import Materializer
from streamiq.state import open_store
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration


def _restore(bootstrap: str, topic: str, folder: Path) -> Materializer:
    store = open_store("rocksdb", folder)
    m = Materializer({"bootstrap.servers": bootstrap}, {"balances": BALANCES},
                     {"balances": store}, {"balances": topic}, partitions={"balances": 1})
    m.want({("balances", 0)})
    m.start()
    deadline = time.monotonic() + 60
    while not (m.states.get(("balances", 0)) and m.states[("balances", 0)].restored):
        assert time.monotonic() < deadline, "the partition did not restore in 60 s"
        time.sleep(0.02)
    return m


def test_a_changelog_that_no_longer_starts_at_0_is_read_from_its_start(
        bootstrap: str, make_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = make_topic(1, "start")
    produce_rows(bootstrap, topic, BALANCES,
                 ({"account": f"s{i}", "balance": i, "count": 1, "last_update": 0}
                  for i in range(200)))
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its requests die with it
    for f in admin.delete_records([TopicPartition(topic, 0, 120)]).values():
        assert f.result(30).low_watermark == 120  # the log now starts at 120
    m = _restore(bootstrap, topic, tmp_path)
    try:
        store = m.stores["balances"]
        kept = {k.decode() for k, _ in store.scan(0)}
        assert kept == {f"s{i}" for i in range(120, 200)}
        assert m.states[("balances", 0)].offset == 200
        assert store.checkpoint(0).offset == 200  # type: ignore[union-attr]
        assert m.skipped == 0
    finally:
        m.stop()
        m.stores["balances"].close()

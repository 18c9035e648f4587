"""The sender's side of a partition copy (``serving/peer/snapshots.py``): while the
partition is exported (seconds for millions of rows) it says it is alive once a second,
then sends the header, the file's parts and the end."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from streamiq.serving.cluster.wire import REPLY
from streamiq.serving.peer import snapshots
from streamiq.state import Checkpoint, MemoryStore, Snapshot

ROWS = [(f"k{i}".encode(), b"v" * 50) for i in range(1000)]


class _SlowStore(MemoryStore):
    def export(self, partition: int, into: Path) -> Snapshot | None:
        time.sleep(2.5)  # a large partition (in the worker thread, as the real one)
        return super().export(partition, into)


def _queries() -> Any:
    store = _SlowStore()
    store.apply(0, ROWS, Checkpoint(offset=1000))
    node = SimpleNamespace(endpoint="me:1", partitions={"v": 1}, stores={"v": store},
                           materializer=SimpleNamespace(holding=lambda: {
                               ("v", 0): SimpleNamespace(restored=True)}))
    return SimpleNamespace(node=node)


def _statuses(sent: bytes) -> list[int]:
    out, at = [], 0
    while at < len(sent):
        size, _, status = REPLY.unpack_from(sent, at)
        out.append(status)
        at += REPLY.size + size
    return out


async def test_a_slow_export_is_announced_every_second_then_sent(tmp_path: Path) -> None:
    sent = bytearray()
    await snapshots.serve_snapshot(_queries(), 1, {"q": {"view": "v"}, "p": [0], "n": 1},
                                   sent.extend, lambda: 0, 1e9, tmp_path)
    statuses = _statuses(bytes(sent))
    preparing = statuses.count(snapshots.PREPARING)
    assert preparing >= 1, statuses  # 2.5 s of export: 2 on a quiet machine
    assert statuses[:preparing] == [snapshots.PREPARING] * preparing
    assert statuses[preparing] == snapshots.HEADER and statuses[-1] == snapshots.END
    assert set(statuses[preparing + 1:-1]) == {snapshots.PART}
    assert not list(tmp_path.iterdir())  # the file removed once sent

"""A partition copied from a running node over the peer protocol (issue 49 item 1, the
copy): the sender exports it at one moment and streams it, the receiver writes it to a
file and a store takes it in, every row exact and the checkpoint the sender's. Only
with the cluster credential; a partition count not the sender's, or a partition it does
not hold, is refused; a sender killed mid-copy leaves no file behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from changelog import produce_rows
from procs import free_port

from streamiq.auth import hop_mark
from streamiq.errors import NotActive, Unauthenticated
from streamiq.kafka.admin import ensure_topics
from streamiq.serving.cluster.copy import CopyFailed, fetch_snapshot
from streamiq.state import open_store
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

ROWS = 30_000
SECRET = "copy-secret"


def _node(bootstrap: str, tmp_path: Path, procs: Any, *flags: str
          ) -> tuple[str, Any, dict[str, int]]:
    """A node holding every partition of a 2-partition balances changelog, restored;
    its address, its process and each row's balance."""
    prefix = f"cp{uuid.uuid4().hex[:6]}-"
    topic = prefix + BALANCES.changelog_topic
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 2})
    rows = {f"c{i}": i * 7 for i in range(ROWS)}
    produce_rows(bootstrap, topic, BALANCES,
                 ({"account": a, "balance": b, "count": 1, "last_update": 0}
                  for a, b in rows.items()))
    port = free_port()
    node = procs("node", ["--bootstrap-servers", bootstrap, "--cluster", prefix,
                          "--topic-prefix", prefix, "--app", "bank", "--partitions", "2",
                          "--port", str(port), "--state-dir", str(tmp_path / "state"),
                          "--standby-replicas", "0", "--no-auth", "--cluster-secret", SECRET,
                          *flags])
    node.wait_ready(f"http://127.0.0.1:{port}/health", timeout=120)
    return f"127.0.0.1:{port}", node, rows


def test_a_partition_is_copied_whole_and_taken_in(bootstrap: str, tmp_path: Path,
                                                  procs: Any) -> None:
    address, _, rows = _node(bootstrap, tmp_path, procs)
    mark = hop_mark(SECRET)
    store = open_store("rocksdb", tmp_path / "copy")
    got: dict[str, int] = {}
    for p in (0, 1):
        snap = asyncio.run(fetch_snapshot(address, mark, None, "balances", p, 2,
                                          tmp_path / f"p{p}.sst"))
        assert snap.partition == p and snap.rows > 0 and snap.size == snap.path.stat().st_size
        assert store.ingest(snap) == snap.checkpoint
        assert snap.checkpoint.offset == snap.rows  # every changelog record, one row each
        got.update({k.decode(): json.loads(v)["balance"] for k, v in store.scan(p)})
    assert got == rows
    store.close()
    assert not list((tmp_path / "state").rglob("snapshot-*"))  # the sender kept no file


def test_a_copy_needs_the_credential_the_count_and_a_holder(bootstrap: str, tmp_path: Path,
                                                           procs: Any) -> None:
    address, _, _ = _node(bootstrap, tmp_path, procs)
    into = tmp_path / "x.sst"
    with pytest.raises((Unauthenticated, CopyFailed)):
        asyncio.run(fetch_snapshot(address, hop_mark("wrong"), None, "balances", 0, 2, into))
    assert not into.exists()
    with pytest.raises(NotActive):  # counted with 3 partitions: another partition 0
        asyncio.run(fetch_snapshot(address, hop_mark(SECRET), None, "balances", 0, 3, into))
    with pytest.raises(NotActive):
        asyncio.run(fetch_snapshot(address, hop_mark(SECRET), None, "nope", 0, 2, into))
    assert not into.exists()


def test_a_sender_killed_mid_copy_leaves_nothing(bootstrap: str, tmp_path: Path,
                                                 procs: Any, monkeypatch: Any) -> None:
    # sent at 50 kB/s: the file (about 250 kB) takes seconds, so the kill is mid-copy
    address, node, _ = _node(bootstrap, tmp_path, procs, "--snapshot-send-mb-s", "0.05")
    pid = node.proc.pid
    into = tmp_path / "cut.sst"

    async def cut() -> None:
        from streamiq.serving.cluster import copy as copy_module

        real = copy_module._Copy.frame
        killed = False

        def frame(self: Any, status: int, body: bytes) -> bool:
            nonlocal killed
            if status == 200 and not killed:  # the header came: the sender dies now
                killed = True
                os.kill(pid, signal.SIGKILL)
            return real(self, status, body)

        monkeypatch.setattr(copy_module._Copy, "frame", frame)
        await fetch_snapshot(address, hop_mark(SECRET), None, "balances", 0, 2, into)

    with pytest.raises(CopyFailed):
        asyncio.run(cut())
    assert not into.exists()

"""The receiver of a partition snapshot against a sender that misbehaves: every way a
copy can go wrong ends in CopyFailed (or the sender's error) with no file left, and a
whole copy is a Snapshot naming the file (serving/cluster/copy.py)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import orjson
import pytest

from streamiq.errors import NotActive
from streamiq.serving.changelog.partition import Transfer
from streamiq.serving.cluster.copy import CopyFailed, fetch_snapshot
from streamiq.serving.cluster.wire import reply_frame
from streamiq.state import Checkpoint, Snapshot

DATA = b"0123456789" * 1000
HEAD = {"format": "memory-1", "partition": 3, "rows": 10, "size": len(DATA),
        "sha256": hashlib.sha256(DATA).hexdigest(),
        "checkpoint": {"offset": 12, "position": {"in": {"3": 40}}}}


def _frames(*frames: tuple[int, bytes]) -> bytes:
    return b"".join(reply_frame(1, status, body) for status, body in frames)


async def _sender(answer: Callable[[asyncio.StreamWriter], object]
                  ) -> AsyncGenerator[str, None]:
    async def handle(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        result = answer(w)
        if asyncio.iscoroutine(result):
            await result

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()


async def _copy(answer: Callable[[asyncio.StreamWriter], object], into: Path,
                hang_s: float = 5.0, transfer: Transfer | None = None) -> Snapshot:
    gen = _sender(answer)
    address = await gen.__anext__()
    try:
        return await fetch_snapshot(address, "1", None, "balances", 3, 4, into, hang_s,
                                    transfer)
    finally:
        await gen.aclose()


def _writes(data: bytes, close: bool = True) -> Callable[[asyncio.StreamWriter], object]:
    async def go(w: asyncio.StreamWriter) -> None:
        w.write(data)
        await w.drain()
        if close:
            w.close()
        else:
            await asyncio.sleep(30)
    return go


async def test_a_whole_copy_is_a_snapshot_of_the_file(tmp_path: Path) -> None:
    into = tmp_path / "p3"
    parts = [(206, DATA[i:i + 3000]) for i in range(0, len(DATA), 3000)]
    transfer = Transfer("the sender")
    assert transfer.progress()["size"] == -1 and transfer.permil() == 0  # no header yet
    snap = await _copy(_writes(_frames((200, orjson.dumps(HEAD)), *parts, (204, b""))), into,
                       transfer=transfer)
    assert into.read_bytes() == DATA
    assert (transfer.got, transfer.size, transfer.permil()) == (len(DATA), len(DATA), 1000)
    progress = transfer.progress()
    assert progress["copying_from"] == "the sender" and progress["eta_s"] == 0
    assert snap == Snapshot("memory-1", 3, into, Checkpoint(12, {"in": {3: 40}}), 10,
                              len(DATA), hashlib.sha256(DATA).hexdigest())


@pytest.mark.parametrize(("frames", "match"), [
    ([(200, orjson.dumps(HEAD)), (206, DATA[:100]), (204, b"")], "100 bytes of the"),
    ([(200, orjson.dumps(HEAD)), (206, DATA + b"x")], "more than the"),
    ([(200, b"not json")], "a header that is not one"),
    ([(200, orjson.dumps({**HEAD, "checkpoint": 5})), (206, DATA), (204, b"")],
     "a header that is not one"),
    ([(206, DATA)], "out of turn"),
    ([(200, orjson.dumps(HEAD)), (202, b"")], "out of turn"),
    ([(200, orjson.dumps(HEAD)), (206, DATA[:10])], "closed the connection"),
])
async def test_a_copy_that_is_not_whole_fails_and_leaves_no_file(
        tmp_path: Path, frames: list[tuple[int, bytes]], match: str) -> None:
    into = tmp_path / "p3"
    with pytest.raises(CopyFailed, match=match):
        await _copy(_writes(_frames(*frames)), into)
    assert not into.exists()


async def test_the_senders_refusal_is_its_error(tmp_path: Path) -> None:
    into = tmp_path / "p3"
    refusal = NotActive("127.0.0.1:1 holds no restored copy", partition=3)
    with pytest.raises(NotActive):
        await _copy(_writes(_frames((421, refusal.render()))), into)
    assert not into.exists()


async def test_a_sender_gone_quiet_fails_after_the_hang_bound(tmp_path: Path) -> None:
    into = tmp_path / "p3"
    with pytest.raises(CopyFailed, match="sent nothing"):
        await _copy(_writes(_frames((200, orjson.dumps(HEAD)), (206, DATA[:10])),
                            close=False), into, hang_s=0.3)
    assert not into.exists()


async def test_a_sender_exporting_longer_than_the_hang_bound_is_waited_for(
        tmp_path: Path) -> None:
    """A large partition takes the sender seconds to export: its frame a second (202)
    says it is alive, so the copy is not taken for hung (10M keys failed so, each
    partition then replayed from the changelog)."""

    async def slow(w: asyncio.StreamWriter) -> None:
        # 3 s of exporting, the bound 2 s: a frame every 0.1 s leaves the bound 20 times
        # the gap (with 0.3 s, a CI run's loaded loop once let 0.3 s pass between two)
        for _ in range(30):
            w.write(_frames((202, b"")))
            await w.drain()
            await asyncio.sleep(0.1)
        w.write(_frames((200, orjson.dumps(HEAD)), (206, DATA), (204, b"")))
        await w.drain()
        w.close()

    into = tmp_path / "p3"
    snap = await _copy(slow, into, hang_s=2.0)
    assert into.read_bytes() == DATA and snap.size == len(DATA)


async def test_nobody_listening_fails(tmp_path: Path) -> None:
    with pytest.raises(CopyFailed, match="unreachable"):
        await fetch_snapshot("127.0.0.1:1", "1", None, "balances", 3, 4, tmp_path / "p3", 2)
    assert not (tmp_path / "p3").exists()

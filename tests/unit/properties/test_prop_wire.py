"""Peer protocol frames (serving/cluster/wire.py, serving/peer/server.py): request frames
cut anywhere reach the server whole and in order, and any bytes a peer sends never
raise out of ``feed`` (which would kill the connection without an answer)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streamiq.serving.cluster.wire import REPLY, reply_frame, request_frame
from streamiq.serving.peer.server import PeerConnection


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Echo:
    """Answers each request with its id, budget and body."""

    def __init__(self) -> None:
        self.gate: Any = SimpleNamespace(is_mark=lambda got: got == b"k")
        self.seen: list[tuple[int, int, bytes]] = []

    def handle(self, rid: int, budget_ms: int, body: bytes, write: Any,
               waiting: Any = None) -> None:
        self.seen.append((rid, budget_ms, body))
        write(reply_frame(rid, 200, body))


def _serve(chunks: list[bytes]) -> tuple[_Transport, _Echo]:
    loop = asyncio.new_event_loop()
    try:
        t, server = _Transport(), _Echo()
        conn = PeerConnection(server, t, loop, 60)  # type: ignore[arg-type]
        conn.feed(b"k\n")  # the cluster credential first
        for c in chunks:
            conn.feed(c)
        conn.close()
    finally:
        loop.close()
    return t, server


reqs = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.binary(max_size=60))


@given(st.lists(reqs, min_size=1, max_size=5), st.data())
def test_request_frames_reach_the_server_whole_and_in_order(
        rs: list[tuple[int, int, bytes]], data: st.DataObject) -> None:
    stream = b"".join(request_frame(*r) for r in rs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    t, server = _serve(chunks)
    assert server.seen == rs
    assert t.out == b"".join(reply_frame(rid, 200, body) for rid, _, body in rs)


@given(st.lists(st.binary(max_size=40), max_size=6))
def test_any_bytes_never_raise_out_of_feed(chunks: list[bytes]) -> None:
    t, _ = _serve(chunks)  # garbage is read as frames, or waits for more, or closes
    out = t.out
    while out:  # whatever was answered is well-formed reply frames
        size, _, status = REPLY.unpack_from(out)
        assert status == 200 and len(out) >= REPLY.size + size
        out = out[REPLY.size + size:]

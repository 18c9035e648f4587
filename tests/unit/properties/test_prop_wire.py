"""Wire frames (serving/cluster/wire.py): a request frame reaches the lookup unchanged; any bytes
a peer sends get well-formed reply frames (400 for a malformed line), never an
exception out of ``feed`` (which would kill the connection without an answer)."""

from __future__ import annotations

import asyncio
from typing import Any

from garbage import huge_digits
from hypothesis import given
from hypothesis import strategies as st

from streamiq.errors import NotFound
from streamiq.serving.cluster.wire import MAX_LINE, WireServer, reply_frame, request_frame


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True


def _serve(chunks: list[bytes], lookup: Any) -> tuple[_Transport, list[tuple[int, bytes]]]:
    loop = asyncio.new_event_loop()
    try:
        t = _Transport()
        server = WireServer(lookup, t, loop, 60, b"k")
        server.feed(b"k\n")  # the cluster credential first
        for c in chunks:
            server.feed(c)
        server.close()
    finally:
        loop.close()
    return t, _replies(t.out)


def _replies(out: bytes) -> list[tuple[int, bytes]]:
    """Split reply frames (``<status> <length>\\n<body>``); assert they are well formed."""
    frames = []
    while out:
        head, _, rest = out.partition(b"\n")
        status, length = (int(x) for x in head.split(b" "))
        assert len(rest) >= length
        frames.append((status, rest[:length]))
        out = rest[length:]
    return frames


def _echo(p: int, n: int, path: bytes, token: bytes) -> tuple[int, bytes]:
    if path == b"/missing":
        raise NotFound("no such key")
    return 200, b"%d/%d %s %s" % (p, n, path, token)


paths = st.binary(max_size=60).filter(lambda b: b" " not in b and b"\n" not in b)
tokens = st.binary(min_size=1, max_size=40).filter(lambda b: b" " not in b and b"\n" not in b)
parts = st.integers(min_value=0, max_value=2**31)


@given(st.lists(st.tuples(parts, parts, paths, tokens), min_size=1, max_size=5), st.data())
def test_request_frames_reach_the_lookup(reqs: list[tuple[int, int, bytes, bytes]],
                                         data: st.DataObject) -> None:
    stream = b"".join(request_frame(*r) for r in reqs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    _, replies = _serve(chunks, _echo)
    assert replies == [_expected(*r) for r in reqs]


def _expected(p: int, n: int, path: bytes, token: bytes) -> tuple[int, bytes]:
    if path == b"/missing":
        return 404, NotFound("no such key").render()
    return 200, b"%d/%d %s %s" % (p, n, path, token)


line_parts = st.one_of(st.binary(max_size=12), huge_digits.map(str.encode),
                       st.sampled_from([b"", b"1", b"-1", b"01", b"\xd9\xa3", b"/k"]))
lines = st.lists(line_parts, max_size=4).map(b" ".join)


@given(st.lists(lines, max_size=4), st.binary(max_size=30))
def test_garbage_lines_get_reply_frames(ls: list[bytes], tail: bytes) -> None:
    stream = b"".join(line + b"\n" for line in ls) + tail
    t, replies = _serve([stream], _echo)
    assert len(replies) == stream.count(b"\n")
    assert all(status in (200, 400, 404) for status, _ in replies)
    assert t.closed == (len(stream) - stream.rfind(b"\n") - 1 > MAX_LINE)


def test_reply_frame_shape() -> None:
    assert _replies(reply_frame(200, b"x\ny") + reply_frame(404, b"")) == [
        (200, b"x\ny"), (404, b"")]

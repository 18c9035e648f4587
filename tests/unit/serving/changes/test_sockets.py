"""A live stream's socket buffers are capped (the kernel's autotuning would hold
megabytes per stalled reader outside the node's bounds); a peer stream's receiving
socket before it connects."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from streamiq.serving.changes.sockets import RECEIVE_BUFFER, STREAM_BUFFER, cap, connect


class _Transport:
    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None


def test_the_send_buffer_is_capped() -> None:
    a, b = socket.socketpair()
    try:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        cap(_Transport(a))  # type: ignore[arg-type]
        assert a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) <= 2 * STREAM_BUFFER  # x2
    finally:
        a.close()
        b.close()


def test_a_transport_without_a_socket_or_a_closed_one_is_left_alone() -> None:
    cap(_Transport(None))  # type: ignore[arg-type]
    a, b = socket.socketpair()
    a.close()
    b.close()
    cap(_Transport(a))  # type: ignore[arg-type]  # OSError (closed): nothing to cap


def test_a_peer_stream_connects_with_its_receive_buffer_capped_first() -> None:
    async def run() -> int:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = await connect("127.0.0.1", port)
        try:
            assert not sock.getblocking()
            return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
        finally:
            sock.close()
            server.close()

    assert asyncio.run(run()) <= 2 * RECEIVE_BUFFER  # Linux doubles it


def test_a_peer_that_refuses_is_an_oserror() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(OSError):
            asyncio.run(connect("127.0.0.1", port))

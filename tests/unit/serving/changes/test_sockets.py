"""A live stream's socket buffers are capped (the kernel's autotuning would hold
megabytes per stalled reader outside the node's bounds)."""

from __future__ import annotations

import socket
from typing import Any

from streamiq.serving.changes.sockets import STREAM_BUFFER, cap


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


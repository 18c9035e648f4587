"""What a live stream's sockets may hold in the kernel: little (issue 40).

Linux grows a TCP socket's buffers with its connection (here up to 4 MiB to send and
32 MiB to receive, ``net.ipv4.tcp_wmem``/``tcp_rmem``). A subscriber that stops reading
would park megabytes per stream in kernel buffers: outside the node's bounded buffer,
never coalesced, and a thousand stalled streams would hold gigabytes of the machine's
memory. A stream's sending sockets are capped at ``STREAM_BUFFER`` (the kernel doubles
it for its bookkeeping): past that the node's own bound applies (a subscription's
``--changes-buffer``, then the newest value per key). 64 KiB carries thousands of
events a second over a link of 50 ms.

The entry node's receiving socket of a peer stream (``connect``) is capped at
``RECEIVE_BUFFER``, set before it connects. Capped after the handshake, or at 64 KiB,
its window could not open again by a whole segment on loopback (MTU 64 KiB): after a
reader's stall the owner's bytes waited on TCP's persist timer, measured 18-27 s after
a 40 s stall (0.01 s with 32 KiB set first), and the entry took the owner for hung.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

__all__ = ["RECEIVE_BUFFER", "STREAM_BUFFER", "cap", "connect"]

STREAM_BUFFER = 64 * 1024
RECEIVE_BUFFER = 32 * 1024


def cap(transport: asyncio.BaseTransport) -> None:
    """Cap the send buffer of ``transport``'s socket at ``STREAM_BUFFER``."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_BUFFER)


async def connect(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket whose receive buffer was capped at
    ``RECEIVE_BUFFER`` before the handshake (``OSError`` if none of ``host``'s
    addresses answers)."""
    loop = asyncio.get_running_loop()
    error: OSError = OSError(f"{host}:{port}: no address")
    for family, kind, proto, _, addr in await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error

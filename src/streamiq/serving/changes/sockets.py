"""What a live stream's sockets may hold in the kernel: little (issue 40).

Linux grows a TCP socket's buffers with its connection (here up to 4 MiB to send and
32 MiB to receive, ``net.ipv4.tcp_wmem``/``tcp_rmem``). A subscriber that stops reading
would park megabytes per stream in kernel buffers: outside the node's bounded buffer,
never coalesced, and a thousand stalled streams would hold gigabytes of the machine's
memory. A stream's sending sockets are capped at ``STREAM_BUFFER`` (the kernel doubles
it for its bookkeeping): past that the node's own bound applies (a subscription's
``--changes-buffer``, then the newest value per key). 64 KiB carries thousands of
events a second over a link of 50 ms.

The receiving end of a peer stream is capped before it connects
(``serving/cluster/stream.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

__all__ = ["STREAM_BUFFER", "cap"]

STREAM_BUFFER = 64 * 1024


def cap(transport: asyncio.BaseTransport) -> None:
    """Cap the send buffer of ``transport``'s socket at ``STREAM_BUFFER``."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_BUFFER)


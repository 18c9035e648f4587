"""A flood of SQL startups that never send a password, as an attacker (or a broken
client) sharing the real client's address would run it: ``SIZE`` connections from
127.0.0.1, each sending a startup message and nothing more, cycling as fast as one
process can (the oldest closed, a new one opened), in a process of its own so the
client's process does not share its interpreter.

Run as ``python tests/startupflood.py PORT SIZE``; it prints ``cycling`` once it has
opened twice ``SIZE`` connections, and on SIGTERM the number it opened, then exits.
Each close is a reset (SO_LINGER 0): no TIME_WAIT left on a shared host's loopback. The
test or bench that starts it stops it by its PID.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import sys

__all__ = ["startup"]

PARAMS = b"user\x00attacker\x00database\x00streamiq\x00\x00"


def startup(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection from ``source`` that sends a startup message and never a password."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(struct.pack("!ii", 8 + len(PARAMS), 196608) + PARAMS)
    return s


def main(port: int, size: int) -> None:
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    held = [startup(port) for _ in range(size)]
    opened, n = size, 0
    while not stopping:
        held[n].close()
        with contextlib.suppress(OSError):  # refused or reset: the next turn tries again
            held[n] = startup(port)
            opened += 1
        if opened == 2 * size:
            print("cycling", flush=True)
        n = (n + 1) % size
    print(opened, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))

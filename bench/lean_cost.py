"""The Python a node spends on one key lookup, in process, with the sockets replaced by
lists (no syscalls, caches hot): an entry node answering it locally, an entry node
forwarding it (request parsed, peer frame written; the owner's reply read, the answer
written), and the owner answering the peer frame; and, of the forwarded lookup, the
HTTP server's part alone (parse, limits, the response written) and with the lean path's
decision (route, key, partition, token, placement) but no hop. ``bench_hop_cost.py``
prints these beside the lookups' p50s; in a running node each costs two to three times
as much (cold caches after every wake-up).

Usage: .venv/bin/python bench/lean_cost.py [--requests 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nodeapp import make_app

from streamiq.serving.cluster.hop import _Conn
from streamiq.serving.cluster.wire import REPLY, request_body, request_frame
from streamiq.serving.http.asgi import Cycle
from streamiq.serving.http.fastpath import LeanLookups
from streamiq.serving.http.http_limits import HttpEdge
from streamiq.serving.http.leanserve import Answer
from streamiq.serving.http.protocol import HttpProtocol, ServerState
from streamiq.serving.peer.server import PeerConnection
from streamiq.views.bank import BALANCES

OWNER = "127.0.0.1:9"
REQUEST = b"GET /v1/views/balances/keys/a1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
ROW = b'{"account":"a1","balance":5,"count":1,"last_update":9}'


class _Sink:
    """A transport that keeps what is written."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5) if name in ("peername", "sockname") else default

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def _timed(one: Callable[[], None], n: int) -> float:
    for _ in range(min(n, 2000)):
        one()
    t0 = time.perf_counter()
    for _ in range(n):
        one()
    return (time.perf_counter() - t0) / n * 1e6


_CANNED: Answer = (200, ROW, [(b"content-type", b"application/json"),
                              (b"content-length", b"%d" % len(ROW))])


class _HttpOnly(HttpProtocol):
    """The HTTP server's part alone: every request answered at once, the same answer."""

    def _start(self, cycle: Cycle) -> None:
        self.current = cycle
        self.serving.respond(self, cycle, _CANNED)


class _DecideOnly(LeanLookups):
    """The lean path up to its decision to forward: the hop not made, the same answer."""

    def forward(self, *args: Any) -> Answer:  # type: ignore[override]
        return _CANNED


def _entry(forwarded: bool, part: str = "") -> Callable[[], None]:
    app = make_app(Path(tempfile.mkdtemp(prefix="lean-cost-")) / "node")
    if forwarded:
        app.deps.node.router.active = OWNER
    if part == "decide":
        app.__class__ = _DecideOnly
    protocol = _HttpOnly if part == "http" else HttpProtocol
    proto = protocol(ServerState(app, HttpEdge(), app, keep_alive_s=5.0))
    client = _Sink()
    proto.connection_made(client)  # type: ignore[arg-type]
    conn, peer = _Conn(b"1"), _Sink()
    conn.connection_made(peer)  # type: ignore[arg-type]
    app.deps.coordinator.peers.hop._host(OWNER).idle.append(conn)

    def one() -> None:
        proto.data_received(REQUEST)
        if forwarded and not part:
            peer.out.pop()
            conn.data_received(REPLY.pack(len(ROW), conn._rid, 200) + ROW)
        assert client.out.pop().startswith(b"HTTP/1.1 200 OK")

    return one


def _owner() -> Callable[[], None]:
    app = make_app(Path(tempfile.mkdtemp(prefix="lean-cost-")) / "node")
    out = _Sink()
    conn = PeerConnection(app.peer_server, out, asyncio.get_running_loop(), 5.0)  # type: ignore[arg-type]
    conn.feed(b"1\n")
    frame = request_frame(1, 1000, request_body("lookup", {"view": "balances", "key": "a1"},
                                                [BALANCES.partition_of("a1", 3)], 3, None))

    def one() -> None:
        conn.feed(frame)
        assert REPLY.unpack_from(out.out.pop())[2] == 200

    return one


async def _measure(n: int) -> dict[str, float]:
    return {"entry, local": _timed(_entry(False), n),
            "entry, forwarded": _timed(_entry(True), n),
            "  HTTP alone": _timed(_entry(True, "http"), n),
            "  HTTP + decision": _timed(_entry(True, "decide"), n),
            "owner, peer lookup": _timed(_owner(), n)}


def measure(n: int = 50_000) -> dict[str, float]:
    """Microseconds of Python per lookup, by role."""
    return uvloop.run(_measure(n))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=50_000)
    for name, us in measure(ap.parse_args().requests).items():
        print(f"{name:<20} {us:5.1f} us of Python per lookup")

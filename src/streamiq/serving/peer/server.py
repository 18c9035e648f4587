"""The owner's side of the peer protocol: requests in, typed answers out.

One ``PeerConnection`` per connection that opened with the preface and showed the
cluster credential; ``PeerServer`` (one per node) turns each request into a typed query
and a ``Caller`` (the client's token, the partitions asked, the deadline from the
request's budget), runs it through the query layer (``Queries.run``: dispatched on the
query's type, never on a route) and writes its reply (``codec.reply``). Errors are
mapped here, once: a ``StreamiqError`` is its status and problem document, anything
else a 500.

A key lookup without a position is answered inside the read that brought it (one
decision and one store read: ``Reads.decide``); every other request runs in a task, and
its reply carries the request's id, so replies may leave in any order. A request whose
budget is spent before it starts is answered 504 without doing its work (a node that
resumes after a pause finds its peers' old requests waiting).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from time import perf_counter
from typing import Any

import orjson

from streamiq.errors import BadRequest, DeadlineExceeded, Unauthenticated
from streamiq.serving.changes.sockets import cap
from streamiq.serving.cluster.gate import Gate
from streamiq.serving.cluster.placement import Refuse
from streamiq.serving.cluster.wire import MAX_REQUEST, PREFACE, REQUEST, reply_frame
from streamiq.serving.node import SNAPSHOTS
from streamiq.serving.peer.changes import serve_changes
from streamiq.serving.peer.failures import failure
from streamiq.serving.peer.snapshots import serve_snapshot
from streamiq.serving.query import codec, kinds
from streamiq.serving.query.model import Caller, Query
from streamiq.serving.query.run import Queries

__all__ = ["PeerConnection", "PeerServer"]

log = logging.getLogger("streamiq.routing")

_NO_CREDENTIAL = Unauthenticated("a peer connection without the cluster credential")
assert kinds.KINDS  # every query type registered before the first request is read
_Write = Callable[[bytes], None]
_Waiting = Callable[[], int]  # bytes waiting unsent to the peer, -1 once closing


def _waits(doc: Any) -> bool:
    """The request names a position or a staleness bound to wait for (a task answers
    it, not the inline read)."""
    q = doc.get("q")
    fresh = q.get("fresh") if isinstance(q, dict) else None
    return isinstance(fresh, dict) and (bool(fresh.get("position"))
                                        or fresh.get("max_staleness_ms") is not None)


class PeerServer:
    """This node's answers to its peers' requests; served on the node's HTTP port (the
    HTTP server's ``SamePort``: a connection opening with ``PREFACE`` is a peer's)."""

    preface = PREFACE

    def __init__(self, queries: Queries, gate: Gate) -> None:
        self.queries = queries
        self.gate = gate
        self.tasks: set[asyncio.Task[None]] = set()

    def accept(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
               keep_alive_s: float) -> PeerConnection:
        """A peer's connection (its preface read), idle-closed like HTTP keep-alive."""
        return PeerConnection(self, transport, loop, keep_alive_s)

    def handle(self, rid: int, budget_ms: int, body: bytes, write: _Write,
               waiting: _Waiting | None = None) -> None:
        """Answer one request: a lookup now, anything else from a task (its latency
        recorded as served for a peer, under its query's label)."""
        try:
            doc = orjson.loads(body)
            kind = doc.get("k")
            if kind == "changes" and waiting is not None:  # a stream of frames
                self._changes(rid, doc, write, waiting)
                return
            if kind == "snapshot" and waiting is not None:  # a partition's file, in frames
                rate = self.queries.node.settings.snapshot_send_mb_s * 1e6
                self._stream(serve_snapshot(self.queries, rid, doc, write, waiting, rate,
                                            self._scratch()))
                return
            if kind == "lookup" and not _waits(doc):  # the hot path: inline, untimed (the
                write(reply_frame(rid, *self._lookup(doc)))  # entry's "forwarded" has it)
                return
            t0 = perf_counter()
            q, caller = self._read(doc)
            loop = asyncio.get_running_loop()
            caller = dataclasses.replace(caller, deadline=loop.time() + budget_ms / 1000)
        except Exception as exc:
            write(failure(rid, exc, "peer request"))
            return
        task = loop.create_task(self._run(rid, q, caller, write))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda _: self._timed(q.kind, t0))

    def _changes(self, rid: int, doc: Any, write: _Write, waiting: _Waiting) -> None:
        try:
            q, parts, count, token = doc["q"], doc["p"], doc["n"], doc["t"]
            partitions = tuple(parts)
        except (KeyError, TypeError, ValueError):
            raise BadRequest("malformed changes request") from None
        query = codec.changes(q)
        if not (type(count) is int and all(type(p) is int for p in partitions)
                and (token is None or type(token) is str)):
            raise BadRequest("malformed changes request")
        self._check(query.view, count, partitions[0] if partitions else 0, token)
        self._stream(serve_changes(self.queries, rid, query, partitions, write, waiting))

    def _stream(self, answer: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(answer)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _scratch(self) -> Path:
        """Where this node writes the snapshots it sends (its own state folder)."""
        node = self.queries.node
        return node.state_root() / SNAPSHOTS

    def _timed(self, kind: str, t0: float) -> None:
        latency = self.queries.coordinator.traffic.latency
        if latency is not None:
            latency.observe((kind, "peer"), perf_counter() - t0)

    def _read(self, doc: Any) -> tuple[Query, Caller]:
        try:
            q = codec.decode(doc["k"], doc["q"])
            partitions, count, token = list(doc["p"]), int(doc["n"]), doc["t"]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BadRequest("malformed peer request") from None
        self._check(q.view, count, partitions[0] if partitions else 0, token)
        return q, Caller(None if token is None else str(token), True, partitions)

    def _check(self, view: str, count: int, p: int, token: Any) -> None:
        """The partition count the entry used is this node's (else: not the same
        partition, 421), and the client's token may read the view."""
        n = self.queries.node.partitions.get(view)
        if n is not None and count != n:
            raise self.queries.not_held(view, p)
        if self.gate.auth.enabled:
            self.gate.auth.reader(None if token is None else str(token), view)

    def _lookup(self, doc: Any) -> tuple[int, bytes]:
        """A key lookup decided and read now (the entry computed its partition); with a
        position to wait for, the typed query's own path (a task)."""
        name, key, p, count, token = codec.read_lookup(doc)
        self._check(name, count, p, token)
        qs = self.queries
        view = qs.view(name)
        if view.windowed:
            raise BadRequest(f"view {name!r} is windowed: a lookup asks a keyed view")
        # max_lag chose this replica on the asking node; here it is answered or refused
        d = qs.answer_peer(view, key, p)
        if isinstance(d, Refuse):
            raise d.error
        return d

    async def _run(self, rid: int, q: Query, caller: Caller, write: _Write) -> None:
        try:
            assert caller.deadline is not None
            if asyncio.get_running_loop().time() >= caller.deadline:
                raise DeadlineExceeded("the budget was spent before the request started")
            async with asyncio.timeout_at(caller.deadline):
                answer: Any = await self.queries.run(q, caller)
        except TimeoutError:
            budget = DeadlineExceeded(f"no answer within the budget ({q.kind})")
            write(failure(rid, budget, "peer request"))
            return
        except Exception as exc:
            write(failure(rid, exc, f"peer request ({q.kind})"))
            return
        write(reply_frame(rid, *codec.reply(answer)))


class PeerConnection:
    """The owner's side of one peer connection: frames in, frames out.

    A connection with no request for ``idle_timeout`` to twice that long is closed, like
    an idle HTTP keep-alive connection.
    """

    __slots__ = ("_buf", "_capped", "_marked", "_seen", "_server", "_timeout", "_timer",
                 "_transport")

    def __init__(self, server: PeerServer, transport: asyncio.Transport,
                 loop: asyncio.AbstractEventLoop, idle_timeout: float) -> None:
        self._server = server
        self._marked = False  # the cluster credential line came first (gate.py)
        self._transport = transport
        self._buf = bytearray()
        self._seen = True
        self._capped = False
        self._timeout = idle_timeout
        self._timer: asyncio.TimerHandle | None = loop.call_later(idle_timeout, self._idle)

    @property
    def authenticated(self) -> bool:
        """The peer sent the cluster credential line (a stalled stranger has not)."""
        return self._marked

    def feed(self, data: bytes) -> None:
        self._seen = True
        buf = self._buf
        buf += data
        if not self._marked:
            end = buf.find(b"\n")
            if end < 0:
                if len(buf) > 4096:
                    self._refuse()
                return
            if not self._server.gate.is_mark(bytes(buf[:end])):
                self._refuse()
                return
            self._marked = True
            del buf[:end + 1]
        start = 0
        while len(buf) - start >= REQUEST.size:
            size, rid, budget = REQUEST.unpack_from(buf, start)
            if size > MAX_REQUEST:
                log.warning("peer request of %d bytes; closing the connection", size)
                self._transport.close()
                return
            end = start + REQUEST.size + size
            if len(buf) < end:
                break
            body = bytes(buf[start + REQUEST.size:end])
            start = end
            self._server.handle(rid, budget, body, self._write, self._waiting)
        del buf[:start]

    def _write(self, frame: bytes) -> None:
        if not self._transport.is_closing():
            self._transport.write(frame)

    def _waiting(self) -> int:
        """The bytes not yet sent to the peer, -1 once closing: what a subscription's
        stream watches after each frame (``serving/peer/changes.py``), which also keeps
        the connection from being idle."""
        if self._transport.is_closing():
            return -1
        if not self._capped:  # it carries a stream: little held in the kernel
            self._capped = True
            cap(self._transport)
        self._seen = True
        return self._transport.get_write_buffer_size()

    def _refuse(self) -> None:
        log.warning("peer connection without the cluster credential; closing it")
        self._transport.write(reply_frame(0, *codec.reply(_NO_CREDENTIAL)))
        self._transport.close()
        self._buf.clear()

    def _idle(self) -> None:
        if not self._seen:
            self._timer = None
            self._transport.close()
            return
        self._seen = False
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self._idle)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

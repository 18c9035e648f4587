"""One live subscription on this node: its first values or its resume, then its changes.

``Subscription.open`` (before any byte is sent, so a refusal is a clean 4xx) checks that
this node holds every partition of the scope, registers an inbox with the materializer's
feed and, under the feed's lock, takes the partitions' offsets and starts reading the
scope's rows (RocksDB iterators see the store as of their start). ``events`` then yields:

* without a position: the current rows (no ``id``), then ``ready`` with the position
  they reflect;
* with a position: the rows from there to the store's offsets, read again from Kafka
  (``replay.py``: sent as read, a ``keepalive`` while reading), or past
  ``--changes-replay-max`` records a ``reset`` and the current rows, each ``coalesced``;
* then each change as the feed hands it over, ``id`` the position after it; changes
  below the position already delivered are dropped (no duplicate); keys the inbox
  coalesced are read back under the lock and sent ``coalesced``;
* ``keepalive`` when idle, ``end`` when the node stops holding a partition.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from streamiq.errors import NotActive
from streamiq.kafka.clientlog import logged
from streamiq.serving.changelog.feed import Change, Inbox, Taken, view_key
from streamiq.serving.changes.position import render
from streamiq.serving.changes.replay import Replay
from streamiq.serving.node import Node
from streamiq.views.base import View

__all__ = ["Event", "Scope", "Subscription"]

_CHUNK = 256  # rows read per worker-thread call while sending a scope's rows
_WINDOW = 9  # a windowed store key's suffix: a zero byte, the window start (8 bytes)


@dataclass(frozen=True)
class Scope:
    """What a subscription watches: a view's ``keys``, a ``prefix``, or (neither) all
    of it, over the changelog ``partitions`` that hold them."""

    view: View
    partitions: tuple[int, ...]
    keys: tuple[str, ...] | None = None
    prefix: str | None = None
    #: changes from now on only: no first rows (an aggregate's trigger)
    tail: bool = False

    def wanted(self) -> Callable[[bytes], bool]:
        """Whether a store key is in scope."""
        windowed = self.view.windowed
        if self.keys is not None:
            keys = {k.encode() for k in self.keys}
            return lambda k: view_key(k, windowed) in keys
        if self.prefix is not None:
            prefix = self.prefix.encode()
            return lambda k: k.startswith(prefix)
        return lambda k: True


@dataclass(frozen=True, slots=True)
class Event:
    """One thing to send: ``data`` (JSON) with an ``id`` or not, of a ``kind`` (None: a
    change; ``ready``, ``reset``, ``end``; ``keepalive``: a comment)."""

    data: bytes | None = None
    id: str | None = None
    kind: str | None = None
    at: float | None = None  # when the change was applied (time.monotonic), if one


def _started(it: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """The iterator with its first row read: its snapshot taken now."""
    first = next(it, None)
    return it if first is None else itertools.chain([first], it)


class Subscription:
    """See the module's docstring."""

    def __init__(self, node: Node, scope: Scope, start: dict[int, int] | None) -> None:
        self.node = node
        self.scope = scope
        self.start = start
        self.feed = node.materializer.feed
        self.wanted = scope.wanted()
        v = scope.view
        self.inbox = Inbox(v.name, frozenset(scope.partitions), v.windowed,
                           node.settings.changes_buffer, asyncio.get_running_loop(),
                           keys=None if scope.keys is None else frozenset(
                               k.encode() for k in scope.keys),
                           prefix=None if scope.prefix is None else scope.prefix.encode())
        self.cursor: dict[int, int] = {}
        self._rows: list[tuple[int, Iterator[tuple[bytes, bytes | None]]]] = []
        self._closed = False

    @classmethod
    async def open(cls, node: Node, scope: Scope, start: dict[int, int] | None
                   ) -> Subscription:
        sub = cls(node, scope, start)
        await asyncio.to_thread(sub._register)
        return sub

    # -- under the feed's lock (a worker thread) --
    def _register(self) -> None:
        with self.feed.lock:
            self.cursor = self._offsets()
            self.feed.add(self.inbox)
            if self.start is None and not self.scope.tail:
                self._rows = self._read_scope()

    def _offsets(self) -> dict[int, int]:
        """Where the store stands per partition (the feed's lock held); NotActive when
        this node does not hold one restored."""
        states = self.node.materializer.states
        out = {}
        for p in self.scope.partitions:
            st = states.get((self.scope.view.name, p))
            if st is None or not st.restored:
                raise NotActive(f"{self.node.endpoint} does not hold partition {p} of "
                                f"{self.scope.view.name!r}", partition=p,
                                served_by=self.node.endpoint)
            out[p] = st.offset
        return out

    def _read_scope(self) -> list[tuple[int, Iterator[tuple[bytes, bytes | None]]]]:
        """The scope's rows as the store holds them now (iterators started: the
        feed's lock held)."""
        store = self.node.stores[self.scope.view.name]
        out: list[tuple[int, Iterator[tuple[bytes, bytes | None]]]] = []
        keys, prefix = self.scope.keys, self.scope.prefix
        v = self.scope.view
        for p in self.scope.partitions:
            mine = [k.encode() for k in keys or ()
                    if v.partition_of(k, self.node.partitions[v.name]) == p]
            if keys is not None and not v.windowed:
                out.append((p, iter(list(zip(mine, store.multi_get(p, mine), strict=True)))))
            elif keys is not None:
                for raw in mine:
                    out.append((p, _started(store.scan(p, raw + b"\x00", raw + b"\x01"))))
            else:
                raw = (prefix or "").encode()
                out.append((p, _started(_prefixed(store.scan(p, raw or None), raw))))
        return out

    def _read_dirty(self, dirty: dict[bytes, int]) -> list[Change]:
        """The newest value of each coalesced key, and the position it reflects."""
        store = self.node.stores[self.scope.view.name]
        with self.feed.lock:
            # what came since the take: its keys are read too (the position moves past it)
            more = self.inbox.drain()
            if more.reset:
                self.inbox.again()
            for c in more.changes:
                dirty[c.key] = c.partition
            dirty.update(more.dirty)
            self.cursor = self._offsets()
            return [Change(p, -1, k, store.get(p, k), 0.0, coalesced=True)
                    for k, p in dirty.items()]

    def _reset(self) -> None:
        with self.feed.lock:
            self.inbox.drain()  # reflected in the rows read now
            self.cursor = self._offsets()
            self._rows = self._read_scope()

    # -- the events (the event loop) --
    async def events(self, keepalive_s: float) -> AsyncGenerator[Event]:
        try:
            if self.start is None:
                async for e in self._scope_events(coalesced=False):
                    yield e
            else:
                async for e in self._resume():
                    yield e
            while True:
                if not await self.inbox.wait(self.feed.lock, keepalive_s):
                    yield Event(kind="keepalive")
                    continue
                taken = self.inbox.take(self.feed.lock)
                async for e in self._taken(taken):
                    yield e
                if taken.ended is not None:
                    return
        except NotActive as exc:  # a partition was handed over while reading it again
            yield Event(kind="end", data=orjson.dumps({"reason": exc.message}),
                        id=render(self.cursor))
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self.feed.lock:
                self.feed.remove(self.inbox)

    async def _taken(self, taken: Taken) -> AsyncIterator[Event]:
        for c in taken.changes:
            if c.offset >= self.cursor[c.partition]:
                self.cursor[c.partition] = c.offset + 1
                yield self._change(c, render(self.cursor))
        if taken.reset:
            await asyncio.to_thread(self._reset)
            yield Event(kind="reset", data=b"{}")
            async for e in self._scope_events(coalesced=True):
                yield e
        elif taken.dirty:
            changes = await asyncio.to_thread(self._read_dirty, taken.dirty)
            last = len(changes) - 1
            for i, c in enumerate(changes):
                yield self._change(c, render(self.cursor) if i == last else None)
        if taken.ended is not None:
            yield Event(kind="end", data=orjson.dumps({"reason": taken.ended}),
                        id=render(self.cursor))

    async def _scope_events(self, coalesced: bool) -> AsyncIterator[Event]:
        """The rows read when registering or resetting, then ``ready`` with their
        position."""
        rows, self._rows = self._rows, []
        for p, it in rows:
            while chunk := await asyncio.to_thread(lambda it=it: list(  # type: ignore[misc]
                    itertools.islice(it, _CHUNK))):
                for k, v in chunk:
                    yield self._change(Change(p, -1, k, v, 0.0, coalesced=coalesced), None,
                                       first=True)
        yield Event(kind="ready", data=orjson.dumps({"position": render(self.cursor)}),
                    id=render(self.cursor))

    async def _resume(self) -> AsyncIterator[Event]:
        """From the position asked to where the store stood when registering."""
        assert self.start is not None
        stood, self.cursor = self.cursor, dict(self.start)
        spans = {p: (self.start[p], stood[p]) for p in stood if self.start[p] < stood[p]}
        if sum(end - start for start, end in spans.values()) > \
                self.node.settings.changes_replay_max:
            await asyncio.to_thread(self._reset)
            yield Event(kind="reset", data=b"{}")
            async for e in self._scope_events(coalesced=True):
                yield e
            return
        name = self.scope.view.name
        missed = await asyncio.to_thread(
            Replay, logged(self.node.settings.kafka()), self.node.topics[name],
            self.scope.view, self.node.partitions[name], spans, self.wanted)
        try:
            clock = asyncio.get_running_loop().time
            sent = clock()
            while (chunk := await asyncio.to_thread(missed.next)) is not None:
                if not chunk and clock() - sent >= 1.0:
                    sent = clock()  # still reading: alive (a peer's hang bound is 3 s)
                    yield Event(kind="keepalive")
                for c in chunk:
                    if c.offset >= self.cursor[c.partition]:
                        self.cursor[c.partition] = c.offset + 1
                        sent = clock()
                        yield self._change(c, render(self.cursor))
        finally:  # closing a consumer blocks: in a worker thread, as it was made
            await asyncio.to_thread(missed.close)
        for p, (_, end) in spans.items():  # markers and other keys' rows up to there
            self.cursor[p] = max(self.cursor[p], end)
        yield Event(kind="ready", data=orjson.dumps({"position": render(self.cursor)}),
                    id=render(self.cursor))

    def _change(self, c: Change, id_: str | None, first: bool = False) -> Event:
        v = self.scope.view
        key = view_key(c.key, v.windowed)
        doc: dict[str, Any] = {"view": v.name, "key": key.decode(), "partition": c.partition}
        if c.offset >= 0:
            doc["offset"] = c.offset
        doc["found"] = c.value is not None
        doc["value"] = None if c.value is None else orjson.Fragment(c.value)
        if v.windowed:
            doc["window_start"] = int.from_bytes(c.key[-(_WINDOW - 1):], "big", signed=True)
            doc["window_end"] = _window_end(c.value)
        if c.value is None and not first:
            doc["deleted"] = True
        if c.coalesced:
            doc["coalesced"] = True
        return Event(data=orjson.dumps(doc), id=id_, at=c.at or None)


def _prefixed(rows: Iterator[tuple[bytes, bytes]], prefix: bytes
              ) -> Iterator[tuple[bytes, bytes]]:
    for k, v in rows:
        if not k.startswith(prefix):
            return
        yield k, v


def _window_end(value: bytes | None) -> int | None:
    if value is None:
        return None
    end = orjson.loads(value).get("window_end")
    return end if isinstance(end, int) else None

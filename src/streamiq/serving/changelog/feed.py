"""Changes handed from the materializer to live subscriptions (issue 40).

The materializer, after applying a partition's records, calls :meth:`Feed.publish`
holding :attr:`Feed.lock`, the lock under which it wrote the store and moved the
partition's offset. A subscription takes the same lock to register its :class:`Inbox`
and read its first values and offsets, so every change is either in those or handed to
the inbox afterwards: never both, never neither. With nobody subscribed to a partition,
a publish is one dict lookup.

An inbox is bounded: past ``size`` changes it stops keeping changes and keeps only the
keys they touched (``dirty``, at most ``8 * size``); past that, ``reset``: the reader
reads the scope again. The reader (on the event loop) drains it with :meth:`Inbox.take`;
the materializer's thread wakes it with one ``call_soon_threadsafe`` per batch and loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Change", "Feed", "Inbox", "Taken", "view_key"]

K = TypeVar("K")
#: a windowed view's store key: the view key, a zero byte, the window start (8 bytes)
_WINDOW_SUFFIX = 9


def view_key(store_key: bytes, windowed: bool) -> bytes:
    """The view key (UTF-8) of a store key."""
    return store_key[:-_WINDOW_SUFFIX] if windowed else store_key


@dataclass(frozen=True, slots=True)
class Change:
    """One applied changelog row: its partition and offset, store key, value (None:
    deleted) and when it was applied (``time.monotonic()``); ``coalesced``: read back
    from the store, standing for one or more changes."""

    partition: int
    offset: int
    key: bytes
    value: bytes | None
    at: float
    coalesced: bool = False


@dataclass
class Taken:
    """What a reader took from its inbox: changes in order, then keys whose newest value
    it must read (``dirty``: store key -> partition), or a whole ``reset``; ``ended``:
    why the feed will give no more (the partition is no longer held)."""

    changes: list[Change]
    dirty: dict[bytes, int]
    reset: bool
    ended: str | None


@dataclass(eq=False)
class Inbox:
    """One subscription's bounded buffer over some partitions of a view: its ``keys``
    (view keys, UTF-8), a ``prefix``, or (neither) every row."""

    view: str
    partitions: frozenset[int]
    windowed: bool
    size: int
    loop: asyncio.AbstractEventLoop
    keys: frozenset[bytes] | None = None
    prefix: bytes | None = None
    _buffer: deque[Change] = field(default_factory=deque)
    _dirty: dict[bytes, int] = field(default_factory=dict)
    _reset: bool = False
    _ended: str | None = None
    _waiting: bool = False
    _event: asyncio.Event = field(default_factory=asyncio.Event)
    #: changes handed over since the subscription began, and how many were coalesced
    coalesced: int = 0

    def matches(self, key: bytes) -> bool:
        if self.prefix is not None:
            return key.startswith(self.prefix)
        return True  # keyed inboxes are indexed by key: only their keys reach them

    def _put(self, change: Change) -> bool:
        """Keep a change (the feed's lock held); True if the reader must be woken."""
        if self._reset or self._ended is not None:
            pass
        elif self._dirty or len(self._buffer) >= self.size:
            self.coalesced += 1
            self._dirty[change.key] = change.partition
            if len(self._dirty) > 8 * self.size:
                self._dirty.clear()
                self._reset = True
        else:
            self._buffer.append(change)
        return self._wake()

    def _end(self, reason: str) -> bool:
        if self._ended is None:
            self._ended = reason
        return self._wake()

    def _wake(self) -> bool:
        if self._waiting:
            self._waiting = False
            return True
        return False

    def take(self, lock: threading.Lock) -> Taken:
        """Everything waiting, the inbox emptied (any thread)."""
        with lock:
            return self.drain()

    def drain(self) -> Taken:
        """Everything waiting, the inbox emptied (the feed's lock held); ``ended`` stays."""
        taken = Taken(list(self._buffer), self._dirty, self._reset, self._ended)
        self._buffer.clear()
        self._dirty = {}
        self._reset = False
        return taken

    def again(self) -> None:
        """Reset at the next take (the feed's lock held): a reset came while reading."""
        self._reset = True

    async def wait(self, lock: threading.Lock, timeout: float) -> bool:
        """Wait until something comes (True) or ``timeout`` passes (False)."""
        with lock:
            if self._buffer or self._dirty or self._reset or self._ended is not None:
                return True
            self._waiting = True
            self._event.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            with lock:
                self._waiting = False


def _wake_all(inboxes: list[Inbox]) -> None:
    for inbox in inboxes:
        inbox._event.set()


class Feed:
    """The subscriptions of one node, indexed by (view, partition): keyed inboxes by view
    key, the others (a prefix, a whole view) in a list."""

    def __init__(self) -> None:
        #: held by the materializer while it writes a batch, moves the offset and
        #: publishes, and by a subscription while it registers and reads its first values
        self.lock = threading.Lock()
        self._keyed: dict[tuple[str, int], dict[bytes, list[Inbox]]] = {}
        self._broad: dict[tuple[str, int], list[Inbox]] = {}
        self.open = 0  # inboxes registered now

    # -- the subscriptions' side (the lock held by the caller) --
    def add(self, inbox: Inbox) -> None:
        for p in inbox.partitions:
            vp = (inbox.view, p)
            if inbox.keys is None:
                self._broad.setdefault(vp, []).append(inbox)
            else:
                keyed = self._keyed.setdefault(vp, {})
                for k in inbox.keys:
                    keyed.setdefault(k, []).append(inbox)
        self.open += 1

    def remove(self, inbox: Inbox) -> None:
        for p in inbox.partitions:
            vp = (inbox.view, p)
            if inbox.keys is None:
                _discard(self._broad, vp, inbox)
            elif (keyed := self._keyed.get(vp)) is not None:
                for k in inbox.keys:
                    _discard(keyed, k, inbox)
                if not keyed:
                    del self._keyed[vp]
        self.open -= 1

    # -- the materializer's side (the lock held by the caller) --
    def watched(self, view: str, p: int) -> bool:
        return (view, p) in self._broad or (view, p) in self._keyed

    def publish(self, view: str, p: int, windowed: bool,
                rows: list[tuple[int, bytes, bytes | None]]) -> None:
        """Hand applied rows (offset, store key, value) to the inboxes that watch them."""
        broad = self._broad.get((view, p), ())
        keyed = self._keyed.get((view, p))
        if not broad and not keyed:
            return
        now = time.monotonic()
        woken: list[Inbox] = []
        for offset, key, value in rows:
            change = Change(p, offset, key, value, now)
            for inbox in broad:
                if inbox.matches(key) and inbox._put(change):
                    woken.append(inbox)
            if keyed:
                for inbox in keyed.get(view_key(key, windowed), ()):
                    if inbox._put(change):
                        woken.append(inbox)
        _schedule(woken)

    def end(self, view: str, p: int, reason: str) -> None:
        """The partition is no longer held here: its subscriptions end."""
        inboxes = list(self._broad.get((view, p), ()))
        for keyed in self._keyed.get((view, p), {}).values():
            inboxes.extend(keyed)
        _schedule([i for i in inboxes if i._end(reason)])

    def end_all(self, reason: str) -> None:
        for view, p in {*self._broad, *self._keyed}:
            self.end(view, p, reason)


def _schedule(woken: list[Inbox]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[Inbox]] = {}
    for inbox in woken:
        by_loop.setdefault(inbox.loop, []).append(inbox)
    for loop, inboxes in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: the node is stopping
            loop.call_soon_threadsafe(_wake_all, inboxes)


def _discard(index: dict[K, list[Inbox]], k: K, inbox: Inbox) -> None:
    items = index.get(k)
    if items is not None:
        items[:] = [i for i in items if i is not inbox]
        if not items:
            del index[k]

